package ipc

import (
	"testing"
)

// FuzzParseAutoTable: ParseAutoTable takes any bytes without panicking,
// and a table it accepts answers every message size for each (ranks,
// mode) it has rules for, with oneshot or twoshot, and fills in the
// built-in rules for the rest.
func FuzzParseAutoTable(f *testing.F) {
	f.Add(defaultAutoTable)
	for _, s := range []string{
		`{}`,
		`{"rules":[]}`,
		`{"rules":[{"ranks":2,"graph":true,"max_bytes":1024,"strategy":"oneshot"},{"ranks":2,"graph":true,"max_bytes":0,"strategy":"twoshot"}]}`,
		`{"rules":[{"ranks":2,"graph":false,"max_bytes":0,"strategy":"auto"}]}`,
		`{"rules":[{"ranks":9,"graph":false,"max_bytes":-1,"strategy":"oneshot"}]}`,
		`{"source":"x","rules":[{"ranks":4,"graph":false,"max_bytes":10,"strategy":"twoshot"},{"ranks":4,"graph":false,"max_bytes":5,"strategy":"oneshot"}]}`,
		`{"rules":null,"extra":1}`,
	} {
		f.Add([]byte(s))
	}
	def, err := ParseAutoTable(defaultAutoTable)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := ParseAutoTable(b)
		if err != nil {
			return
		}
		sizes := []int64{0, 1, 1023, 1 << 20, 1 << 40}
		for _, r := range tab.Rows {
			for _, n := range sizes {
				s, ok := tab.Pick(n, r.Ranks, r.Graph)
				if !ok || (s != OneShot && s != TwoShot) {
					t.Fatalf("ranks %d graph %v, %d bytes: %v, %v", r.Ranks, r.Graph, n, s, ok)
				}
			}
		}
		tab.fill(def)
		for _, r := range def.Rows {
			if _, ok := tab.Pick(1, r.Ranks, r.Graph); !ok {
				t.Fatalf("after fill: no rule for ranks %d graph %v", r.Ranks, r.Graph)
			}
		}
	})
}

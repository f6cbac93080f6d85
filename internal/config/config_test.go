package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		val        string
		bool       bool
		boolErr    bool
		dur        time.Duration
		durSet     bool
		durErr     bool
		n          int
		intSet     bool
		intErr     bool
		choice     string
		choiceErrs bool
	}{
		{val: "", choice: ""},
		{val: "0", dur: 0, durSet: true, n: 0, intSet: true, choiceErrs: true},
		{val: "1", bool: true, durErr: true, n: 1, intSet: true, choiceErrs: true},
		{val: "10s", boolErr: true, dur: 10 * time.Second, durSet: true, intErr: true, choiceErrs: true},
		{val: "-3", boolErr: true, durErr: true, intErr: true, choiceErrs: true},
		{val: "park", boolErr: true, durErr: true, intErr: true, choice: "park"},
	} {
		e := FromList([]string{"PATH=/bin", "CHORUS_X=" + tc.val, "CHORUS_" + "NOT_IN_TABLE=1"})
		if got := e.Get(TestX); got != tc.val {
			t.Errorf("%q: Get = %q", tc.val, got)
		}
		b, err := e.Bool(TestX)
		if (err != nil) != tc.boolErr || b != tc.bool {
			t.Errorf("%q: Bool = %v, %v", tc.val, b, err)
		}
		d, set, err := e.Duration(TestX)
		if (err != nil) != tc.durErr || d != tc.dur || set != tc.durSet {
			t.Errorf("%q: Duration = %v, %v, %v", tc.val, d, set, err)
		}
		n, set, err := e.Int(TestX, 0)
		if (err != nil) != tc.intErr || n != tc.n || set != tc.intSet {
			t.Errorf("%q: Int = %v, %v, %v", tc.val, n, set, err)
		}
		c, err := e.Choice(TestX, "busy", "park")
		if (err != nil) != tc.choiceErrs || (err == nil && c != tc.choice) {
			t.Errorf("%q: Choice = %q, %v", tc.val, c, err)
		}
		for _, err := range []error{errOf(e.Bool(TestX)), errOf3(e.Duration(TestX)), errOf3(e.Int(TestX, 0))} {
			if err != nil && (!errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), "CHORUS_X=")) {
				t.Errorf("%q: %v: want ErrBadValue naming CHORUS_X", tc.val, err)
			}
		}
	}
}

func errOf[T any](_ T, err error) error { return err }

func errOf3[T any](_ T, _ bool, err error) error { return err }

// TestWith: a process session's Env wins over the controller's
// environment; variables outside the table are left out.
func TestWith(t *testing.T) {
	base := FromList([]string{"CHORUS_X=1", "CHORUS_FAKE_GPU=0"})
	e := base.With([]string{"CHORUS_FAKE_GPU=1", "CHORUS_" + "UNKNOWN=1", "junk"})
	if e.Get(FakeGPU) != "1" || e.Get(TestX) != "1" || base.Get(FakeGPU) != "0" {
		t.Fatalf("With: fake %q x %q, base fake %q", e.Get(FakeGPU), e.Get(TestX), base.Get(FakeGPU))
	}
	if _, ok := e.m["CHORUS_"+"UNKNOWN"]; ok {
		t.Fatal("a variable outside the table was kept")
	}
}

// TestTable: names are CHORUS_ and upper case, each has a meaning and a
// reader, and user variables say their default.
func TestTable(t *testing.T) {
	for _, v := range Vars() {
		if !strings.HasPrefix(v.Name, "CHORUS_") || strings.ToUpper(v.Name) != v.Name {
			t.Errorf("%s: want CHORUS_ and upper case", v.Name)
		}
		if v.Meaning == "" || v.Reader == "" || strings.Contains(v.Meaning, "|") {
			t.Errorf("%s: want a meaning (no |) and a reader", v.Name)
		}
		if v.Class != Test && v.Default == "" {
			t.Errorf("%s: no default", v.Name)
		}
		if got, ok := Lookup(v.Name); !ok || got != v {
			t.Errorf("Lookup(%s) = %+v, %v", v.Name, got, ok)
		}
		if !strings.Contains(string(Markdown()), "| `"+v.Name+"` |") {
			t.Errorf("%s: not on the page", v.Name)
		}
	}
	if _, ok := Lookup("CHORUS_" + "NOT_IN_TABLE"); ok {
		t.Error("Lookup found a name outside the table")
	}
}

func TestUnknown(t *testing.T) {
	got := Unknown([]string{"PATH=/bin", "CHORUS_TRACE=x", "CHORUS_HIER_STRIPES=4", "CHORUS_SHM_LOG=0", "CHORUSX=1"})
	if strings.Join(got, " ") != "CHORUS_HIER_STRIPES CHORUS_SHM_LOG" {
		t.Fatalf("Unknown = %q", got)
	}
}

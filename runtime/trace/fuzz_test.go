package trace

import (
	"bytes"
	"sort"
	"testing"
)

// FuzzRead: Read never panics; a file that reads and validates writes
// back to a file that reads to the same events.
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	if err := Write(&buf, sample()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`[{"name":"a","ph":"X","ts":1.5,"dur":2,"pid":1,"tid":1}]`))
	f.Add([]byte(`{"traceEvents":[{"name":"process_name","ph":"M","pid":1,"args":{"name":"worker 0"}},{"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"commands"}},{"name":"f","ph":"B","ts":0,"pid":1,"tid":2},{"name":"f","ph":"E","ts":1,"pid":1,"tid":2}]}`))
	f.Add([]byte(`{"traceEvents":[],"otherData":{"origin_unix_ns":5}}`))
	f.Add([]byte(`{"traceEvents":[],"otherData":{"origin_unix_ns":5,"hosts":[{"node":1,"clock_offset_ns":-12}],"x":null}}`))
	f.Add([]byte(`{"traceEvents":[{"ph":"i","ts":-0.0005,"pid":-1,"tid":-3,"args":{"rank":-1,"seq":18446744073709551615}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		f1, err := Read(data)
		if err != nil {
			return
		}
		Summarize(f1) // must not panic either
		if Validate(f1) != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteFile(&out, f1); err != nil {
			t.Fatal(err)
		}
		f2, err := Read(out.Bytes())
		if err != nil {
			t.Fatalf("re-read: %v\n%s", err, out.String())
		}
		if err := Validate(f2); err != nil {
			t.Fatalf("re-validate: %v\n%s", err, out.String())
		}
		a := append([]Event(nil), f1.Events...)
		sort.SliceStable(a, func(i, j int) bool { return a[i].TS < a[j].TS })
		if len(a) != len(f2.Events) {
			t.Fatalf("%d events became %d", len(a), len(f2.Events))
		}
		for i := range a {
			if eventKey(a[i]) != eventKey(f2.Events[i]) {
				t.Fatalf("event %d: %+v became %+v", i, a[i], f2.Events[i])
			}
		}
	})
}

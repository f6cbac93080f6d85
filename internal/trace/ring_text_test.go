package trace

import "testing"

// Slots reuse their text words when an event has the same strings as
// the slot's last one, and rewrite them when it does not: the names read
// back are always the event's.
func TestRingTextReuse(t *testing.T) {
	r := NewHeapRing(3, 0)
	names := []string{"alpha", "alpha", "beta", "a-much-longer-function-name-that-gets-cut-somewhere-later", "alpha", "alpha"}
	backends := []string{"cpu", "cpu", "cpu", "nccl", "", "cpu"}
	for i, n := range names {
		e := Event{Track: Track{Process: ProcWorker(0), Thread: ThreadCollectives}, Name: n, Cat: CatCollective, Phase: Begin, TS: int64(i + 1),
			Args: Args{Backend: backends[i], Op: "sum"}}
		r.Put(&e)
		got := r.Snapshot().Collective
		want := n
		if len(want) > nameBytes {
			want = want[:nameBytes]
		}
		if got.Name != want || got.Args.Backend != backends[i] {
			t.Fatalf("event %d: state slot reads %q/%q, want %q/%q", i, got.Name, got.Args.Backend, want, backends[i])
		}
		rec := r.Snapshot().Recent
		if last := rec[len(rec)-1]; last.Name != want || last.Args.Backend != backends[i] {
			t.Fatalf("event %d: history reads %q/%q, want %q/%q", i, last.Name, last.Args.Backend, want, backends[i])
		}
	}
}

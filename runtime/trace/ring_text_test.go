package trace

import "testing"

// Slots reuse their text words when an event has the same strings as
// the slot's last one, and rewrite them when it does not: the names read
// back are always the event's.
func TestRingTextReuse(t *testing.T) {
	t.Run("heap", func(t *testing.T) { testRingTextReuse(t, NewHeapRing(3, 0)) })
	// A ring attached over memory another writer filled (a worker
	// attaches the ring its controller made): its cache must not trust
	// text words it did not write.
	t.Run("attached", func(t *testing.T) {
		old := NewHeapRing(3, 0)
		for i := range 5 {
			old.Put(&Event{Track: Track{Process: ProcWorker(0), Thread: ThreadCollectives}, Name: "stale", Cat: CatCollective, Phase: Begin, TS: int64(i + 1),
				Args: Args{Backend: "stale", Op: "stale"}})
		}
		r, err := AttachRing(unsafeBytes(old.w))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.last) == 0 {
			t.Fatal("an attached ring has no text cache")
		}
		testRingTextReuse(t, r)
	})
}

func testRingTextReuse(t *testing.T, r *Ring) {
	names := []string{"", "alpha", "alpha", "beta", "a-much-longer-function-name-that-gets-cut-somewhere-later", "alpha", "alpha"}
	backends := []string{"", "cpu", "cpu", "cpu", "nccl", "", "cpu"}
	for i, n := range names {
		e := Event{Track: Track{Process: ProcWorker(0), Thread: ThreadCollectives}, Name: n, Cat: CatCollective, Phase: Begin, TS: int64(100 + i),
			Args: Args{Backend: backends[i]}}
		if n != "" {
			e.Args.Op = "sum"
		}
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

// TestMarkEnded: a begin in the state slot becomes its end at the given
// time (with the error bit when failed), name and sequence kept, no
// history entry; with nothing in progress it does nothing.
func TestMarkEnded(t *testing.T) {
	r := NewHeapRing(4, 0)
	r.MarkEnded(ThreadCommands, 5, false)
	if s := r.Snapshot(); s.Command.Phase != 0 {
		t.Fatalf("MarkEnded on an empty slot wrote %+v", s.Command)
	}
	tr := Track{ProcWorker(0), ThreadCommands}
	r.Put(&Event{Track: tr, Name: "SyncWorker", Cat: CatCommand, Phase: Begin, TS: 100, Args: Args{Seq: 7}})
	for _, failed := range []bool{false, true} {
		r.Put(&Event{Track: tr, Name: "SyncWorker", Cat: CatCommand, Phase: Begin, TS: 100, Args: Args{Seq: 7}})
		r.MarkEnded(ThreadCommands, 250, failed)
		s := r.Snapshot()
		c := s.Command
		if c.Phase != End || c.TS != 250 || c.Name != "SyncWorker" || c.Args.Seq != 7 || (c.Args.Error != "") != failed {
			t.Errorf("failed=%v: state %+v", failed, c)
		}
		if n := len(s.Recent); n != 2 && !failed || n != 3 && failed {
			t.Errorf("failed=%v: %d history entries, want only the Puts'", failed, n)
		}
		r.MarkEnded(ThreadCommands, 300, false) // an end stays that end
		if c := r.Snapshot().Command; c.TS != 250 {
			t.Errorf("failed=%v: a second MarkEnded moved the end to %d", failed, c.TS)
		}
	}
}

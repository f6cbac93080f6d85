package trace

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSiteMarkMatchesRecord: an event recorded through a Site leaves
// the ring's words exactly as Record of the same event does (the same
// slots, metadata, text), for names and texts up to past the slot's
// limits, both threads, begin and end, with and without a failure; and
// the recorder's timeline gets the same Event.
func TestSiteMarkMatchesRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	str := func(max int) string { return strings.Repeat("x", rng.IntN(max+1)) + "y" }
	for i := range 200 {
		thread := []string{ThreadCommands, ThreadCollectives}[i%2]
		cat := []string{CatCommand, CatCollective}[i%2]
		name := str(60)
		a := Args{Rank: int32(rng.IntN(64)), Set: HasRank, Comm: str(8), Backend: str(40), Op: str(20)}
		if i%3 == 0 {
			a.Peer, a.Set = int32(rng.IntN(64)), a.Set|HasPeer
		}
		for _, keep := range []bool{false, true} {
			ra, rb := NewHeapRing(4, 3), NewHeapRing(4, 3)
			recA := NewRecorder(ProcWorker(3), ra, keep)
			recB := NewRecorder(ProcWorker(3), rb, keep)
			site := recB.NewSite(recB.Track(thread), name, cat, a)
			var want []Event
			for j := range 6 { // more events than slots: the history wraps
				ph := []Phase{Begin, End}[j%2]
				failure := ""
				if j == 3 {
					failure = "boom"
				}
				e := Event{Track: recA.Track(thread), Name: name, Cat: cat, Phase: ph, TS: int64(1000 + j),
					Args: a}
				e.Args.Seq, e.Args.Bytes, e.Args.Error = uint64(j+1), int64(j)<<20, failure
				recA.Record(&e)
				want = append(want, e)
				site.Mark(ph, int64(1000+j), uint64(j+1), int64(j)<<20, failure)
			}
			for w := range ra.w {
				if ra.w[w] != rb.w[w] {
					t.Fatalf("event set %d keep=%v: ring word %d: Site wrote %#x, Record %#x", i, keep, w, rb.w[w], ra.w[w])
				}
			}
			got := recB.Events()
			if len(got) != len(want)*boolInt(keep) {
				t.Fatalf("keep=%v: timeline has %d events, want %d", keep, len(got), len(want)*boolInt(keep))
			}
			for j := range got {
				if got[j] != want[j] {
					t.Fatalf("timeline event %d: got %+v, want %+v", j, got[j], want[j])
				}
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSiteOtherProcess: a Site of another process's track or of another
// category never touches the ring (as Record), and a nil recorder's Site
// records nothing.
func TestSiteOtherProcess(t *testing.T) {
	ring := NewHeapRing(4, 0)
	r := NewRecorder(ProcWorker(0), ring, false)
	for _, s := range []*Site{
		r.NewSite(Track{ProcWorkerGPU(0), StreamThread(0)}, "allreduce", CatCollective, Args{}),
		r.NewSite(r.Track(ThreadFaults), "lost", CatFault, Args{}),
	} {
		s.Mark(Begin, 0, 1, 1, "")
	}
	if ring.Written() != 0 {
		t.Fatalf("ring got %d events from other tracks", ring.Written())
	}
	var nilRec *Recorder
	s := nilRec.NewSite(Track{}, "x", CatCommand, Args{})
	if s != nil {
		t.Fatal("a nil recorder made a Site")
	}
	s.Mark(Begin, 0, 1, 0, "") // must not panic
}

// TestSiteCache: the same arguments find the same Site; any argument
// that differs makes another; a loop over a few kinds allocates nothing.
func TestSiteCache(t *testing.T) {
	r := NewRecorder(ProcWorker(0), NewHeapRing(4, 0), false)
	tr := r.Track(ThreadCollectives)
	base := Args{Rank: 1, Set: HasRank, Comm: "global", Backend: "cpu", Op: "sum"}
	var c SiteCache
	s := c.Get(r, tr, "allreduce", CatCollective, base)
	if c.Get(r, tr, "allreduce", CatCollective, base) != s {
		t.Fatal("same arguments, another Site")
	}
	for _, tc := range []struct {
		name string
		mod  func(*Args, *string)
	}{
		{"op", func(a *Args, _ *string) { a.Op = "max" }},
		{"peer", func(a *Args, _ *string) { a.Peer, a.Set = 2, a.Set|HasPeer }},
		{"rank", func(a *Args, _ *string) { a.Rank = 2 }},
		{"comm", func(a *Args, _ *string) { a.Comm = "group 0" }},
		{"backend", func(a *Args, _ *string) { a.Backend = "nccl" }},
		{"name", func(_ *Args, n *string) { *n = "allgather" }},
	} {
		a, n := base, "allreduce"
		tc.mod(&a, &n)
		if o := c.Get(r, tr, n, CatCollective, a); o == s {
			t.Errorf("%s differs: got the same Site", tc.name)
		}
	}
	ops := []string{"sum", "max", "min"}
	allocs := testing.AllocsPerRun(100, func() {
		for _, op := range ops {
			a := base
			a.Op = op
			c.Get(r, tr, "allreduce", CatCollective, a).Mark(Begin, 0, 1, 8, "")
		}
	})
	if allocs != 0 {
		t.Fatalf("a loop of cached Sites allocated %v times per run", allocs)
	}
}

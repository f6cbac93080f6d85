package dsl

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// allPairs2 is MSCCL++'s all-pairs allreduce for two ranks, written in the
// DSL; MSCCL++'s own DSL lowers it to ../plan/testdata/allreduce_allpairs_2.json.
func allPairs2() *Program {
	p := NewProgram(Config{Name: "allreduce_allpairs_2", Collective: plan.AllReduce, Ranks: 2, InPlace: true})
	scr := []Buffer{p.Rank(0).NewScratch(1), p.Rank(1).NewScratch(1)}
	for r := range 2 {
		peer := 1 - r
		ch := p.MemoryChannel(peer, r)
		rk := p.Rank(r)
		in := rk.Input()
		ch.RelaxedSignal(TB(0), SyncNone)
		ch.RelaxedWait(TB(0), SyncAfter)
		ch.Put(scr[peer].Chunk(0, 1), in.Chunk(peer, 1), TB(0))
		ch.Signal(TB(0), SyncBefore)
		ch.Wait(TB(0), SyncAfter)
		rk.Reduce(in.Chunk(r, 1), []Chunk{in.Chunk(r, 1), scr[r].Chunk(0, 1)}, Sum, TB(0))
		ch.Put(p.Rank(peer).Input().Chunk(r, 1), in.Chunk(r, 1), TB(0))
		ch.Signal(TB(0), SyncBefore)
		ch.Wait(TB(0), SyncAfter)
	}
	return p
}

// features2 uses most of the DSL at once (it is not a meaningful
// collective): relaxed and port sync, get, pwsf fusion, semaphores,
// barriers, thread-block groups, a pipeline of packet ops, a switch
// channel, two instances.
func features2() *Program {
	p := NewProgram(Config{Name: "features_2", Collective: plan.AllReduce, Ranks: 2, Instances: 2, Protocol: plan.LL})
	scr := []Buffer{p.Rank(0).NewScratch(4), p.Rank(1).NewScratch(4)}
	mem := []*MemoryChannel{p.MemoryChannel(1, 0), p.MemoryChannel(0, 1)}
	port := []*PortChannel{p.PortChannel(1, 0), p.PortChannel(0, 1)}
	sw := p.SwitchChannel([]int{0, 1}, Input)
	for r := range 2 {
		peer := 1 - r
		rk := p.Rank(r)
		in, out := rk.Input(), rk.Output()
		m, pc := mem[r], port[r]
		m.RelaxedSignal(TB(0), SyncNone)
		m.RelaxedWait(TB(0), SyncAfter)
		m.Get(out.Chunk(peer, 1), p.Rank(peer).Input().Chunk(peer, 1), TB(0))
		pc.Put(scr[peer].Chunk(0, 1), in.Chunk(r, 1), TB(0))
		pc.Signal(TB(0), SyncNone)
		pc.Flush(TB(0), SyncNone)
		pc.Wait(TB(0), SyncAfter)
		sem := rk.Semaphore(0)
		sem.Release(TB(0), SyncBefore)
		sem.Acquire(TB(1), SyncAfter)
		g := p.TBGroup(1, 2)
		rk.Copy(out.Chunk(r, 1), in.Chunk(r, 1), g)
		rk.Barrier(1, 2)
		p.Pipeline(4096, 2, func() {
			m.PutPackets(scr[peer].Chunk(1, 1), in.Chunk(r, 1), TB(3))
			rk.ReducePackets(out.Chunk(r, 1), in.Chunk(r, 1), []Chunk{scr[r].Chunk(1, 1)}, Sum, TB(3))
			rk.CopyPackets(scr[r].Chunk(2, 1), out.Chunk(r, 1), TB(3))
		})
		sw.At(r).Reduce(scr[r].Chunk(3, 1), r, 1, Sum, TB(4))
		sw.At(r).Broadcast(scr[r].Chunk(3, 1), r, 1, TB(4))
	}
	return p
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		prog func() *Program
	}{
		{"allreduce_allpairs_2", allPairs2},
		{"features_2", features2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := tc.prog().Lower()
			if err != nil {
				t.Fatal(err)
			}
			js, err := pl.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var show bytes.Buffer
			if err := pl.Show(&show); err != nil {
				t.Fatal(err)
			}
			back, err := plan.Parse(js)
			if err != nil {
				t.Fatal(err)
			}
			if js2, _ := back.Marshal(); !bytes.Equal(js, js2) {
				t.Fatal("plan does not round-trip through Marshal/Parse")
			}
			for ext, got := range map[string][]byte{".json": js, ".show": show.Bytes()} {
				path := filepath.Join("testdata", tc.name+ext)
				if *update {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from the golden file; got:\n%s", path, got)
				}
			}
		})
	}
}

// The DSL lowers MSCCL++'s all-pairs program to the very plan MSCCL++'s
// own DSL produced.
func TestMatchesMSCCLPP(t *testing.T) {
	pl, err := allPairs2().Lower()
	if err != nil {
		t.Fatal(err)
	}
	got, err := pl.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../plan/testdata/allreduce_allpairs_2.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("plan differs from MSCCL++'s; got:\n%s", got)
	}
}

// Lower does not change the program: lowering twice gives the same plan.
func TestLowerTwice(t *testing.T) {
	p := features2()
	a, err := p.Lower()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Lower()
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := a.Marshal()
	jb, _ := b.Marshal()
	if !bytes.Equal(ja, jb) {
		t.Error("second Lower gave another plan")
	}
}

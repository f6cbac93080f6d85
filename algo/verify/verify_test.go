package verify

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

func loadPlan(t testing.TB, name string) *plan.Plan {
	t.Helper()
	data, err := os.ReadFile("../plan/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func correctPlans(t testing.TB) map[string]*plan.Plan {
	return map[string]*plan.Plan{
		"allreduce_allpairs_2":      allreduceAllPairs(2),
		"allreduce_allpairs_3":      allreduceAllPairs(3),
		"allreduce_allpairs_4":      allreduceAllPairs(4),
		"allreduce_tbg":             allreduceTBG(false),
		"allreduce_tbg_pipeline":    allreduceTBG(true),
		"allreduce_ll_2":            allreduceLL(2),
		"allreduce_ll_4":            allreduceLL(4),
		"allgather_port_2":          allgatherPort(2),
		"allgather_port_4":          allgatherPort(4),
		"allgather_semaphore_3":     allgatherSem(3, false),
		"allgather_barrier_3":       allgatherSem(3, true),
		"reducescatter_2":           reduceScatter(2),
		"reducescatter_4":           reduceScatter(4),
		"alltoall_3":                alltoall(3),
		"testdata/allreduce_2.json": loadPlan(t, "allreduce_allpairs_2.json"),
	}
}

func TestCorrectPlans(t *testing.T) {
	for name, p := range correctPlans(t) {
		t.Run(name, func(t *testing.T) {
			rep, err := Verify(p)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if rep.Ranks != p.NumRanks() || rep.Steps < rep.Ops || rep.OutputChunks == 0 || rep.States != rep.Steps+1 || rep.Cells == 0 {
				t.Errorf("report %+v", rep)
			}
			t.Log(rep)
		})
	}
}

func TestReportCounts(t *testing.T) {
	rep, err := Verify(allreduceTBG(true))
	if err != nil {
		t.Fatal(err)
	}
	// 2 ranks x 2 tbs x 11 body ops, run twice each.
	if rep.ThreadBlocks != 4 || rep.Ops != 44 || rep.Steps != 88 || rep.PipelineIterations != 2 || rep.CellsPerChunk != 4 {
		t.Errorf("report %+v", rep)
	}
}

// mutate returns a copy of p (through JSON, so nothing is shared) changed by f.
func mutate(t testing.TB, p *plan.Plan, f func(p *plan.Plan)) *plan.Plan {
	t.Helper()
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	q, err := plan.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	f(q)
	return q
}

func ops(p *plan.Plan, r, tb int) *[]plan.Op { return &p.GPUs[r].ThreadBlocks[tb].Ops }

func drop(r, tb int, idx ...int) func(p *plan.Plan) {
	return func(p *plan.Plan) {
		o := ops(p, r, tb)
		for i := len(idx) - 1; i >= 0; i-- {
			*o = slices.Delete(*o, idx[i], idx[i]+1)
		}
	}
}

type at struct{ rank, tb, op int }

func TestPlantedBugs(t *testing.T) {
	ar2, ar4 := allreduceAllPairs(2), allreduceAllPairs(4)
	rs2, rs4 := reduceScatter(2), reduceScatter(4)
	cases := []struct {
		name  string
		base  *plan.Plan
		f     func(p *plan.Plan)
		kind  Kind
		at    at
		other *at // races: the second access (either order)
		msg   string
	}{
		{"dropped final wait", ar2, drop(1, 0, 10), Race, at{0, 0, 7}, nil, "before rank 1's kernel ends"},
		{"dropped first wait", ar2, drop(1, 0, 3), Race, at{1, 0, 4}, &at{0, 0, 0}, "rank 1 scr[0]"},
		{"dropped nop after wait", ar2, drop(1, 0, 4), Race, at{1, 0, 4}, &at{0, 0, 0}, "rank 1 scr[0]"},
		{"dropped nop before signal", ar4, drop(2, 0, 3), Race, at{3, 0, 7}, &at{2, 0, 2}, "rank 3 scr[2]"},
		{"swapped chunk", rs4, func(p *plan.Plan) {
			(*ops(p, 2, 0))[2].Src[0].Index = 1 // rank 2 sends in[1] instead of in[3] to rank 3
		}, WrongResult, at{3, 0, 7}, nil, "in(rank 2)[1]"},
		{"missing signal", ar2, drop(1, 0, 2), Deadlock, at{0, 0, 10}, nil, "sends only 1"},
		{"rank missing from reduction", ar4, func(p *plan.Plan) {
			re := &(*ops(p, 2, 0))[7]
			re.Src = re.Src[:3]
		}, WrongResult, at{2, 0, 7}, nil, "want sum("},
		{"rank counted twice", ar4, func(p *plan.Plan) {
			re := &(*ops(p, 2, 0))[7]
			re.Src[3] = loc(scr, 1)
		}, WrongResult, at{2, 0, 7}, nil, "twice"},
		{"own input counted twice", rs2, func(p *plan.Plan) {
			re := &(*ops(p, 0, 0))[5]
			re.Src = append(re.Src, loc(in, 0))
		}, WrongResult, at{0, 0, 5}, nil, "in(rank 0)[0], in(rank 0)[0]"},
		{"double write by two tbs", allgatherPort(2), func(p *plan.Plan) {
			*ops(p, 0, 1) = append(*ops(p, 0, 1), plan.Op{Name: plan.OpCopy, Src: []plan.BufRef{loc(in, 0)}, Dst: []plan.BufRef{loc(out, 0)}})
		}, Race, at{0, 1, 2}, &at{0, 0, 0}, "rank 0 out[0]"},
		{"cyclic waits", ar2, func(p *plan.Plan) {
			for r := 0; r < 2; r++ {
				o := *ops(p, r, 0)
				o[2], o[3] = o[3], o[2]
			}
		}, Deadlock, at{0, 0, 2}, &at{1, 0, 2}, "cyclic wait"},
		{"undefined scratch", rs2, func(p *plan.Plan) {
			(*ops(p, 0, 0))[5].Src[1].Index = 0 // rank 0's own slot: nobody writes it
		}, UndefinedRead, at{0, 0, 5}, nil, "rank 0 scr[0]"},
		{"put while peer reads", ar2, func(p *plan.Plan) {
			put := &(*ops(p, 0, 0))[7]
			put.Dst[0] = plan.Remote(0, 0, 1) // rank 1's scratch slot 0, which rank 1's re reads
		}, Race, at{0, 0, 7}, &at{1, 0, 5}, "rank 1 scr[0]"},
		{"port source overwritten before flush", allgatherPort(2), overwritePortSource(false), Race, at{0, 0, 4}, &at{0, 0, 1}, "rank 0 in[0]"},
		{"relaxed wait publishes no data", loadPlan(t, "allreduce_allpairs_2.json"), func(p *plan.Plan) {
			(*ops(p, 1, 0))[6].Name = plan.OpRelaxedWait
		}, Race, at{1, 0, 8}, &at{0, 0, 3}, "rank 1 scr[0]"},
		{"LL packets never sent", allreduceLL(2), drop(0, 0, 3), Deadlock, at{1, 0, 4}, nil, "rank 1 scr[2]"},
		{"LL packets read as plain data", allreduceLL(2), func(p *plan.Plan) {
			(*ops(p, 1, 0))[4].Name = plan.OpCopy
		}, Race, at{0, 0, 3}, &at{1, 0, 4}, "rank 1 scr[2]"},
		{"barrier reached twice by one tb", allgatherSem(2, true), func(p *plan.Plan) {
			*ops(p, 1, 1) = append(*ops(p, 1, 1), (*ops(p, 1, 1))[0])
		}, Deadlock, at{1, 1, 6}, nil, "barrier 0"},
		{"semaphore never released", allgatherSem(2, false), drop(0, 0, 2), Deadlock, at{0, 1, 0}, nil, "semaphore 0"},
		{"semaphore dropped: race", allgatherSem(2, false), both(drop(1, 0, 2), drop(1, 1, 0)), Race, at{1, 1, 1}, &at{1, 0, 0}, "rank 1 out[1]"},
		{"extra signal", ar2, func(p *plan.Plan) {
			o := ops(p, 0, 0)
			*o = append(*o, (*o)[9])
		}, Unmatched, at{0, 0, 11}, nil, "never waited"},
		{"tbg part missing", allreduceTBG(false), func(p *plan.Plan) {
			(*ops(p, 1, 1))[5].TBG.ID = 0 // tb 1 reduces part 0 again: part 1 of out[1] stays undefined, part 0 written twice
		}, Race, at{1, 1, 5}, &at{0, 0, 0}, "rank 1 scr[0] (part 0/2)"},
		{"pipeline iteration unsynchronized", allreduceTBG(true), func(p *plan.Plan) {
			body := &(*ops(p, 1, 0))[0].Ops
			*body = slices.Delete(*body, 4, 5) // nop after the wait
		}, Race, at{1, 0, 0}, &at{0, 0, 0}, "rank 1 scr[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mutate(t, c.base, c.f)
			if err := p.Validate(); err != nil {
				t.Fatalf("the mutated plan must stay valid: %v", err)
			}
			_, err := Verify(p)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Verify = %v, want an *Error", err)
			}
			t.Log(err)
			if e.Kind != c.kind {
				t.Fatalf("kind %v, want %v", e.Kind, c.kind)
			}
			if !errors.Is(err, sentinels[c.kind]) {
				t.Errorf("errors.Is(err, %v) false", sentinels[c.kind])
			}
			got := at{e.Rank, e.TB, e.Op}
			if c.other != nil && e.Other != nil {
				o := at{e.Other.Rank, e.Other.TB, e.Other.Op}
				if !(got == c.at && o == *c.other || got == *c.other && o == c.at) {
					t.Errorf("at %v and %v, want %v and %v", got, o, c.at, *c.other)
				}
			} else if got != c.at {
				t.Errorf("at %v, want %v", got, c.at)
			}
			if c.other != nil && e.Other == nil {
				t.Errorf("no Other location")
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("message does not mention %q", c.msg)
			}
		})
	}
}

func both(f, g func(p *plan.Plan)) func(p *plan.Plan) { return func(p *plan.Plan) { f(p); g(p) } }

func TestInvalidAndUnsupported(t *testing.T) {
	bad := mutate(t, allreduceAllPairs(2), func(p *plan.Plan) { (*ops(p, 0, 0))[0].Src[0].Index = 9 })
	_, err := Verify(bad)
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, plan.ErrInvalid) {
		t.Errorf("invalid plan: %v", err)
	}
	if _, err := Verify(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil plan: %v", err)
	}
	// A collective without a fixed result verifies and reports what it
	// computes: here the alltoall's movement under another name.
	for _, name := range []plan.Collective{plan.Broadcast, plan.SendRecv, "test", "my_custom"} {
		bc := mutate(t, alltoall(2), func(p *plan.Plan) { p.Collective = name })
		rep, err := Verify(bc)
		if err != nil || !rep.Custom || rep.Movement == nil {
			t.Fatalf("%s: %v %+v", name, err, rep)
		}
		got := rep.Movement.String()
		for _, want := range []string{"rank 0 out[0] = in(rank 0)[0]", "rank 0 out[1] = in(rank 1)[0]", "rank 1 out[0] = in(rank 0)[1]", "rank 1 out[1] = in(rank 1)[1]"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: movement lacks %q:\n%s", name, want, got)
			}
		}
	}
	// Two thread blocks signalling one channel: the pairing depends on the schedule.
	shared := mutate(t, allreduceAllPairs(2), func(p *plan.Plan) {
		g := &p.GPUs[0]
		g.ThreadBlocks = append(g.ThreadBlocks, plan.ThreadBlock{ID: 1, Channels: g.ThreadBlocks[0].Channels,
			Ops: []plan.Op{(*ops(p, 0, 0))[2]}})
	})
	if _, err := Verify(shared); !errors.Is(err, ErrUnsupported) {
		t.Errorf("shared channel: %v", err)
	}
	// Two thread blocks using one port channel: its proxy's order depends on the schedule.
	port := mutate(t, allgatherPort(2), func(p *plan.Plan) {
		*ops(p, 0, 0) = append(*ops(p, 0, 0), plan.Op{Name: plan.OpFlush, ChannelType: prt, ChannelIDs: []int{0}})
	})
	if _, err := Verify(port); !errors.Is(err, ErrUnsupported) {
		t.Errorf("shared port channel: %v", err)
	}
	// Wrong shape for the collective.
	shape := mutate(t, reduceScatter(2), func(p *plan.Plan) { p.Collective = plan.AllGather })
	if _, err := Verify(shape); !errors.Is(err, ErrWrongResult) {
		t.Errorf("shape: %v", err)
	}
}

func TestInPlace(t *testing.T) {
	// In-place allreduce: output aliases input, so the all-pairs plan that
	// reduces into out[r] still works; the JSON plan reduces into in[r].
	p := mutate(t, allreduceAllPairs(3), func(p *plan.Plan) { p.InPlace = true })
	if _, err := Verify(p); err != nil {
		t.Errorf("in-place allreduce: %v", err)
	}
	// In-place allgather: in[0] is out[r].
	p = mutate(t, allgatherPort(3), func(p *plan.Plan) {
		p.InPlace = true
		for r := range p.GPUs {
			p.GPUs[r].ThreadBlocks[0].Ops = nil // the copy onto itself would race with the puts reading it
		}
	})
	if _, err := Verify(p); err != nil {
		t.Errorf("in-place allgather: %v", err)
	}
	// The JSON plan without in-place: out is never written.
	p = mutate(t, loadPlan(t, "allreduce_allpairs_2.json"), func(p *plan.Plan) { p.InPlace = false })
	if _, err := Verify(p); !errors.Is(err, ErrWrongResult) || !strings.Contains(err.Error(), "never written") {
		t.Errorf("out-of-place JSON plan: %v", err)
	}
}

// overwritePortSource: rank 0 runs everything in one thread block: copy
// in[0] to out[0], pws in[0] to rank 1 (op 1), wait (op 2), [flush,] nop,
// then overwrites in[0]. Without the flush the proxy may still be reading
// in[0].
func overwritePortSource(flush bool) func(p *plan.Plan) {
	return func(p *plan.Plan) {
		g := &p.GPUs[0]
		tb := g.ThreadBlocks[1]
		tb.ID = 0
		o := append([]plan.Op{g.ThreadBlocks[0].Ops[0]}, tb.Ops...)
		if flush {
			o = append(o, plan.Op{Name: plan.OpFlush, ChannelType: prt, ChannelIDs: []int{0}})
		}
		tb.Ops = append(o, nop(), plan.Op{Name: plan.OpCopy, Src: []plan.BufRef{loc(out, 1)}, Dst: []plan.BufRef{loc(in, 0)}})
		g.ThreadBlocks = []plan.ThreadBlock{tb}
	}
}

func TestPortFlush(t *testing.T) {
	p := mutate(t, allgatherPort(2), overwritePortSource(true))
	if _, err := Verify(p); err != nil {
		t.Errorf("with flush: %v", err)
	}
}

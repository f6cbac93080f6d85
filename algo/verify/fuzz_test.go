package verify

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

// builtPlans are correct plans in which every op is needed, except nops
// next to a barrier (a barrier is a fence itself).
func builtPlans() []*plan.Plan {
	return []*plan.Plan{allreduceAllPairs(2), allreduceAllPairs(3), allreduceTBG(false), allreduceTBG(true),
		allreduceLL(3), allgatherPort(3), allgatherSem(2, false), allgatherSem(2, true), reduceScatter(3), alltoall(3)}
}

// opSlot names one op: a top-level op, or a body op of a pipeline (body >= 0).
type opSlot struct{ r, tb, op, body int }

func slots(p *plan.Plan) []opSlot {
	var out []opSlot
	for r := range p.GPUs {
		for t := range p.GPUs[r].ThreadBlocks {
			for i, op := range p.GPUs[r].ThreadBlocks[t].Ops {
				out = append(out, opSlot{r, t, i, -1})
				for j := range op.Ops {
					out = append(out, opSlot{r, t, i, j})
				}
			}
		}
	}
	return out
}

func listOf(p *plan.Plan, s opSlot) *[]plan.Op {
	o := ops(p, s.r, s.tb)
	if s.body >= 0 {
		return &(*o)[s.op].Ops
	}
	return o
}

func idx(s opSlot) int {
	if s.body >= 0 {
		return s.body
	}
	return s.op
}

func nextToBarrier(l []plan.Op, i int) bool {
	return i > 0 && l[i-1].Name == plan.OpBarrier || i+1 < len(l) && l[i+1].Name == plan.OpBarrier
}

// checkErr fails unless err is nil or an *Error.
func checkErr(t *testing.T, what string, err error) {
	t.Helper()
	var e *Error
	if err != nil && !errors.As(err, &e) {
		t.Fatalf("%s: error %v is not an *Error", what, err)
	}
}

// Dropping any op of a plan whose ops are all needed, or duplicating any op
// but a nop, changes what it computes or how it synchronizes: Verify must
// reject every such mutation.
func TestEveryDropAndDuplicateRejected(t *testing.T) {
	for _, base := range builtPlans() {
		for _, s := range slots(base) {
			l := *listOf(base, s)
			i := idx(s)
			name := fmt.Sprintf("%s %+v (%v)", base.Name, s, l[i].Name)
			if !(l[i].Name == plan.OpNop && nextToBarrier(l, i)) {
				p := mutate(t, base, func(p *plan.Plan) {
					l := listOf(p, s)
					*l = slices.Delete(*l, idx(s), idx(s)+1)
				})
				_, err := Verify(p)
				checkErr(t, "drop "+name, err)
				if err == nil {
					t.Errorf("drop %s: accepted", name)
				}
			}
			if l[i].Name != plan.OpNop {
				p := mutate(t, base, func(p *plan.Plan) {
					l := listOf(p, s)
					*l = slices.Insert(*l, idx(s)+1, (*l)[idx(s)])
				})
				_, err := Verify(p)
				checkErr(t, "duplicate "+name, err)
				if err == nil {
					t.Errorf("duplicate %s: accepted", name)
				}
			}
		}
	}
}

// randomMutation changes p in one of several ways, driven by rnd; it
// returns a description.
func randomMutation(p *plan.Plan, rnd func(n int) int) string {
	ss := slots(p)
	if len(ss) == 0 {
		return "none"
	}
	s := ss[rnd(len(ss))]
	l := listOf(p, s)
	i := idx(s)
	if i >= len(*l) {
		return "none"
	}
	op := &(*l)[i]
	switch k := rnd(9); k {
	case 0:
		*l = slices.Delete(*l, i, i+1)
		return fmt.Sprintf("drop %+v", s)
	case 1:
		*l = slices.Insert(*l, i+1, (*l)[i])
		return fmt.Sprintf("duplicate %+v", s)
	case 2:
		j := rnd(len(*l))
		(*l)[i], (*l)[j] = (*l)[j], (*l)[i]
		return fmt.Sprintf("swap %+v with %d", s, j)
	case 3, 4:
		refs := op.Src
		if k == 4 {
			refs = op.Dst
		}
		if len(refs) > 0 {
			r := &refs[rnd(len(refs))]
			r.Index = max(0, r.Index+rnd(3)-1)
		}
		return fmt.Sprintf("shift a chunk of %+v", s)
	case 5:
		if len(op.ChannelIDs) > 0 {
			op.ChannelIDs[rnd(len(op.ChannelIDs))] = rnd(4)
		}
		return fmt.Sprintf("channel of %+v", s)
	case 6:
		if op.TBG != nil {
			op.TBG.ID = rnd(op.TBG.Size)
		} else if len(op.Src) > 0 {
			op.TBG = &plan.TBGroup{ID: rnd(2), Size: 2}
		}
		return fmt.Sprintf("tbg of %+v", s)
	case 7:
		// Move the op to another thread block of the same rank.
		g := &p.GPUs[s.r]
		t2 := rnd(len(g.ThreadBlocks))
		moved := (*l)[i]
		*l = slices.Delete(*l, i, i+1)
		dst := &g.ThreadBlocks[t2].Ops
		*dst = slices.Insert(*dst, rnd(len(*dst)+1), moved)
		return fmt.Sprintf("move %+v to tb %d", s, t2)
	default:
		if len(op.Src) > 1 {
			op.Src = op.Src[:len(op.Src)-1]
			return fmt.Sprintf("shorten the reduction of %+v", s)
		}
		op.Name = plan.OpNop
		op.Src, op.Dst, op.ChannelIDs, op.ChannelType, op.TBG, op.ReduceOp = nil, nil, nil, plan.ChannelNone, nil, plan.ReduceNone
		op.SemaphoreIDs, op.BarrierID, op.NumThreadBlocks, op.Iter, op.Ops = nil, 0, 0, nil, nil
		return fmt.Sprintf("replace %+v by a nop", s)
	}
}

// Random mutations (several at once) never make Verify panic, and every
// rejection is an *Error.
func TestRandomMutations(t *testing.T) {
	bases := append(builtPlans(), loadPlan(t, "allreduce_allpairs_2.json"), loadPlan(t, "every_op_kind.json"))
	rng := rand.New(rand.NewSource(1))
	accepted := 0
	n := 3000
	if testing.Short() {
		n = 300
	}
	for it := 0; it < n; it++ {
		base := bases[rng.Intn(len(bases))]
		var desc []string
		p := mutate(t, base, func(p *plan.Plan) {
			for k := 1 + rng.Intn(3); k > 0; k-- {
				desc = append(desc, randomMutation(p, rng.Intn))
			}
		})
		_, err := Verify(p)
		checkErr(t, fmt.Sprint(base.Name, desc), err)
		if err == nil {
			accepted++
		}
	}
	t.Logf("%d of %d mutated plans accepted", accepted, n)
}

func FuzzVerify(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte{3, 9, 9, 9, 9})
	f.Add([]byte{5, 0, 0})
	f.Add([]byte{9, 200, 17, 4, 4, 4})
	bases := append(builtPlans(), loadPlan(f, "allreduce_allpairs_2.json"), loadPlan(f, "every_op_kind.json"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		base := bases[int(data[0])%len(bases)]
		pos := 1
		rnd := func(n int) int {
			if n <= 0 {
				return 0
			}
			b := 0
			if pos < len(data) {
				b = int(data[pos])
				pos++
			}
			return b % n
		}
		p := mutate(t, base, func(p *plan.Plan) {
			for k := 0; pos < len(data) && k < 32; k++ {
				randomMutation(p, rnd)
			}
		})
		_, err := Verify(p)
		checkErr(t, "fuzz", err)
	})
}

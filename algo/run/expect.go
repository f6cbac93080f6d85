package run

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/verify"
)

// expectation returns the value element i of rank r's output must hold
// after a call with inN input and outN output elements of esize bytes,
// where every rank's input element e is benchValue(rank, e); ok is false
// for elements the call does not write (they keep what they held).
//
// allreduce, allgather, reducescatter and alltoall are checked against
// their definition. Every other collective (broadcast, sendrecv, "test",
// custom names) has no fixed result: it is checked against the data
// movement the verifier computed for the plan (verify.Report.Movement),
// so a plan the verifier rejects cannot be checked.
func expectation(p *plan.Plan, mv func() (*verify.Movement, error), r int, inN, outN, esize int64) (func(i int64) (float64, bool), error) {
	n := int64(p.NumRanks())
	switch p.Collective {
	case plan.AllGather:
		return func(i int64) (float64, bool) { return benchValue(int(i/inN), int(i%inN)), true }, nil
	case plan.ReduceScatter:
		return func(i int64) (float64, bool) {
			var w float64
			for q := range n {
				w += benchValue(int(q), int(int64(r)*outN+i))
			}
			return w, true
		}, nil
	case plan.AllReduce:
		return func(i int64) (float64, bool) {
			var w float64
			for q := range n {
				w += benchValue(int(q), int(i))
			}
			return w, true
		}, nil
	case plan.AllToAll:
		b := inN / n
		return func(i int64) (float64, bool) {
			q, e := i/b, i%b
			return benchValue(int(q), int(int64(r)*b+e)), true
		}, nil
	}
	m, err := mv()
	if err != nil {
		return nil, err
	}
	lays := make([]plan.Layout, n)
	for q := range lays {
		if lays[q], err = p.Layout(q, inN*esize, outN*esize); err != nil {
			return nil, err
		}
	}
	U := int64(m.CellsPerChunk)
	// cell returns the cell of a byte offset within a chunk of c bytes and
	// the cell's first byte.
	cell := func(l plan.Layout, within int64) (int64, int64) {
		for u := range U {
			off, sz := l.Part(0, l.ChunkBytes, int(u), int(U))
			if within >= off && within < off+sz {
				return u, off
			}
		}
		return -1, 0
	}
	lr := lays[r]
	return func(i int64) (float64, bool) {
		o := i * esize
		if lr.ChunkBytes == 0 {
			return 0, false
		}
		j, within := o/lr.ChunkBytes, o%lr.ChunkBytes
		u, start := cell(lr, within)
		if j >= int64(len(m.Out[r])) || u < 0 {
			return 0, false
		}
		cv := m.Out[r][j][u]
		if len(cv.Sources) == 0 {
			return 0, false
		}
		var w float64
		for k, s := range cv.Sources {
			ls := lays[s.Rank]
			off, _ := ls.Part(0, ls.ChunkBytes, s.Cell, int(U))
			e := (int64(s.Chunk)*ls.ChunkBytes + off + within - start) / esize
			x := benchValue(s.Rank, int(e))
			switch {
			case k == 0:
				w = x
			case cv.Op == plan.ReduceMin:
				w = min(w, x)
			case cv.Op == plan.ReduceMax:
				w = max(w, x)
			default:
				w += x
			}
		}
		return w, true
	}, nil
}

// ErrNoReference: the plan's collective has no fixed result and the
// verifier rejects the plan, so there is nothing to check its output
// against.
var ErrNoReference = errors.New("run: no reference result")

// movementOf verifies p and returns the data movement it computes.
func movementOf(p *plan.Plan) (*verify.Movement, error) {
	rep, err := verify.Verify(p)
	if err != nil {
		return nil, fmt.Errorf("%w for plan %q (collective %q has no fixed result, and the verifier rejects the plan: %v)", ErrNoReference, p.Name, p.Collective, err)
	}
	if rep.Movement == nil {
		return nil, fmt.Errorf("%w for plan %q: the verifier computed no data movement", ErrNoReference, p.Name)
	}
	return rep.Movement, nil
}

package verify

import (
	"fmt"
	"strings"

	"github.com/chorus-rt/chorus/algo/plan"
)

// Source is one input cell: cell Cell of input chunk Chunk of rank Rank.
type Source struct{ Rank, Chunk, Cell int }

// CellValue is what one output cell holds when the plan's call ends.
type CellValue struct {
	// Sources are the input cells the value is made of, sorted (a source
	// counted twice appears twice). Empty: no op of the call writes the
	// cell, so it keeps what it held before the call.
	Sources []Source
	// Op combines several sources (sum, min, max); ReduceNone for one.
	Op plan.ReduceOp
}

// Movement is the data movement a plan computes, as the verifier derived
// it: which input cells of which ranks every output cell of every rank
// holds at the end. Chunks are cut into CellsPerChunk cells (see
// docs/plans.md); a cell is a Layout.Part of its chunk.
type Movement struct {
	CellsPerChunk int
	Out           [][][]CellValue // [rank][output chunk][cell]
}

// movement reads the final output cells. It is called only for plans
// without races, undefined reads or packet misuse.
func (v *verifier) movement() *Movement {
	m := &Movement{CellsPerChunk: v.U, Out: make([][][]CellValue, v.p.NumRanks())}
	for r := range v.p.GPUs {
		oc := v.p.GPUs[r].OutputChunks
		m.Out[r] = make([][]CellValue, oc)
		for j := range oc {
			m.Out[r][j] = make([]CellValue, v.U)
			for u := range v.U {
				c := v.cell(r, plan.Output, j*v.U+u)
				if c.val == nil {
					continue
				}
				cv := CellValue{Op: c.val.op, Sources: make([]Source, len(c.val.elems))}
				for i, id := range c.val.elems {
					cv.Sources[i] = v.ctb.source(id)
				}
				if len(cv.Sources) == 1 {
					cv.Op = plan.ReduceNone
				} else {
					cv.Op = cv.Op.Effective()
				}
				m.Out[r][j][u] = cv
			}
		}
	}
	return m
}

// source inverts id.
func (c contrib) source(id int32) Source {
	r := len(c.base) - 1
	for r > 0 && c.base[r] > id {
		r--
	}
	off := int(id - c.base[r])
	return Source{Rank: r, Chunk: off / c.units, Cell: off % c.units}
}

// chunkWise returns, for output chunk cells that hold whole input chunks
// cell by cell (cell u from cell u of the same chunks), the sources as
// (rank, chunk) pairs and the op; ok is false when the cells differ.
func chunkWise(cells []CellValue) (srcs [][2]int, op plan.ReduceOp, ok bool) {
	for u, cv := range cells {
		if u == 0 {
			op = cv.Op
			for _, s := range cv.Sources {
				srcs = append(srcs, [2]int{s.Rank, s.Chunk})
			}
		} else if cv.Op != op || len(cv.Sources) != len(srcs) {
			return nil, 0, false
		}
		for i, s := range cv.Sources {
			if s.Cell != u || s.Rank != srcs[i][0] || s.Chunk != srcs[i][1] {
				return nil, 0, false
			}
		}
	}
	return srcs, op, true
}

// String lists the movement one output chunk per line, e.g.
// "rank 1 out[0] = in(rank 0)[0]" or "rank 0 out[1] = sum(in(rank 0)[1],
// in(rank 1)[1])"; chunks whose cells come from different places are
// listed cell by cell, and chunks no op writes say "(not written)".
func (m *Movement) String() string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	name := func(srcs []string, op plan.ReduceOp) string {
		if len(srcs) == 0 {
			return "(not written)"
		}
		if len(srcs) == 1 {
			return srcs[0]
		}
		return op.String() + "(" + strings.Join(srcs, ", ") + ")"
	}
	for r, chunks := range m.Out {
		for j, cells := range chunks {
			if srcs, op, ok := chunkWise(cells); ok {
				names := make([]string, len(srcs))
				for i, s := range srcs {
					names[i] = fmt.Sprintf("in(rank %d)[%d]", s[0], s[1])
				}
				fmt.Fprintf(&b, "rank %d out[%d] = %s\n", r, j, name(names, op))
				continue
			}
			for u, cv := range cells {
				names := make([]string, len(cv.Sources))
				for i, s := range cv.Sources {
					names[i] = fmt.Sprintf("in(rank %d)[%d] cell %d", s.Rank, s.Chunk, s.Cell)
				}
				fmt.Fprintf(&b, "rank %d out[%d] cell %d/%d = %s\n", r, j, u, m.CellsPerChunk, name(names, cv.Op))
			}
		}
	}
	return b.String()
}

package verify

import (
	"fmt"
	"strings"

	"github.com/chorus-rt/chorus/algo/plan"
)

// value is the symbolic content of one cell: a multiset of contributions
// (input cells of some rank) combined by op. Values are immutable and
// shared; a copy moves the pointer. A nil *value is "undefined".
type value struct {
	elems []int32       // sorted contribution ids, duplicates kept
	op    plan.ReduceOp // the reduction; ReduceNone for a single contribution
	made  *step         // the reduce op that computed it (nil: an input cell)
	dup   *step         // first op that counted a contribution twice
	mixed *step         // first op that combined values of different reductions
}

// reduce combines vals with op at step at.
func reduce(vals []*value, op plan.ReduceOp, at *step) *value {
	n := 0
	for _, v := range vals {
		n += len(v.elems)
	}
	out := &value{elems: make([]int32, 0, n), op: op, made: at}
	for _, v := range vals {
		if out.dup == nil && v.dup != nil {
			out.dup = v.dup
		}
		if out.mixed == nil && v.mixed != nil {
			out.mixed = v.mixed
		}
		if len(v.elems) > 1 && v.op != op && out.mixed == nil {
			out.mixed = at
		}
		out.elems = mergeSorted(out.elems, v.elems)
	}
	if out.dup == nil {
		for i := 1; i < len(out.elems); i++ {
			if out.elems[i] == out.elems[i-1] {
				out.dup = at
				break
			}
		}
	}
	if len(out.elems) == 1 {
		out.op = plan.ReduceNone
	}
	return out
}

func mergeSorted(a, b []int32) []int32 {
	if len(b) == 0 {
		return a
	}
	out := make([]int32, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] <= b[j] {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// contrib names contribution ids: id = base[rank] + chunk*units + unit.
type contrib struct {
	base  []int32
	units int
}

func (c contrib) id(rank, chunk, unit int) int32 {
	return c.base[rank] + int32(chunk*c.units+unit)
}

func (c contrib) name(id int32, unit int) string {
	r := len(c.base) - 1
	for r > 0 && c.base[r] > id {
		r--
	}
	off := int(id - c.base[r])
	ch, u := off/c.units, off%c.units
	s := fmt.Sprintf("in(rank %d)[%d]", r, ch)
	if u != unit {
		s += fmt.Sprintf(" part %d/%d", u, c.units)
	}
	return s
}

func (c contrib) format(v *value, unit int) string {
	if v == nil {
		return "undefined"
	}
	parts := make([]string, len(v.elems))
	for i, id := range v.elems {
		parts[i] = c.name(id, unit)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return v.op.Effective().String() + "(" + strings.Join(parts, ", ") + ")"
}

// sameValue reports whether a and b are the same symbolic content.
func sameValue(a, b *value) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil || a.op != b.op || len(a.elems) != len(b.elems) {
		return false
	}
	for i := range a.elems {
		if a.elems[i] != b.elems[i] {
			return false
		}
	}
	return true
}

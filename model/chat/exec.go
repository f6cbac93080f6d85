package chat

import (
	"strings"
	"time"
)

// Safety limits. Jinja itself has none besides the sandbox's range limit;
// these only stop hostile templates from exhausting memory or time.
const (
	maxRange         = 100000 // jinja2.sandbox.MAX_RANGE
	defaultMaxOutput = 64 << 20
	defaultMaxSteps  = 50_000_000
)

// Size limits for intermediate values (variables so that the fuzz tests
// can lower them).
var (
	maxStringLen int64 = 64 << 20
	maxListLen   int64 = 1 << 22
)

// scope is one level of variable bindings. The template root has one, and
// every iteration of a for loop gets a fresh child (as in Jinja, where
// assignments inside a loop body do not leak out of it).
type scope struct {
	vars   map[string]Value
	parent *scope
}

func newScope(parent *scope) *scope {
	return &scope{vars: map[string]Value{}, parent: parent}
}

func (s *scope) lookup(name string) Value {
	for c := s; c != nil; c = c.parent {
		if v, ok := c.vars[name]; ok {
			return v
		}
	}
	return undefinedName(name)
}

// renderer holds the state of one Render call.
type renderer struct {
	w         *strings.Builder
	steps     int
	maxSteps  int
	maxOutput int
	now       func() time.Time
}

// ctrlFlow carries break/continue out of a loop body.
type ctrlFlow struct{ brk bool }

func (c *ctrlFlow) Error() string { return "break/continue outside of a loop" }

func (r *renderer) write(s string) error {
	if r.w.Len()+len(s) > r.maxOutput {
		return errLimit("rendered output too large")
	}
	r.w.WriteString(s)
	return nil
}

func (r *renderer) step() error { return r.charge(1) }

// charge counts n units of work against the step limit.
func (r *renderer) charge(n int) error {
	r.steps += n
	if r.steps > r.maxSteps {
		return errLimit("template evaluation took too many steps")
	}
	return nil
}

// workOf estimates the work of a filter or loop over v.
func workOf(v Value) int {
	switch v := v.(type) {
	case string:
		return len(v) / 64
	case []Value:
		return len(v)
	case tuple:
		return len(v)
	case *dict:
		return v.len()
	case *iterator:
		return len(v.items)
	case *dictView:
		return len(v.items)
	case rangeVal:
		return int(v.len())
	}
	return 0
}

func (r *renderer) exec(nodes []node, sc *scope) error {
	for _, n := range nodes {
		if err := r.execNode(n, sc); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) execNode(n node, sc *scope) error {
	if err := r.step(); err != nil {
		return atLine(err, n.nodeLine())
	}
	switch n := n.(type) {
	case *dataNode:
		return atLine(r.write(n.text), n.line)
	case *printNode:
		v, err := r.eval(n.expr, sc)
		if err != nil {
			return err
		}
		return atLine(r.write(pyStr(v)), n.line)
	case *ifNode:
		for _, b := range n.branches {
			v, err := r.eval(b.test, sc)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.exec(b.body, sc)
			}
		}
		return r.exec(n.orelse, sc)
	case *forNode:
		return r.execFor(n, sc)
	case *setNode:
		v, err := r.eval(n.value, sc)
		if err != nil {
			return err
		}
		return atLine(r.assign(n.target, v, sc), n.line)
	case *setBlockNode:
		saved := r.w
		var b strings.Builder
		r.w = &b
		err := r.exec(n.body, sc)
		r.w = saved
		if err != nil {
			return err
		}
		var v Value = b.String()
		for _, f := range n.filters {
			if v, err = r.applyFilterExpr(f, v, sc); err != nil {
				return err
			}
		}
		return atLine(r.assign(n.target, v, sc), n.line)
	case *loopCtrlNode:
		return &ctrlFlow{brk: n.brk}
	case *generationNode:
		return r.exec(n.body, sc)
	}
	return nil
}

func (r *renderer) execFor(n *forNode, sc *scope) error {
	iv, err := r.eval(n.iter, sc)
	if err != nil {
		return err
	}
	items, err := iterate(iv)
	if err != nil {
		return atLine(err, n.line)
	}
	if err := r.charge(len(items)); err != nil {
		return atLine(err, n.line)
	}
	if n.filter != nil {
		var kept []Value
		for _, it := range items {
			fs := newScope(sc)
			if err := r.assign(n.target, it, fs); err != nil {
				return atLine(err, n.line)
			}
			ok, err := r.eval(n.filter, fs)
			if err != nil {
				return err
			}
			if truthy(ok) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.exec(n.orelse, newScope(sc))
	}
	loop := &loopInfo{items: items}
	for i, it := range items {
		loop.index0 = i
		is := newScope(sc)
		is.vars["loop"] = loop
		if err := r.assign(n.target, it, is); err != nil {
			return atLine(err, n.line)
		}
		err := r.exec(n.body, is)
		if cf, ok := err.(*ctrlFlow); ok {
			if cf.brk {
				break
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) assign(t target, v Value, sc *scope) error {
	switch t := t.(type) {
	case nameTarget:
		sc.vars[t.name] = v
	case nsTarget:
		ns, ok := sc.lookup(t.name).(*namespace)
		if !ok {
			return errf("cannot assign attribute on non-namespace object")
		}
		ns.attrs.set(t.attr, v)
	case tupleTarget:
		items, err := iterate(v)
		if err != nil {
			return errf("cannot unpack non-iterable %s object", typeName(v))
		}
		if len(items) > len(t.items) {
			return errf("too many values to unpack (expected %d)", len(t.items))
		}
		if len(items) < len(t.items) {
			return errf("not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
		}
		for i, sub := range t.items {
			if err := r.assign(sub, items[i], sc); err != nil {
				return err
			}
		}
	}
	return nil
}

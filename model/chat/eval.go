package chat

import "strings"

// sliceVal is an evaluated a[start:stop:step] subscript.
type sliceVal struct{ start, stop, step Value }

// eval evaluates an expression; errors carry the expression's line.
func (r *renderer) eval(e expr, sc *scope) (Value, error) {
	if err := r.step(); err != nil {
		return nil, atLine(err, e.exprLine())
	}
	v, err := r.evalInner(e, sc)
	if err != nil {
		return nil, atLine(err, e.exprLine())
	}
	return v, nil
}

func (r *renderer) evalAll(es []expr, sc *scope) ([]Value, error) {
	out := make([]Value, 0, len(es))
	for _, e := range es {
		v, err := r.eval(e, sc)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (r *renderer) evalKwargs(ks []kwExpr, sc *scope) ([]kwArg, error) {
	var out []kwArg
	for _, k := range ks {
		v, err := r.eval(k.val, sc)
		if err != nil {
			return nil, err
		}
		out = append(out, kwArg{name: k.name, val: v})
	}
	return out, nil
}

func (r *renderer) evalInner(e expr, sc *scope) (Value, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.val, nil
	case *nameExpr:
		return sc.lookup(e.name), nil
	case *getattrExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		return getattr(obj, e.attr)
	case *getitemExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		var key Value
		if s, ok := e.key.(*sliceExpr); ok {
			sv := sliceVal{}
			ptrs := [3]*Value{&sv.start, &sv.stop, &sv.step}
			for i, part := range [3]expr{s.start, s.stop, s.step} {
				if part != nil {
					if *ptrs[i], err = r.eval(part, sc); err != nil {
						return nil, err
					}
				}
			}
			key = sv
		} else if key, err = r.eval(e.key, sc); err != nil {
			return nil, err
		}
		return getitem(obj, key)
	case *callExpr:
		fn, err := r.eval(e.fn, sc)
		if err != nil {
			return nil, err
		}
		args, err := r.evalAll(e.args, sc)
		if err != nil {
			return nil, err
		}
		kwargs, err := r.evalKwargs(e.kwargs, sc)
		if err != nil {
			return nil, err
		}
		return r.call(fn, args, kwargs)
	case *filterExpr:
		arg, err := r.eval(e.arg, sc)
		if err != nil {
			return nil, err
		}
		return r.applyFilterExpr(e, arg, sc)
	case *testExpr:
		arg, err := r.eval(e.arg, sc)
		if err != nil {
			return nil, err
		}
		args, err := r.evalAll(e.args, sc)
		if err != nil {
			return nil, err
		}
		kwargs, err := r.evalKwargs(e.kwargs, sc)
		if err != nil {
			return nil, err
		}
		ok, err := r.applyTest(e.name, arg, args, kwargs)
		return ok, err
	case *binExpr:
		l, err := r.eval(e.l, sc)
		if err != nil {
			return nil, err
		}
		rv, err := r.eval(e.r, sc)
		if err != nil {
			return nil, err
		}
		return arith(e.op, l, rv)
	case *concatExpr:
		var b strings.Builder
		for _, p := range e.parts {
			v, err := r.eval(p, sc)
			if err != nil {
				return nil, err
			}
			b.WriteString(pyStr(v))
			if int64(b.Len()) > maxStringLen {
				return nil, errLimit("string too large")
			}
		}
		return b.String(), nil
	case *unaryExpr:
		x, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		return unary(e.op, x)
	case *notExpr:
		x, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		return !truthy(x), nil
	case *andExpr:
		l, err := r.eval(e.l, sc)
		if err != nil || !truthy(l) {
			return l, err
		}
		return r.eval(e.r, sc)
	case *orExpr:
		l, err := r.eval(e.l, sc)
		if err != nil || truthy(l) {
			return l, err
		}
		return r.eval(e.r, sc)
	case *compareExpr:
		left, err := r.eval(e.first, sc)
		if err != nil {
			return nil, err
		}
		for _, op := range e.ops {
			right, err := r.eval(op.x, sc)
			if err != nil {
				return nil, err
			}
			ok, err := compare(op.op, left, right)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			left = right
		}
		return true, nil
	case *condExpr:
		t, err := r.eval(e.test, sc)
		if err != nil {
			return nil, err
		}
		if truthy(t) {
			return r.eval(e.yes, sc)
		}
		if e.not != nil {
			return r.eval(e.not, sc)
		}
		return undefined{msg: "the inline if-expression evaluated to false and no else section was defined."}, nil
	case *listExpr:
		items, err := r.evalAll(e.items, sc)
		if err != nil {
			return nil, err
		}
		if items == nil {
			items = []Value{}
		}
		return items, nil
	case *tupleExpr:
		items, err := r.evalAll(e.items, sc)
		return tuple(items), err
	case *dictExpr:
		d := newDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i], sc)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(e.vals[i], sc)
			if err != nil {
				return nil, err
			}
			if !d.set(k, v) {
				return nil, errf("unhashable type: '%s'", typeName(k))
			}
		}
		return d, nil
	case *sliceExpr:
		return nil, errf("slice outside of a subscript")
	}
	return nil, errf("unknown expression %T", e)
}

// call calls a function value.
func (r *renderer) call(fn Value, args []Value, kwargs []kwArg) (Value, error) {
	switch f := fn.(type) {
	case *function:
		if f.unsupported != "" {
			return nil, unsupportedf("%s", f.unsupported)
		}
		return f.call(r, args, kwargs)
	case undefined:
		return nil, failUndefined(f)
	case *loopInfo:
		return nil, unsupportedf("calling loop() (recursive loops)")
	}
	return nil, errf("'%s' object is not callable", typeName(fn))
}

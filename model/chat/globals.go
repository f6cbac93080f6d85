package chat

import "fmt"

// globalScope holds the functions every template sees: Jinja's default
// globals plus the two transformers adds (raise_exception, strftime_now).
func globalScope() *scope {
	g := newScope(nil)
	g.vars["range"] = &function{name: "range", call: builtinRange}
	g.vars["dict"] = &function{name: "dict", call: builtinDict}
	g.vars["namespace"] = &function{name: "namespace", call: builtinNamespace}
	g.vars["raise_exception"] = &function{name: "raise_exception", call: builtinRaise}
	g.vars["strftime_now"] = &function{name: "strftime_now", call: builtinStrftimeNow}
	for _, name := range []string{"cycler", "joiner", "lipsum"} {
		g.vars[name] = &function{name: name, unsupported: "function " + name + "()"}
	}
	return g
}

func builtinRange(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
	if len(kwargs) > 0 {
		return nil, errf("range() takes no keyword arguments")
	}
	ints := make([]int64, len(args))
	for i, a := range args {
		n, ok := asInt(a)
		if !ok {
			return nil, errf("'%s' object cannot be interpreted as an integer", typeName(a))
		}
		ints[i] = n
	}
	var r rangeVal
	switch len(ints) {
	case 1:
		r = rangeVal{0, ints[0], 1}
	case 2:
		r = rangeVal{ints[0], ints[1], 1}
	case 3:
		r = rangeVal{ints[0], ints[1], ints[2]}
		if r.step == 0 {
			return nil, errf("range() arg 3 must not be zero")
		}
	default:
		return nil, errf("range expected 1 to 3 arguments, got %d", len(args))
	}
	if r.len() > maxRange {
		return nil, errf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	return r, nil
}

// dictFrom builds a dict from dict(...)-style arguments.
func dictFrom(fname string, args []Value, kwargs []kwArg) (*dict, error) {
	d := newDict()
	if len(args) > 1 {
		return nil, errf("%s expected at most 1 argument, got %d", fname, len(args))
	}
	if len(args) == 1 {
		switch a := args[0].(type) {
		case *dict:
			d = a.copy()
		default:
			items, err := iterate(a)
			if err != nil {
				return nil, err
			}
			for i, it := range items {
				pair, err := iterate(it)
				if err != nil || len(pair) != 2 {
					return nil, errf("dictionary update sequence element #%d has the wrong length", i)
				}
				if !d.set(pair[0], pair[1]) {
					return nil, errf("unhashable type: '%s'", typeName(pair[0]))
				}
			}
		}
	}
	for _, kw := range kwargs {
		d.set(kw.name, kw.val)
	}
	return d, nil
}

func builtinDict(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
	return dictFrom("dict", args, kwargs)
}

func builtinNamespace(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
	d, err := dictFrom("namespace", args, kwargs)
	if err != nil {
		return nil, err
	}
	return &namespace{attrs: d}, nil
}

func builtinRaise(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("raise_exception", []string{"message"}, 1, args, kwargs)
	if err != nil {
		return nil, err
	}
	return nil, &RaiseError{Message: pyStr(a[0])}
}

func builtinStrftimeNow(r *renderer, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("strftime_now", []string{"format"}, 1, args, kwargs)
	if err != nil {
		return nil, err
	}
	f, ok := a[0].(string)
	if !ok {
		return nil, errf("strftime() argument 1 must be str, not %s", typeName(a[0]))
	}
	s, err := strftime(r.now(), f)
	if err != nil {
		return nil, fmt.Errorf("strftime_now: %w", err)
	}
	return s, nil
}

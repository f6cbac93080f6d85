package chat

// Jinja tests (`x is name(args)`), as in jinja2.tests.

type testFn func(r *renderer, v Value, args []Value) (bool, error)

var tests map[string]testFn

// unsupportedTests are Jinja built-in tests outside the subset.
var unsupportedTests = []string{"escaped"}

func init() {
	cmp := func(op string) testFn {
		return func(_ *renderer, v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, errf("test takes exactly one argument")
			}
			return compare(op, v, args[0])
		}
	}
	noArg := func(fn func(v Value) bool) testFn {
		return func(_ *renderer, v Value, args []Value) (bool, error) {
			if len(args) != 0 {
				return false, errf("test takes no arguments")
			}
			return fn(v), nil
		}
	}
	tests = map[string]testFn{
		"defined":   noArg(func(v Value) bool { _, u := v.(undefined); return !u }),
		"undefined": noArg(func(v Value) bool { _, u := v.(undefined); return u }),
		"none":      noArg(func(v Value) bool { return v == nil }),
		"true":      noArg(func(v Value) bool { b, ok := v.(bool); return ok && b }),
		"false":     noArg(func(v Value) bool { b, ok := v.(bool); return ok && !b }),
		"boolean":   noArg(func(v Value) bool { _, ok := v.(bool); return ok }),
		"integer":   noArg(func(v Value) bool { _, ok := v.(int64); return ok }),
		"float":     noArg(func(v Value) bool { _, ok := v.(float64); return ok }),
		"number":    noArg(isNumber),
		"string":    noArg(func(v Value) bool { _, ok := v.(string); return ok }),
		"mapping":   noArg(func(v Value) bool { _, ok := v.(*dict); return ok }),
		"iterable": noArg(func(v Value) bool {
			switch v.(type) {
			case string, []Value, tuple, *dict, undefined, rangeVal, *loopInfo, *dictView, *iterator:
				return true
			}
			return false
		}),
		"sequence": noArg(func(v Value) bool {
			switch v.(type) {
			case string, []Value, tuple, *dict, undefined, rangeVal:
				return true
			}
			return false
		}),
		"callable": noArg(func(v Value) bool {
			switch v.(type) {
			case *function, undefined, *loopInfo:
				return true
			}
			return false
		}),
		"lower": noArg(func(v Value) bool { return pyIsLower(pyStr(v)) }),
		"upper": noArg(func(v Value) bool { return pyIsUpper(pyStr(v)) }),
		"odd": func(_ *renderer, v Value, args []Value) (bool, error) {
			m, err := arith("%", v, int64(2))
			return err == nil && pyEq(m, int64(1)), err
		},
		"even": func(_ *renderer, v Value, args []Value) (bool, error) {
			m, err := arith("%", v, int64(2))
			return err == nil && pyEq(m, int64(0)), err
		},
		"divisibleby": func(_ *renderer, v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, errf("divisibleby takes exactly one argument")
			}
			m, err := arith("%", v, args[0])
			return err == nil && pyEq(m, int64(0)), err
		},
		"sameas": func(_ *renderer, v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, errf("sameas takes exactly one argument")
			}
			return sameAs(v, args[0]), nil
		},
		"in": func(_ *renderer, v Value, args []Value) (bool, error) {
			if len(args) != 1 {
				return false, errf("in takes exactly one argument")
			}
			return contains(args[0], v)
		},
		"filter": noArg(func(v Value) bool { s, ok := v.(string); _, f := filters[s]; return ok && f }),
		"test":   noArg(func(v Value) bool { s, ok := v.(string); _, t := tests[s]; return ok && t }),
	}
	for _, n := range []string{"eq", "equalto", "=="} {
		tests[n] = cmp("==")
	}
	for _, n := range []string{"ne", "!="} {
		tests[n] = cmp("!=")
	}
	for _, n := range []string{"lt", "lessthan", "<"} {
		tests[n] = cmp("<")
	}
	for _, n := range []string{"le", "<="} {
		tests[n] = cmp("<=")
	}
	for _, n := range []string{"gt", "greaterthan", ">"} {
		tests[n] = cmp(">")
	}
	for _, n := range []string{"ge", ">="} {
		tests[n] = cmp(">=")
	}
}

// sameAs approximates Python's `is` for the values where identity is
// predictable: None, booleans, small ints and the same container.
func sameAs(a, b Value) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		bb, ok := b.(bool)
		return ok && a == bb
	case int64:
		bi, ok := b.(int64)
		return ok && a == bi && a >= -5 && a <= 256
	case *dict:
		return a == b
	case *namespace:
		return a == b
	}
	return false
}

func (r *renderer) applyTest(name string, v Value, args []Value, kwargs []kwArg) (bool, error) {
	fn, ok := tests[name]
	if !ok {
		return false, unsupportedf("test '%s'", name)
	}
	if len(kwargs) > 0 {
		return false, unsupportedf("keyword arguments to test '%s'", name)
	}
	return fn(r, v, args)
}

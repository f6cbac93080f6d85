package chat

// noArg marks a parameter the caller did not pass.
type noArgType struct{}

var noArg = noArgType{}

// bindArgs maps positional and keyword arguments onto the named parameters
// of a Python-style signature (Python raises TypeError on a mismatch). The
// result has one entry per name, noArg where nothing was passed.
func bindArgs(fname string, names []string, required int, args []Value, kwargs []kwArg) ([]Value, error) {
	if len(args) > len(names) {
		return nil, errf("%s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	out := make([]Value, len(names))
	for i := range out {
		out[i] = noArg
	}
	copy(out, args)
	for _, kw := range kwargs {
		idx := -1
		for i, n := range names {
			if n == kw.name {
				idx = i
			}
		}
		if idx < 0 {
			return nil, errf("%s() got an unexpected keyword argument '%s'", fname, kw.name)
		}
		if idx < len(args) {
			return nil, errf("%s() got multiple values for argument '%s'", fname, kw.name)
		}
		out[idx] = kw.val
	}
	for i := 0; i < required; i++ {
		if out[i] == noArg {
			return nil, errf("%s() missing required argument: '%s'", fname, names[i])
		}
	}
	return out, nil
}

// orDefault returns v, or def when v was not passed.
func orDefault(v, def Value) Value {
	if v == noArg {
		return def
	}
	return v
}

// argString requires a str argument.
func argString(fname string, v Value) (string, error) {
	s, ok := v.(string)
	if !ok {
		if u, ok := v.(undefined); ok {
			return "", failUndefined(u)
		}
		return "", errf("%s() argument must be str, not %s", fname, typeName(v))
	}
	return s, nil
}

// argInt requires an int (or bool) argument.
func argInt(fname string, v Value) (int64, error) {
	i, ok := asInt(v)
	if !ok {
		if u, ok := v.(undefined); ok {
			return 0, failUndefined(u)
		}
		return 0, errf("%s(): '%s' object cannot be interpreted as an integer", fname, typeName(v))
	}
	return i, nil
}

func method(name string, fn func(r *renderer, args []Value, kwargs []kwArg) (Value, error)) *function {
	return &function{name: name, call: fn}
}

func unsupportedMethod(typ, name string) *function {
	return &function{name: name, unsupported: "method " + typ + "." + name + "()"}
}

// securityUndefined is what the immutable sandbox returns for a mutating
// method: using it raises a SecurityError.
func securityUndefined(typ, name string) undefined {
	return undefined{security: true, msg: "access to attribute " + pyStrRepr(name) + " of " + pyStrRepr(typ) + " object is unsafe."}
}

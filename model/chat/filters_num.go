package chat

import (
	"math"
	"strconv"
	"strings"
)

// Number filters: abs, int, float, round.

func filterAbs(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	if _, err := bindArgs("abs", nil, 0, args, kwargs); err != nil {
		return nil, err
	}
	if i, ok := asInt(v); ok {
		if i < 0 {
			return unary("-", i)
		}
		return i, nil
	}
	if f, ok := v.(float64); ok {
		return math.Abs(f), nil
	}
	return nil, errf("bad operand type for abs(): '%s'", typeName(v))
}

// pyInt is Python's int(x) for the types templates pass; ok is false where
// Python raises TypeError/ValueError.
func pyInt(v Value, base int) (int64, bool) {
	switch v := v.(type) {
	case bool, int64:
		i, _ := asInt(v)
		return i, true
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) >= 9.2e18 {
			return 0, false
		}
		return int64(v), true
	case string:
		t := strings.TrimLeft(strings.TrimFunc(v, pyIsSpace), "+-")
		if t == "" || t[0] == '_' || t[len(t)-1] == '_' || strings.Contains(t, "__") {
			return 0, false
		}
		s := strings.ReplaceAll(strings.TrimFunc(v, pyIsSpace), "_", "")
		n, err := strconv.ParseInt(s, base, 64)
		return n, err == nil
	}
	return 0, false
}

// pyFloat is Python's float(x); ok is false where Python raises.
func pyFloat(v Value) (float64, bool) {
	switch v := v.(type) {
	case bool, int64, float64:
		return asFloat(v)
	case string:
		s := strings.ToLower(strings.TrimFunc(v, func(r rune) bool { return pyIsSpace(r) }))
		switch strings.TrimLeft(s, "+-") {
		case "inf", "infinity", "nan":
		default:
			if strings.ContainsAny(s, "xp") || strings.Contains(s, "__") {
				return 0, false
			}
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			err = nil
		}
		return f, err == nil && s != ""
	}
	return 0, false
}

func filterInt(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("int", []string{"default", "base"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	base, err := argInt("int", orDefault(a[1], int64(10)))
	if err != nil {
		return nil, err
	}
	if base != 10 {
		return nil, unsupportedf("int filter with base %d", base)
	}
	if i, ok := pyInt(v, 10); ok {
		return i, nil
	}
	if f, ok := pyFloat(v); ok {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errf("cannot convert float %s to integer", pyFloatRepr(f))
		}
		if i, ok := pyInt(f, 10); ok {
			return i, nil
		}
		return nil, errOverflow()
	}
	return orDefault(a[0], int64(0)), nil
}

func filterFloat(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("float", []string{"default"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	if f, ok := pyFloat(v); ok {
		return f, nil
	}
	return orDefault(a[0], 0.0), nil
}

func filterRound(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("round", []string{"precision", "method"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	prec, err := argInt("round", orDefault(a[0], int64(0)))
	if err != nil {
		return nil, err
	}
	meth := pyStr(orDefault(a[1], "common"))
	if meth != "common" && meth != "ceil" && meth != "floor" {
		return nil, errf("method must be common, ceil or floor")
	}
	f, ok := asFloat(v)
	if !ok {
		return nil, errf("type %s doesn't define __round__ method", typeName(v))
	}
	if prec < -300 || prec > 300 {
		return nil, unsupportedf("round precision %d", prec)
	}
	if meth == "common" {
		if i, isInt := asInt(v); isInt {
			if prec >= 0 {
				return i, nil
			}
			return nil, unsupportedf("round of an int to negative precision")
		}
		if prec < 0 {
			return nil, unsupportedf("round to negative precision")
		}
		out, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(prec), 64), 64)
		return out, nil
	}
	scale := math.Pow(10, float64(prec))
	if meth == "ceil" {
		return math.Ceil(f*scale) / scale, nil
	}
	return math.Floor(f*scale) / scale, nil
}

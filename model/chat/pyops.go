package chat

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// typeError is a Python TypeError/ValueError/ZeroDivisionError raised while
// evaluating; the renderer adds the line.
type typeError struct{ msg string }

func (e *typeError) Error() string { return e.msg }

func errf(format string, args ...any) error { return &typeError{msg: fmt.Sprintf(format, args...)} }

// undefinedError is jinja2.exceptions.UndefinedError (or SecurityError for
// sandbox-refused attributes).
type undefinedError struct{ u undefined }

func (e *undefinedError) Error() string {
	if e.u.security {
		return "SecurityError: " + e.u.msg
	}
	return "UndefinedError: " + e.u.msg
}

func failUndefined(u undefined) error { return &undefinedError{u: u} }

// truthy is Python's bool(v).
func truthy(v Value) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case []Value:
		return len(v) > 0
	case tuple:
		return len(v) > 0
	case *dict:
		return v.len() > 0
	case undefined:
		return false
	case rangeVal:
		return v.len() > 0
	case *dictView:
		return len(v.items) > 0
	}
	return true
}

// asNumber widens bool and int to a number; ok is false for other types.
func asInt(v Value) (int64, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case int64:
		return v, true
	}
	return 0, false
}

func asFloat(v Value) (float64, bool) {
	if i, ok := asInt(v); ok {
		return float64(i), true
	}
	if f, ok := v.(float64); ok {
		return f, true
	}
	return 0, false
}

func isNumber(v Value) bool {
	switch v.(type) {
	case bool, int64, float64:
		return true
	}
	return false
}

// pyEq is Python's ==.
func pyEq(a, b Value) bool {
	if isNumber(a) && isNumber(b) {
		ai, aInt := asInt(a)
		bi, bInt := asInt(b)
		if aInt && bInt {
			return ai == bi
		}
		af, _ := asFloat(a)
		bf, _ := asFloat(b)
		return af == bf
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		bs, ok := b.(string)
		return ok && a == bs
	case []Value:
		bl, ok := b.([]Value)
		return ok && seqEq(a, bl)
	case tuple:
		bt, ok := b.(tuple)
		return ok && seqEq(a, bt)
	case *dict:
		bd, ok := b.(*dict)
		if !ok || a.len() != bd.len() {
			return false
		}
		for i, k := range a.keys {
			bv, ok := bd.get(k)
			if !ok || !pyEq(a.vals[i], bv) {
				return false
			}
		}
		return true
	case undefined:
		_, ok := b.(undefined)
		return ok
	case rangeVal:
		br, ok := b.(rangeVal)
		if !ok {
			return false
		}
		n := a.len()
		if n != br.len() {
			return false
		}
		return n == 0 || (a.start == br.start && (n == 1 || a.step == br.step))
	case *namespace:
		return a == b
	case *loopInfo:
		return a == b
	case *function:
		return a == b
	case *iterator:
		return a == b
	}
	return false
}

func seqEq(a, b []Value) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !pyEq(a[i], b[i]) {
			return false
		}
	}
	return true
}

// pyLess is Python's <; it errors for unorderable types.
func pyLess(a, b Value) (bool, error) {
	if u, ok := a.(undefined); ok {
		return false, failUndefined(u)
	}
	if u, ok := b.(undefined); ok {
		return false, failUndefined(u)
	}
	if isNumber(a) && isNumber(b) {
		ai, aInt := asInt(a)
		bi, bInt := asInt(b)
		if aInt && bInt {
			return ai < bi, nil
		}
		af, _ := asFloat(a)
		bf, _ := asFloat(b)
		return af < bf, nil
	}
	switch a := a.(type) {
	case string:
		if bs, ok := b.(string); ok {
			return a < bs, nil // UTF-8 byte order is code point order
		}
	case []Value:
		if bl, ok := b.([]Value); ok {
			return seqLess(a, bl)
		}
	case tuple:
		if bt, ok := b.(tuple); ok {
			return seqLess(a, bt)
		}
	}
	return false, errf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func seqLess(a, b []Value) (bool, error) {
	for i := 0; i < len(a) && i < len(b); i++ {
		if !pyEq(a[i], b[i]) {
			return pyLess(a[i], b[i])
		}
	}
	return len(a) < len(b), nil
}

// compare applies one comparison operator.
func compare(op string, a, b Value) (bool, error) {
	switch op {
	case "==":
		return pyEq(a, b), nil
	case "!=":
		return !pyEq(a, b), nil
	case "<":
		return pyLess(a, b)
	case ">":
		return pyLess(b, a)
	case "<=":
		lt, err := pyLess(b, a)
		return !lt && err == nil, replaceOp(err, "<=", a, b)
	case ">=":
		lt, err := pyLess(a, b)
		return !lt && err == nil, replaceOp(err, ">=", a, b)
	case "in":
		return contains(b, a)
	case "notin":
		in, err := contains(b, a)
		return !in, err
	}
	return false, errf("unknown comparison %q", op)
}

func replaceOp(err error, op string, a, b Value) error {
	if te, ok := err.(*typeError); ok && strings.HasPrefix(te.msg, "'<'") {
		return errf("'%s' not supported between instances of '%s' and '%s'", op, typeName(a), typeName(b))
	}
	return err
}

// contains is Python's `item in container`.
func contains(container, item Value) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			if u, ok := item.(undefined); ok {
				return false, failUndefined(u)
			}
			return false, errf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case []Value:
		return seqContains(c, item), nil
	case tuple:
		return seqContains(c, item), nil
	case *dict:
		if _, ok := keyOf(item); !ok {
			return false, errf("unhashable type: '%s'", typeName(item))
		}
		_, ok := c.get(item)
		return ok, nil
	case undefined:
		return false, nil
	case *dictView:
		return seqContains(c.items, item), nil
	case *iterator:
		for c.pos < len(c.items) {
			c.pos++
			if pyEq(c.items[c.pos-1], item) {
				return true, nil
			}
		}
		return false, nil
	case rangeVal:
		i, ok := item.(int64)
		if !ok {
			return seqContains(c.list(), item), nil
		}
		if c.step > 0 {
			return i >= c.start && i < c.stop && (i-c.start)%c.step == 0, nil
		}
		return i <= c.start && i > c.stop && (c.start-i)%(-c.step) == 0, nil
	}
	return false, errf("argument of type '%s' is not iterable", typeName(container))
}

func seqContains(s []Value, item Value) bool {
	for _, e := range s {
		if pyEq(e, item) {
			return true
		}
	}
	return false
}

// iterate lists the items `for x in v` visits.
func iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case []Value:
		return v, nil
	case tuple:
		return v, nil
	case string:
		out := make([]Value, 0, utf8.RuneCountInString(v))
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case *dict:
		return append([]Value(nil), v.keys...), nil
	case undefined:
		return nil, nil
	case rangeVal:
		return v.list(), nil
	case *loopInfo:
		return v.items, nil
	case *dictView:
		return v.items, nil
	case *iterator:
		return v.rest(), nil
	}
	return nil, errf("'%s' object is not iterable", typeName(v))
}

// length is Python's len(v).
func length(v Value) (int64, error) {
	switch v := v.(type) {
	case string:
		return int64(utf8.RuneCountInString(v)), nil
	case []Value:
		return int64(len(v)), nil
	case tuple:
		return int64(len(v)), nil
	case *dict:
		return int64(v.len()), nil
	case undefined:
		return 0, nil
	case rangeVal:
		return v.len(), nil
	case *loopInfo:
		return int64(len(v.items)), nil
	case *dictView:
		return int64(len(v.items)), nil
	}
	return 0, errf("object of type '%s' has no len()", typeName(v))
}

// Arithmetic.

func arith(op string, a, b Value) (Value, error) {
	if u, ok := a.(undefined); ok {
		return nil, failUndefined(u)
	}
	if u, ok := b.(undefined); ok {
		return nil, failUndefined(u)
	}
	ai, aInt := asInt(a)
	bi, bInt := asInt(b)
	if aInt && bInt {
		return intArith(op, ai, bi)
	}
	if isNumber(a) && isNumber(b) {
		af, _ := asFloat(a)
		bf, _ := asFloat(b)
		return floatArith(op, af, bf)
	}
	switch op {
	case "+":
		switch a := a.(type) {
		case string:
			if bs, ok := b.(string); ok {
				if int64(len(a)+len(bs)) > maxStringLen {
					return nil, errLimit("string too large")
				}
				return a + bs, nil
			}
			return nil, errf("can only concatenate str (not \"%s\") to str", typeName(b))
		case []Value:
			if bl, ok := b.([]Value); ok {
				if err := checkListLen(len(a) + len(bl)); err != nil {
					return nil, err
				}
				return concatValues(a, bl), nil
			}
			return nil, errf("can only concatenate list (not \"%s\") to list", typeName(b))
		case tuple:
			if bt, ok := b.(tuple); ok {
				if err := checkListLen(len(a) + len(bt)); err != nil {
					return nil, err
				}
				return tuple(concatValues(a, bt)), nil
			}
			return nil, errf("can only concatenate tuple (not \"%s\") to tuple", typeName(b))
		}
	case "*":
		if n, ok := asInt(b); ok {
			return repeat(a, n)
		}
		if n, ok := asInt(a); ok {
			return repeat(b, n)
		}
	case "%":
		if _, ok := a.(string); ok {
			return nil, unsupportedf("string formatting with '%%'")
		}
	}
	return nil, errf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

func concatValues(a, b []Value) []Value {
	out := make([]Value, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

// checkListLen reports lists beyond the safety limit.
func checkListLen(n int) error {
	if int64(n) > maxListLen {
		return errLimit("list too large")
	}
	return nil
}

func repeat(v Value, n int64) (Value, error) {
	if n < 0 {
		n = 0
	}
	switch v := v.(type) {
	case string:
		if int64(len(v))*n > maxStringLen || (n > 0 && int64(len(v)) > maxStringLen/n) {
			return nil, errLimit("string repetition result too large")
		}
		return strings.Repeat(v, int(n)), nil
	case []Value, tuple:
		items, _ := iterate(v)
		if int64(len(items))*n > maxListLen || (n > 0 && int64(len(items)) > maxListLen/n) {
			return nil, errLimit("list repetition result too large")
		}
		out := make([]Value, 0, int64(len(items))*n)
		for i := int64(0); i < n; i++ {
			out = append(out, items...)
		}
		if _, ok := v.(tuple); ok {
			return tuple(out), nil
		}
		return out, nil
	}
	return nil, errf("can't multiply sequence by non-int of type '%s'", typeName(v))
}

func intArith(op string, a, b int64) (Value, error) {
	switch op {
	case "+":
		r := a + b
		if (r > a) != (b > 0) {
			return nil, errOverflow()
		}
		return r, nil
	case "-":
		r := a - b
		if (r < a) != (b > 0) {
			return nil, errOverflow()
		}
		return r, nil
	case "*":
		if a == 0 || b == 0 {
			return int64(0), nil
		}
		r := a * b
		if r/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
			return nil, errOverflow()
		}
		return r, nil
	case "/":
		if b == 0 {
			return nil, errf("division by zero")
		}
		return float64(a) / float64(b), nil
	case "//":
		if b == 0 {
			return nil, errf("integer division or modulo by zero")
		}
		if a == math.MinInt64 && b == -1 {
			return nil, errOverflow()
		}
		q := a / b
		if (a%b != 0) && ((a < 0) != (b < 0)) {
			q--
		}
		return q, nil
	case "%":
		if b == 0 {
			return nil, errf("integer division or modulo by zero")
		}
		if b == -1 {
			return int64(0), nil
		}
		m := a % b
		if m != 0 && ((m < 0) != (b < 0)) {
			m += b
		}
		return m, nil
	case "**":
		if b < 0 {
			return math.Pow(float64(a), float64(b)), nil
		}
		r := int64(1)
		base := a
		for e := b; e > 0; e >>= 1 {
			if e&1 == 1 {
				v, err := intArith("*", r, base)
				if err != nil {
					return nil, err
				}
				r = v.(int64)
			}
			if e > 1 {
				v, err := intArith("*", base, base)
				if err != nil {
					return nil, err
				}
				base = v.(int64)
			}
		}
		return r, nil
	}
	return nil, errf("unknown operator %q", op)
}

func floatArith(op string, a, b float64) (Value, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errf("float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, errf("float floor division by zero")
		}
		return math.Floor(a / b), nil
	case "%":
		if b == 0 {
			return nil, errf("float modulo")
		}
		m := math.Mod(a, b)
		if m != 0 && ((m < 0) != (b < 0)) {
			m += b
		}
		return m, nil
	case "**":
		if a == 0 && b < 0 {
			return nil, errf("0.0 cannot be raised to a negative power")
		}
		return math.Pow(a, b), nil
	}
	return nil, errf("unknown operator %q", op)
}

func errOverflow() error {
	return unsupportedf("integer beyond 64 bits")
}

// unary applies -x, +x.
func unary(op string, v Value) (Value, error) {
	if u, ok := v.(undefined); ok {
		return nil, failUndefined(u)
	}
	if i, ok := asInt(v); ok {
		if op == "-" {
			if i == math.MinInt64 {
				return nil, errOverflow()
			}
			return -i, nil
		}
		return i, nil
	}
	if f, ok := v.(float64); ok {
		if op == "-" {
			return -f, nil
		}
		return f, nil
	}
	return nil, errf("bad operand type for unary %s: '%s'", op, typeName(v))
}

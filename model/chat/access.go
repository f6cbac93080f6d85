package chat

import (
	"strings"
	"unicode/utf8"
)

// Attribute and item access follow jinja2's sandboxed environment:
//
//	x.name   tries the Python attribute (a method, a namespace attribute,
//	         a loop field), then the item x["name"];
//	x[key]   tries the item, then (for string keys) the attribute.
//
// What is found nowhere is undefined; attributes the immutable sandbox
// refuses (mutating methods, dunder names) are an undefined that raises a
// SecurityError when used.

func getattr(obj Value, name string) (Value, error) {
	if u, ok := obj.(undefined); ok {
		return nil, failUndefined(u)
	}
	if v, ok := pyAttr(obj, name); ok {
		return v, nil
	}
	if d, ok := obj.(*dict); ok {
		if v, ok := d.get(name); ok {
			return v, nil
		}
	}
	return undefinedAttr(obj, name), nil
}

func getitem(obj, key Value) (Value, error) {
	if u, ok := obj.(undefined); ok {
		return nil, failUndefined(u)
	}
	if v, ok := item(obj, key); ok {
		return v, nil
	}
	if s, ok := key.(string); ok {
		if v, ok := pyAttr(obj, s); ok {
			return v, nil
		}
	}
	return undefinedElem(obj, key), nil
}

// item is obj[key]; ok is false where Python raises a LookupError or
// TypeError (which Jinja turns into undefined).
func item(obj, key Value) (Value, bool) {
	switch o := obj.(type) {
	case *dict:
		return o.get(key)
	case []Value:
		return seqItem(o, key)
	case tuple:
		v, ok := seqItem(o, key)
		if _, isSlice := key.(sliceVal); isSlice && ok {
			return tuple(v.([]Value)), true
		}
		return v, ok
	case string:
		if sl, ok := key.(sliceVal); ok {
			rs := []rune(o)
			idx, ok := sliceIndices(sl, len(rs))
			if !ok {
				return nil, false
			}
			out := make([]rune, 0, len(idx))
			for _, i := range idx {
				out = append(out, rs[i])
			}
			return string(out), true
		}
		i, ok := asInt(key)
		if !ok {
			return nil, false
		}
		n := int64(utf8.RuneCountInString(o))
		if i < 0 {
			i += n
		}
		if i < 0 || i >= n {
			return nil, false
		}
		for j, r := range []rune(o) {
			if int64(j) == i {
				return string(r), true
			}
		}
	case rangeVal:
		return seqItem(o.list(), key)
	}
	return nil, false
}

func seqItem(s []Value, key Value) (Value, bool) {
	if sl, ok := key.(sliceVal); ok {
		idx, ok := sliceIndices(sl, len(s))
		if !ok {
			return nil, false
		}
		out := make([]Value, 0, len(idx))
		for _, i := range idx {
			out = append(out, s[i])
		}
		return out, true
	}
	i, ok := asInt(key)
	if !ok {
		return nil, false
	}
	if i < 0 {
		i += int64(len(s))
	}
	if i < 0 || i >= int64(len(s)) {
		return nil, false
	}
	return s[i], true
}

// sliceIndices lists the indices s[start:stop:step] selects from a
// sequence of length n; ok is false for non-integer bounds or a zero step.
func sliceIndices(sl sliceVal, n int) ([]int, bool) {
	get := func(v Value) (int64, bool, bool) { // value, present, ok
		if v == nil {
			return 0, false, true
		}
		i, ok := asInt(v)
		return i, true, ok
	}
	step, hasStep, ok := get(sl.step)
	if !ok {
		return nil, false
	}
	if !hasStep {
		step = 1
	}
	if step == 0 {
		return nil, false
	}
	ln := int64(n)
	start, hasStart, ok1 := get(sl.start)
	stop, hasStop, ok2 := get(sl.stop)
	if !ok1 || !ok2 {
		return nil, false
	}
	adjust := func(i int64, lower, upper int64) int64 {
		if i < 0 {
			i += ln
			if i < 0 {
				i = lower
			}
		} else if i >= ln {
			i = upper
		}
		return i
	}
	var lower, upper int64 = 0, ln
	if step < 0 {
		lower, upper = -1, ln-1
	}
	if !hasStart {
		if step < 0 {
			start = upper
		} else {
			start = lower
		}
	} else {
		start = adjust(start, lower, upper)
	}
	if !hasStop {
		if step < 0 {
			stop = lower
		} else {
			stop = upper
		}
	} else {
		stop = adjust(stop, lower, upper)
	}
	var out []int
	if step > 0 {
		for i := start; i < stop; i += step {
			out = append(out, int(i))
		}
	} else {
		for i := start; i > stop; i += step {
			out = append(out, int(i))
		}
	}
	return out, true
}

// pyAttr looks up a Python attribute of obj: a bound method, a namespace
// attribute or a loop field. It does not look at dict items.
func pyAttr(obj Value, name string) (Value, bool) {
	if strings.HasPrefix(name, "_") {
		if hasDunder(obj, name) {
			return undefined{security: true, msg: "access to attribute " + pyStrRepr(name) + " of " + pyStrRepr(typeName(obj)) + " object is unsafe."}, true
		}
		return nil, false
	}
	switch o := obj.(type) {
	case *dict:
		return dictMethod(o, name)
	case string:
		return strMethod(o, name)
	case []Value:
		return listMethod(o, name, "list")
	case tuple:
		return listMethod(o, name, "tuple")
	case *namespace:
		return o.attrs.get(name)
	case *loopInfo:
		return o.attr(name)
	}
	return nil, false
}

// hasDunder reports names like __class__ that every Python object has.
func hasDunder(obj Value, name string) bool {
	if obj == nil {
		return false
	}
	return strings.HasPrefix(name, "__") && strings.HasSuffix(name, "__") && len(name) > 4
}

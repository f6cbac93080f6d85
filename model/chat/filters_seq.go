package chat

import (
	"slices"
	"strconv"
	"strings"
)

// Sequence filters: map, select/reject(attr), sort, unique, min, max, sum.

// attrGetter mirrors jinja2.filters.make_attrgetter: a dotted path whose
// integer parts index, each part looked up with getitem.
func attrGetter(attribute Value, def Value) (func(Value) (Value, error), error) {
	var parts []Value
	switch a := attribute.(type) {
	case string:
		for _, p := range strings.Split(a, ".") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil && strings.TrimLeft(p, "0123456789") == "" {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	case int64:
		parts = []Value{a}
	default:
		parts = []Value{attribute}
	}
	return func(item Value) (Value, error) {
		for _, p := range parts {
			var err error
			if item, err = getitem(item, p); err != nil {
				return nil, err
			}
			if _, isU := item.(undefined); isU && def != nil {
				item = def
			}
		}
		return item, nil
	}, nil
}

func mapAttr(items []Value, attribute, def Value) ([]Value, error) {
	get, err := attrGetter(attribute, def)
	if err != nil {
		return nil, err
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if out[i], err = get(it); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func filterMap(r *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(args) == 0 {
		var attr, def Value = noArg, nil
		for _, kw := range kwargs {
			switch kw.name {
			case "attribute":
				attr = kw.val
			case "default":
				def = kw.val
			default:
				return nil, errf("Unexpected keyword argument '%s'", kw.name)
			}
		}
		if attr == noArg {
			return nil, errf("map requires a filter argument")
		}
		out, err := mapAttr(items, attr, def)
		return newGenerator(out), err
	}
	name, ok := args[0].(string)
	if !ok {
		return nil, errf("map requires a filter name")
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if out[i], err = r.applyFilter(name, it, args[1:], kwargs); err != nil {
			return nil, err
		}
	}
	return newGenerator(out), nil
}

// selectFilter builds select/reject (keep=true/false) and their *attr
// variants.
func selectFilter(keep, byAttr bool) filterFn {
	return func(r *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		get := func(x Value) (Value, error) { return x, nil }
		if byAttr {
			if len(args) == 0 {
				return nil, errf("Missing parameter for attribute name")
			}
			if get, err = attrGetter(args[0], nil); err != nil {
				return nil, err
			}
			args = args[1:]
		}
		var out []Value
		for _, it := range items {
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			var ok bool
			if len(args) == 0 {
				ok = truthy(x)
			} else {
				name, isStr := args[0].(string)
				if !isStr {
					return nil, errf("test name must be a string")
				}
				if ok, err = r.applyTest(name, x, args[1:], kwargs); err != nil {
					return nil, err
				}
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return newGenerator(out), nil
	}
}

// sortKeys prepares values for comparison: attribute lookup and, unless
// case-sensitive, lower-cased strings.
func sortKeys(items []Value, attribute Value, caseSensitive bool) ([]Value, error) {
	keys := items
	if attribute != nil {
		var err error
		if keys, err = mapAttr(items, attribute, nil); err != nil {
			return nil, err
		}
	}
	out := make([]Value, len(keys))
	for i, k := range keys {
		if s, ok := k.(string); ok && !caseSensitive {
			k = pyLower(s)
		}
		out[i] = k
	}
	return out, nil
}

func filterSort(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("sort", []string{"reverse", "case_sensitive", "attribute"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	keys, err := sortKeys(items, orDefault(a[2], nil), truthy(orDefault(a[1], false)))
	if err != nil {
		return nil, err
	}
	reverse := truthy(orDefault(a[0], false))
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var sortErr error
	slices.SortStableFunc(idx, func(x, y int) int {
		if reverse {
			x, y = y, x
		}
		lt, err := pyLess(keys[x], keys[y])
		if err != nil {
			sortErr = err
		}
		if lt {
			return -1
		}
		if gt, _ := pyLess(keys[y], keys[x]); gt {
			return 1
		}
		return 0
	})
	if sortErr != nil {
		return nil, sortErr
	}
	out := make([]Value, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, nil
}

func filterUnique(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("unique", []string{"case_sensitive", "attribute"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	keys, err := sortKeys(items, orDefault(a[1], nil), truthy(orDefault(a[0], false)))
	if err != nil {
		return nil, err
	}
	seen := newDict()
	out := []Value{}
	for i, it := range items {
		if _, ok := seen.get(keys[i]); ok {
			continue
		}
		if !seen.set(keys[i], true) {
			return nil, errf("unhashable type: '%s'", typeName(keys[i]))
		}
		out = append(out, it)
	}
	return newGenerator(out), nil
}

func minMaxFilter(isMax bool) filterFn {
	name := "min"
	if isMax {
		name = "max"
	}
	return func(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
		a, err := bindArgs(name, []string{"case_sensitive", "attribute"}, 0, args, kwargs)
		if err != nil {
			return nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{msg: "No aggregated item, sequence was empty."}, nil
		}
		keys, err := sortKeys(items, orDefault(a[1], nil), truthy(orDefault(a[0], false)))
		if err != nil {
			return nil, err
		}
		best := 0
		for i := 1; i < len(items); i++ {
			var better bool
			if isMax {
				better, err = pyLess(keys[best], keys[i])
			} else {
				better, err = pyLess(keys[i], keys[best])
			}
			if err != nil {
				return nil, err
			}
			if better {
				best = i
			}
		}
		return items[best], nil
	}
}

func filterSum(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("sum", []string{"attribute", "start"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if attr := orDefault(a[0], nil); attr != nil {
		if items, err = mapAttr(items, attr, nil); err != nil {
			return nil, err
		}
	}
	total := orDefault(a[1], int64(0))
	if _, isStr := total.(string); isStr {
		return nil, errf("sum() can't sum strings [use ''.join(seq) instead]")
	}
	for _, it := range items {
		if total, err = arith("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

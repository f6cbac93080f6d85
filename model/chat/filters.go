package chat

import (
	"slices"
	"strings"
)

// filterFn implements one filter: v is the filtered value.
type filterFn func(r *renderer, v Value, args []Value, kwargs []kwArg) (Value, error)

// filters are the supported Jinja filters (tojson is transformers'
// version). Jinja's other built-in filters are listed in
// unsupportedFilters only to name them in the refusal.
var filters map[string]filterFn

// unsupportedFilters are Jinja built-ins outside the subset.
var unsupportedFilters = []string{
	"batch", "center", "dictsort", "e", "escape", "filesizeformat", "forceescape",
	"format", "groupby", "pprint", "random", "safe", "slice", "striptags", "truncate",
	"urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
}

func init() {
	filters = map[string]filterFn{
		"abs":        filterAbs,
		"attr":       filterAttr,
		"capitalize": strFilter("capitalize", pyCapitalize),
		"count":      filterLength,
		"d":          filterDefault,
		"default":    filterDefault,
		"first":      filterFirst,
		"float":      filterFloat,
		"indent":     filterIndent,
		"int":        filterInt,
		"items":      filterItems,
		"join":       filterJoin,
		"last":       filterLast,
		"length":     filterLength,
		"list":       filterList,
		"lower":      strFilter("lower", pyLower),
		"map":        filterMap,
		"max":        minMaxFilter(true),
		"min":        minMaxFilter(false),
		"reject":     selectFilter(false, false),
		"rejectattr": selectFilter(false, true),
		"replace":    filterReplace,
		"reverse":    filterReverse,
		"round":      filterRound,
		"select":     selectFilter(true, false),
		"selectattr": selectFilter(true, true),
		"sort":       filterSort,
		"string":     filterString,
		"sum":        filterSum,
		"title":      strFilter("title", jinjaTitle),
		"tojson": func(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
			return tojsonFilter(v, args, kwargs)
		},
		"trim":   filterTrim,
		"unique": filterUnique,
		"upper":  strFilter("upper", pyUpper),
	}
}

// applyFilterExpr evaluates a filter's arguments and applies it to v.
func (r *renderer) applyFilterExpr(f *filterExpr, v Value, sc *scope) (Value, error) {
	args, err := r.evalAll(f.args, sc)
	if err != nil {
		return nil, err
	}
	kwargs, err := r.evalKwargs(f.kwargs, sc)
	if err != nil {
		return nil, err
	}
	out, err := r.applyFilter(f.name, v, args, kwargs)
	return out, atLine(err, f.line)
}

func (r *renderer) applyFilter(name string, v Value, args []Value, kwargs []kwArg) (Value, error) {
	fn, ok := filters[name]
	if !ok {
		return nil, unsupportedf("filter '%s'", name)
	}
	work := workOf(v)
	if name == "sort" || name == "unique" {
		work *= 24 // n log n comparisons
	}
	if err := r.charge(work); err != nil {
		return nil, err
	}
	return fn(r, v, args, kwargs)
}

func strFilter(name string, fn func(string) string) filterFn {
	return func(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
		if _, err := bindArgs(name, nil, 0, args, kwargs); err != nil {
			return nil, err
		}
		return fn(pyStr(v)), nil
	}
}

func filterTrim(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("trim", []string{"chars"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	var chars *string
	if c := orDefault(a[0], nil); c != nil {
		cs, err := argString("trim", c)
		if err != nil {
			return nil, err
		}
		chars = &cs
	}
	return pyStrip(pyStr(v), chars, true, true), nil
}

func filterString(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	if _, err := bindArgs("string", nil, 0, args, kwargs); err != nil {
		return nil, err
	}
	return pyStr(v), nil
}

func filterLength(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	if _, err := bindArgs("length", nil, 0, args, kwargs); err != nil {
		return nil, err
	}
	return length(v)
}

func filterDefault(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("default", []string{"default_value", "boolean"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	_, isUndef := v.(undefined)
	if isUndef || (truthy(orDefault(a[1], false)) && !truthy(v)) {
		return orDefault(a[0], ""), nil
	}
	return v, nil
}

func filterFirst(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	if _, err := bindArgs("first", nil, 0, args, kwargs); err != nil {
		return nil, err
	}
	if it, ok := v.(*iterator); ok {
		if it.pos >= len(it.items) {
			return undefined{msg: "No first item, sequence was empty."}, nil
		}
		it.pos++
		return it.items[it.pos-1], nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{msg: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	if _, err := bindArgs("last", nil, 0, args, kwargs); err != nil {
		return nil, err
	}
	if it, ok := v.(*iterator); ok {
		return nil, errf("'%s' object is not reversible", it.kind)
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefined{msg: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterList(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	if _, err := bindArgs("list", nil, 0, args, kwargs); err != nil {
		return nil, err
	}
	items, err := iterate(v)
	return append([]Value{}, items...), err
}

func filterReverse(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	if _, err := bindArgs("reverse", nil, 0, args, kwargs); err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		rs := []rune(s)
		slices.Reverse(rs)
		return string(rs), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, errf("argument must be iterable")
	}
	out := append([]Value{}, items...)
	slices.Reverse(out)
	// reversed() works on sequences and gives an iterator; other
	// iterables are listed and reversed.
	switch v.(type) {
	case []Value:
		return &iterator{kind: "list_reverseiterator", items: out}, nil
	case tuple, undefined:
		return &iterator{kind: "reversed", items: out}, nil
	case rangeVal:
		return &iterator{kind: "range_iterator", items: out}, nil
	case *dict:
		return &iterator{kind: "dict_reversekeyiterator", items: out}, nil
	case *dictView:
		return &iterator{kind: "dict_reverseiterator", items: out}, nil
	}
	return out, nil
}

func filterJoin(r *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("join", []string{"d", "attribute"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if attr := orDefault(a[1], nil); attr != nil {
		if items, err = mapAttr(items, attr, nil); err != nil {
			return nil, err
		}
	}
	sep := pyStr(orDefault(a[0], ""))
	parts := make([]string, len(items))
	size := 0
	for i, it := range items {
		parts[i] = pyStr(it)
		size += len(parts[i]) + len(sep)
		if int64(size) > maxStringLen {
			return nil, errLimit("joined string too large")
		}
	}
	return strings.Join(parts, sep), nil
}

func filterReplace(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("replace", []string{"old", "new", "count"}, 2, args, kwargs)
	if err != nil {
		return nil, err
	}
	n := int64(-1)
	if c := orDefault(a[2], nil); c != nil {
		if n, err = argInt("replace", c); err != nil {
			return nil, err
		}
	}
	return pyReplace(pyStr(v), pyStr(a[0]), pyStr(a[1]), n)
}

func filterItems(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	if _, err := bindArgs("items", nil, 0, args, kwargs); err != nil {
		return nil, err
	}
	switch d := v.(type) {
	case undefined:
		return newGenerator(nil), nil
	case *dict:
		out := make([]Value, d.len())
		for i, k := range d.keys {
			out[i] = tuple{k, d.vals[i]}
		}
		return newGenerator(out), nil
	}
	return nil, errf("Can only get item pairs from a mapping.")
}

func filterAttr(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("attr", []string{"name"}, 1, args, kwargs)
	if err != nil {
		return nil, err
	}
	name, err := argString("attr", a[0])
	if err != nil {
		return nil, err
	}
	if u, ok := v.(undefined); ok {
		return nil, failUndefined(u)
	}
	if attr, ok := pyAttr(v, name); ok {
		return attr, nil
	}
	return undefinedAttr(v, name), nil
}

func filterIndent(_ *renderer, v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("indent", []string{"width", "first", "blank"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	var ind string
	switch w := orDefault(a[0], int64(4)).(type) {
	case string:
		ind = w
	default:
		n, err := argInt("indent", w)
		if err != nil {
			return nil, err
		}
		if n > 1024 {
			return nil, errLimit("indent width too large")
		}
		if n > 0 {
			ind = strings.Repeat(" ", int(n))
		}
	}
	s := pyStr(v) + "\n"
	lines := pySplitlines(s, false)
	if int64(len(s)+len(lines)*len(ind)) > maxStringLen {
		return nil, errLimit("indented string too large")
	}
	var out string
	if truthy(orDefault(a[2], false)) {
		out = strings.Join(lines, "\n"+ind)
	} else {
		out = lines[0]
		rest := lines[1:]
		if len(rest) > 0 {
			parts := make([]string, len(rest))
			for i, l := range rest {
				if l != "" {
					l = ind + l
				}
				parts[i] = l
			}
			out += "\n" + strings.Join(parts, "\n")
		}
	}
	if truthy(orDefault(a[1], false)) {
		out = ind + out
	}
	return out, nil
}

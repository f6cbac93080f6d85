package chat

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Methods of str, list/tuple and dict that templates call. Other real
// Python methods are refused by name when called; mutating methods are
// refused by the sandbox (SecurityError) as in transformers.

var strUnsupported = []string{
	"casefold", "center", "encode", "expandtabs", "format", "format_map", "isascii",
	"isdecimal", "isidentifier", "isnumeric", "isprintable", "istitle", "ljust",
	"maketrans", "rjust", "swapcase", "translate", "zfill",
}

func strMethod(s, name string) (Value, bool) {
	m := func(fn func(args []Value, kwargs []kwArg) (Value, error)) (Value, bool) {
		return method(name, func(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
			return fn(args, kwargs)
		}), true
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			a, err := bindArgs(name, []string{"chars"}, 0, args, kwargs)
			if err != nil {
				return nil, err
			}
			var chars *string
			if c := orDefault(a[0], nil); c != nil {
				cs, err := argString(name, c)
				if err != nil {
					return nil, err
				}
				chars = &cs
			}
			return pyStrip(s, chars, name != "rstrip", name != "lstrip"), nil
		})
	case "split", "rsplit":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			a, err := bindArgs(name, []string{"sep", "maxsplit"}, 0, args, kwargs)
			if err != nil {
				return nil, err
			}
			maxsplit, err := argInt(name, orDefault(a[1], int64(-1)))
			if err != nil {
				return nil, err
			}
			var parts []string
			if sep := orDefault(a[0], nil); sep == nil {
				if name == "split" {
					parts = pySplitWhitespace(s, int(maxsplit))
				} else {
					parts = pyRSplitWhitespace(s, int(maxsplit))
				}
			} else {
				sepStr, err := argString(name, sep)
				if err != nil {
					return nil, err
				}
				if sepStr == "" {
					return nil, errf("empty separator")
				}
				parts = splitSep(s, sepStr, int(maxsplit), name == "rsplit")
			}
			return stringsToValues(parts), nil
		})
	case "splitlines":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			a, err := bindArgs(name, []string{"keepends"}, 0, args, kwargs)
			if err != nil {
				return nil, err
			}
			return stringsToValues(pySplitlines(s, truthy(orDefault(a[0], false)))), nil
		})
	case "startswith", "endswith":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			a, err := bindArgs(name, []string{"prefix", "start", "end"}, 1, args, kwargs)
			if err != nil {
				return nil, err
			}
			sub, err := substrArgs(name, s, a[1], a[2])
			if err != nil {
				return nil, err
			}
			var cands []Value
			if t, ok := a[0].(tuple); ok {
				cands = t
			} else {
				cands = []Value{a[0]}
			}
			for _, c := range cands {
				cs, ok := c.(string)
				if !ok {
					return nil, errf("%s first arg must be str or a tuple of str, not %s", name, typeName(c))
				}
				if (name == "startswith" && strings.HasPrefix(sub, cs)) || (name == "endswith" && strings.HasSuffix(sub, cs)) {
					return true, nil
				}
			}
			return false, nil
		})
	case "upper":
		return m(noArgs(name, func() Value { return pyUpper(s) }))
	case "lower":
		return m(noArgs(name, func() Value { return pyLower(s) }))
	case "capitalize":
		return m(noArgs(name, func() Value { return pyCapitalize(s) }))
	case "title":
		return m(noArgs(name, func() Value { return pyTitle(s) }))
	case "isdigit", "isalpha", "isalnum", "isspace":
		return m(noArgs(name, func() Value { return strIs(name, s) }))
	case "islower":
		return m(noArgs(name, func() Value { return pyIsLower(s) }))
	case "isupper":
		return m(noArgs(name, func() Value { return pyIsUpper(s) }))
	case "replace":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			a, err := bindArgs(name, []string{"old", "new", "count"}, 2, args, kwargs)
			if err != nil {
				return nil, err
			}
			old, err := argString(name, a[0])
			if err != nil {
				return nil, err
			}
			nw, err := argString(name, a[1])
			if err != nil {
				return nil, err
			}
			n, err := argInt(name, orDefault(a[2], int64(-1)))
			if err != nil {
				return nil, err
			}
			return pyReplace(s, old, nw, n)
		})
	case "find", "rfind", "index", "rindex", "count":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			if len(kwargs) > 0 {
				return nil, errf("%s() takes no keyword arguments", name)
			}
			a, err := bindArgs(name, []string{"sub", "start", "end"}, 1, args, nil)
			if err != nil {
				return nil, err
			}
			sub, err := argString(name, a[0])
			if err != nil {
				return nil, err
			}
			return strFind(name, s, sub, a[1], a[2])
		})
	case "join":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			a, err := bindArgs(name, []string{"iterable"}, 1, args, kwargs)
			if err != nil {
				return nil, err
			}
			items, err := iterate(a[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			size := 0
			for i, it := range items {
				str, ok := it.(string)
				if !ok {
					return nil, errf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = str
				if size += len(str) + len(s); int64(size) > maxStringLen {
					return nil, errLimit("joined string too large")
				}
			}
			return strings.Join(parts, s), nil
		})
	case "removeprefix", "removesuffix":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			a, err := bindArgs(name, []string{"affix"}, 1, args, kwargs)
			if err != nil {
				return nil, err
			}
			affix, err := argString(name, a[0])
			if err != nil {
				return nil, err
			}
			if name == "removeprefix" {
				return strings.TrimPrefix(s, affix), nil
			}
			return strings.TrimSuffix(s, affix), nil
		})
	case "partition", "rpartition":
		return m(func(args []Value, kwargs []kwArg) (Value, error) {
			a, err := bindArgs(name, []string{"sep"}, 1, args, kwargs)
			if err != nil {
				return nil, err
			}
			sep, err := argString(name, a[0])
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, errf("empty separator")
			}
			i := strings.Index(s, sep)
			if name == "rpartition" {
				i = strings.LastIndex(s, sep)
			}
			if i < 0 {
				if name == "rpartition" {
					return tuple{"", "", s}, nil
				}
				return tuple{s, "", ""}, nil
			}
			return tuple{s[:i], sep, s[i+len(sep):]}, nil
		})
	}
	for _, u := range strUnsupported {
		if u == name {
			return unsupportedMethod("str", name), true
		}
	}
	return nil, false
}

func noArgs(name string, fn func() Value) func(args []Value, kwargs []kwArg) (Value, error) {
	return func(args []Value, kwargs []kwArg) (Value, error) {
		if len(args) > 0 || len(kwargs) > 0 {
			return nil, errf("str.%s() takes no arguments", name)
		}
		return fn(), nil
	}
}

func stringsToValues(parts []string) []Value {
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// splitSep is str.split(sep, maxsplit) / str.rsplit(sep, maxsplit).
func splitSep(s, sep string, maxsplit int, fromRight bool) []string {
	if maxsplit < 0 {
		return strings.Split(s, sep)
	}
	if !fromRight {
		return strings.SplitN(s, sep, maxsplit+1)
	}
	var rev []string
	for len(rev) < maxsplit {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		rev = append(rev, s[i+len(sep):])
		s = s[:i]
	}
	out := []string{s}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// pyReplace is str.replace(old, new, count).
func pyReplace(s, old, nw string, count int64) (Value, error) {
	n := -1
	if count >= 0 {
		if count > int64(len(s))+1 {
			count = int64(len(s)) + 1
		}
		n = int(count)
	}
	if old == "" || len(nw) > len(old) {
		occ := int64(strings.Count(s, old))
		if n >= 0 && int64(n) < occ {
			occ = int64(n)
		}
		if int64(len(s))+occ*int64(len(nw)-len(old)) > maxStringLen {
			return nil, errLimit("string too large")
		}
	}
	return strings.Replace(s, old, nw, n), nil
}

// runeOffset converts a code point index (Python) to a byte offset.
func runeOffset(s string, idx int) int {
	if idx <= 0 {
		return 0
	}
	n := 0
	for i := range s {
		if n == idx {
			return i
		}
		n++
	}
	return len(s)
}

// substrArgs applies optional start/end code point bounds to s.
func substrArgs(fname, s string, start, end Value) (string, error) {
	n := int64(utf8.RuneCountInString(s))
	bound := func(v Value, def int64) (int64, error) {
		if v == noArg || v == nil {
			return def, nil
		}
		i, err := argInt(fname, v)
		if err != nil {
			return 0, err
		}
		if i < 0 {
			i += n
			if i < 0 {
				i = 0
			}
		}
		if i > n {
			i = n
		}
		return i, nil
	}
	b, err := bound(start, 0)
	if err != nil {
		return "", err
	}
	e, err := bound(end, n)
	if err != nil {
		return "", err
	}
	if e < b {
		return "", nil
	}
	return s[runeOffset(s, int(b)):runeOffset(s, int(e))], nil
}

func strFind(name, s, sub string, start, end Value) (Value, error) {
	region, err := substrArgs(name, s, start, end)
	if err != nil {
		return nil, err
	}
	if start != noArg && start != nil && int64(utf8.RuneCountInString(s)) < mustInt(start) && sub == "" {
		if name == "count" {
			return int64(0), nil
		}
		return int64(-1), nil
	}
	offset := int64(0)
	if start != noArg && start != nil {
		n := int64(utf8.RuneCountInString(s))
		offset = mustInt(start)
		if offset < 0 {
			offset += n
			if offset < 0 {
				offset = 0
			}
		}
	}
	var bi int
	switch name {
	case "count":
		return int64(strings.Count(region, sub)), nil
	case "find", "index":
		bi = strings.Index(region, sub)
	default:
		bi = strings.LastIndex(region, sub)
	}
	if bi < 0 {
		if name == "index" || name == "rindex" {
			return nil, errf("substring not found")
		}
		return int64(-1), nil
	}
	return offset + int64(utf8.RuneCountInString(region[:bi])), nil
}

func mustInt(v Value) int64 {
	i, _ := asInt(v)
	return i
}

func strIs(name, s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		var ok bool
		switch name {
		case "isdigit":
			ok = unicode.IsDigit(r)
		case "isalpha":
			ok = unicode.IsLetter(r)
		case "isalnum":
			ok = unicode.IsLetter(r) || unicode.IsNumber(r)
		case "isspace":
			ok = pyIsSpace(r)
		}
		if !ok {
			return false
		}
	}
	return true
}

// pyTitle is str.title: a cased character after an uncased one is
// upper-cased, other cased characters lower-cased.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		cased := unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
		switch {
		case cased && !prevCased:
			b.WriteRune(unicode.ToTitle(r))
		case cased:
			b.WriteString(pyLower(string(r)))
		default:
			b.WriteRune(r)
		}
		prevCased = cased
	}
	return b.String()
}

func listMethod(s []Value, name, typ string) (Value, bool) {
	switch name {
	case "index", "count":
		return method(name, func(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
			if len(kwargs) > 0 || len(args) != 1 {
				return nil, errf("%s.%s() takes exactly one argument", typ, name)
			}
			n := int64(0)
			for i, e := range s {
				if pyEq(e, args[0]) {
					if name == "index" {
						return int64(i), nil
					}
					n++
				}
			}
			if name == "index" {
				return nil, errf("%s.index(x): x not in %s", typ, typ)
			}
			return n, nil
		}), true
	case "copy":
		if typ == "list" {
			return method(name, func(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
				return append([]Value{}, s...), nil
			}), true
		}
	case "append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort":
		if typ == "list" {
			return securityUndefined(typ, name), true
		}
	}
	return nil, false
}

func dictMethod(d *dict, name string) (Value, bool) {
	switch name {
	case "get":
		return method(name, func(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
			if len(kwargs) > 0 || len(args) < 1 || len(args) > 2 {
				return nil, errf("get expected 1 or 2 arguments, got %d", len(args))
			}
			if _, ok := keyOf(args[0]); !ok {
				return nil, errf("unhashable type: '%s'", typeName(args[0]))
			}
			if v, ok := d.get(args[0]); ok {
				return v, nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, nil
		}), true
	case "items", "keys", "values":
		return method(name, func(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
			if len(args) > 0 || len(kwargs) > 0 {
				return nil, errf("dict.%s() takes no arguments", name)
			}
			v := &dictView{kind: name}
			for i, k := range d.keys {
				switch name {
				case "items":
					v.items = append(v.items, tuple{k, d.vals[i]})
				case "keys":
					v.items = append(v.items, k)
				default:
					v.items = append(v.items, d.vals[i])
				}
			}
			return v, nil
		}), true
	case "copy":
		return method(name, func(_ *renderer, args []Value, kwargs []kwArg) (Value, error) {
			return d.copy(), nil
		}), true
	case "fromkeys":
		return unsupportedMethod("dict", name), true
	case "clear", "pop", "popitem", "setdefault", "update":
		return securityUndefined("dict", name), true
	}
	return nil, false
}

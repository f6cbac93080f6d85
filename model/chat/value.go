package chat

// Value is a template value. The evaluator models Python's objects with
// these Go types:
//
//	nil          None
//	bool         bool
//	int64        int (no big integers: overflow is an error)
//	float64      float
//	string       str
//	[]Value      list
//	tuple        tuple
//	*dict        dict (insertion ordered)
//	undefined    jinja2.Undefined
//	*namespace   jinja2 namespace()
//	*loopInfo    the loop variable of a for block
//	*function    built-in functions and bound methods
//	rangeVal     range
//	*dictView    dict.items() / keys() / values()
//	*iterator    generators and reversed() iterators
type Value = any

// tuple is a Python tuple.
type tuple []Value

// dictView is what dict.items(), .keys() and .values() return.
type dictView struct {
	kind  string // "items", "keys" or "values"
	items []Value
}

// iterator is a one-shot Python iterator: the generators Jinja's map,
// select, reject, selectattr, rejectattr, items and unique filters return,
// or what reversed() returns. It has no len(), is always true, and
// iterating it consumes it.
type iterator struct {
	kind  string // Python type name, e.g. "generator"
	items []Value
	pos   int
}

// rest consumes and returns the items not yet consumed.
func (it *iterator) rest() []Value {
	r := it.items[it.pos:]
	it.pos = len(it.items)
	return r
}

func newGenerator(items []Value) *iterator { return &iterator{kind: "generator", items: items} }

// rangeVal is a Python range object.
type rangeVal struct{ start, stop, step int64 }

func (r rangeVal) len() int64 {
	if r.step > 0 && r.start < r.stop {
		return (r.stop - r.start + r.step - 1) / r.step
	}
	if r.step < 0 && r.start > r.stop {
		return (r.start - r.stop - r.step - 1) / -r.step
	}
	return 0
}

func (r rangeVal) list() []Value {
	n := r.len()
	out := make([]Value, 0, n)
	for i := int64(0); i < n; i++ {
		out = append(out, r.start+i*r.step)
	}
	return out
}

// undefined is jinja2's default Undefined: it prints as "", is false,
// iterates as empty, and raises (with msg) on attribute access, calls and
// arithmetic.
type undefined struct {
	msg      string // the UndefinedError text raised on misuse
	security bool   // an attribute the sandbox refuses (SecurityError)
}

func undefinedName(name string) undefined {
	return undefined{msg: "'" + name + "' is undefined"}
}

func undefinedAttr(obj Value, name string) undefined {
	return undefined{msg: objectTypeRepr(obj) + " has no attribute " + pyRepr(name)}
}

func undefinedElem(obj Value, key Value) undefined {
	if s, ok := key.(string); ok {
		return undefinedAttr(obj, s)
	}
	return undefined{msg: objectTypeRepr(obj) + " has no element " + pyRepr(key)}
}

// objectTypeRepr mirrors jinja2.utils.object_type_repr.
func objectTypeRepr(v Value) string {
	switch v.(type) {
	case nil:
		return "None"
	case undefined:
		return "jinja2.runtime.Undefined object"
	}
	return typeName(v) + " object"
}

// namespace is the object returned by namespace(); its attributes can be
// assigned with {% set ns.attr = ... %}.
type namespace struct{ attrs *dict }

// function is a built-in function or a bound method.
type function struct {
	name string
	// unsupported, when set, names a real Python/Jinja callable outside the
	// supported subset: calling it is refused.
	unsupported string
	call        func(r *renderer, args []Value, kwargs []kwArg) (Value, error)
}

type kwArg struct {
	name string
	val  Value
}

// dict is an insertion-ordered Python dict.
type dict struct {
	keys  []Value
	vals  []Value
	index map[hashKey]int
}

// hashKey identifies a dict key the way Python's hash/eq do for the key
// types templates use (1, 1.0 and True are the same key).
type hashKey struct {
	kind byte
	s    string
	n    int64
	f    float64
}

func newDict() *dict { return &dict{index: map[hashKey]int{}} }

func keyOf(k Value) (hashKey, bool) {
	switch k := k.(type) {
	case nil:
		return hashKey{kind: 'N'}, true
	case bool:
		if k {
			return hashKey{kind: 'i', n: 1}, true
		}
		return hashKey{kind: 'i', n: 0}, true
	case int64:
		return hashKey{kind: 'i', n: k}, true
	case float64:
		if k == float64(int64(k)) {
			return hashKey{kind: 'i', n: int64(k)}, true
		}
		return hashKey{kind: 'f', f: k}, true
	case string:
		return hashKey{kind: 's', s: k}, true
	case tuple:
		s := ""
		for _, e := range k {
			h, ok := keyOf(e)
			if !ok {
				return hashKey{}, false
			}
			s += string(h.kind) + pyRepr(e) + "\x00"
		}
		return hashKey{kind: 't', s: s}, true
	case undefined:
		return hashKey{kind: 'U'}, true
	}
	return hashKey{}, false
}

func (d *dict) get(k Value) (Value, bool) {
	h, ok := keyOf(k)
	if !ok {
		return nil, false
	}
	i, ok := d.index[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// set stores k; it reports false when k is not hashable.
func (d *dict) set(k, v Value) bool {
	h, ok := keyOf(k)
	if !ok {
		return false
	}
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return true
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return true
}

func (d *dict) len() int { return len(d.keys) }

func (d *dict) copy() *dict {
	c := newDict()
	for i, k := range d.keys {
		c.set(k, d.vals[i])
	}
	return c
}

// typeName is Python's type(v).__name__.
func typeName(v Value) string {
	switch v := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []Value:
		return "list"
	case tuple:
		return "tuple"
	case *dict:
		return "dict"
	case undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *loopInfo:
		return "LoopContext"
	case *function:
		return "builtin_function_or_method"
	case rangeVal:
		return "range"
	case *dictView:
		return "dict_" + v.kind
	case *iterator:
		return v.kind
	}
	return "object"
}

package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonOptions are the arguments of transformers' tojson filter, which
// calls json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False) instead of Jinja's HTML-safe tojson.
type jsonOptions struct {
	ensureASCII bool
	indent      *string // nil: single line
	itemSep     string
	keySep      string
	sortKeys    bool
}

// pyJSONDumps is Python's json.dumps for template values.
func pyJSONDumps(v Value, o jsonOptions) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v Value, o jsonOptions, level int) error {
	if level > maxNesting {
		return errf("Circular reference detected")
	}
	if int64(b.Len()) > maxStringLen {
		return errLimit("tojson result too large")
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(jsonFloat(v))
	case string:
		writeJSONString(b, v, o.ensureASCII)
	case []Value:
		return writeJSONArray(b, v, o, level)
	case tuple:
		return writeJSONArray(b, v, o, level)
	case *dict:
		return writeJSONObject(b, v, o, level)
	default:
		return errf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pyFloatRepr(f)
}

func (o jsonOptions) newline(b *strings.Builder, level int) {
	b.WriteByte('\n')
	for i := 0; i < level; i++ {
		b.WriteString(*o.indent)
	}
}

func writeJSONArray(b *strings.Builder, items []Value, o jsonOptions, level int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		if o.indent != nil {
			o.newline(b, level+1)
		}
		if err := writeJSON(b, it, o, level+1); err != nil {
			return err
		}
	}
	if o.indent != nil {
		o.newline(b, level)
	}
	b.WriteByte(']')
	return nil
}

// jsonKey converts a dict key as json.dumps does; ok is false for key
// types it refuses.
func jsonKey(k Value) (string, bool) {
	switch k := k.(type) {
	case string:
		return k, true
	case nil:
		return "null", true
	case bool:
		if k {
			return "true", true
		}
		return "false", true
	case int64:
		return strconv.FormatInt(k, 10), true
	case float64:
		return jsonFloat(k), true
	}
	return "", false
}

func writeJSONObject(b *strings.Builder, d *dict, o jsonOptions, level int) error {
	if d.len() == 0 {
		b.WriteString("{}")
		return nil
	}
	order := make([]int, d.len())
	for i := range order {
		order[i] = i
	}
	if o.sortKeys {
		var sortErr error
		slices.SortStableFunc(order, func(x, y int) int {
			lt, err := pyLess(d.keys[x], d.keys[y])
			if err != nil {
				sortErr = err
				return 0
			}
			if lt {
				return -1
			}
			if gt, _ := pyLess(d.keys[y], d.keys[x]); gt {
				return 1
			}
			return 0
		})
		if sortErr != nil {
			return sortErr
		}
	}
	b.WriteByte('{')
	for n, i := range order {
		key, ok := jsonKey(d.keys[i])
		if !ok {
			return errf("keys must be str, int, float, bool or None, not %s", typeName(d.keys[i]))
		}
		if n > 0 {
			b.WriteString(o.itemSep)
		}
		if o.indent != nil {
			o.newline(b, level+1)
		}
		writeJSONString(b, key, o.ensureASCII)
		b.WriteString(o.keySep)
		if err := writeJSON(b, d.vals[i], o, level+1); err != nil {
			return err
		}
	}
	if o.indent != nil {
		o.newline(b, level)
	}
	b.WriteByte('}')
	return nil
}

// writeJSONString quotes s as Python's json module does.
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7e:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// tojsonFilter binds the filter's arguments the way the Python signature
// tojson(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False) does.
func tojsonFilter(v Value, args []Value, kwargs []kwArg) (Value, error) {
	a, err := bindArgs("tojson", []string{"ensure_ascii", "indent", "separators", "sort_keys"}, 0, args, kwargs)
	if err != nil {
		return nil, err
	}
	o := jsonOptions{
		ensureASCII: truthy(orDefault(a[0], false)),
		sortKeys:    truthy(orDefault(a[3], false)),
		itemSep:     ", ",
		keySep:      ": ",
	}
	switch ind := orDefault(a[1], nil).(type) {
	case nil:
	case string:
		o.indent = &ind
	default:
		n, ok := asInt(ind)
		if !ok {
			return nil, errf("can't multiply sequence by non-int of type '%s'", typeName(ind))
		}
		if n < 0 {
			n = 0
		}
		if n > 1024 {
			return nil, errLimit("tojson indent too large")
		}
		s := strings.Repeat(" ", int(n))
		o.indent = &s
	}
	if o.indent != nil {
		o.itemSep = ","
	}
	if seps := orDefault(a[2], nil); seps != nil {
		parts, err := iterate(seps)
		if err != nil || len(parts) != 2 {
			return nil, errf("separators must be a pair of strings")
		}
		is, ok1 := parts[0].(string)
		ks, ok2 := parts[1].(string)
		if !ok1 || !ok2 {
			return nil, errf("separators must be a pair of strings")
		}
		o.itemSep, o.keySep = is, ks
	}
	return pyJSONDumps(v, o)
}

// decodeJSON decodes JSON into template values, keeping object key order
// (as Python's json.loads does); numbers with a fraction or exponent are
// floats, others ints.
func decodeJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxNesting {
		return nil, errors.New("JSON nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			out := []Value{}
			for dec.More() {
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		case '{':
			d := newDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.set(k, v)
			}
			_, err := dec.Token()
			return d, err
		}
		return nil, fmt.Errorf("unexpected JSON delimiter %v", t)
	case json.Number:
		s := string(t)
		if strings.ContainsAny(s, ".eE") {
			return strconv.ParseFloat(s, 64)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("JSON integer %s beyond 64 bits: %w", s, ErrUnsupported)
		}
		return n, nil
	case string:
		if !utf8.ValidString(t) {
			return nil, errors.New("invalid UTF-8 in JSON string")
		}
		return t, nil
	case bool:
		return t, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

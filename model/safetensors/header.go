package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"unicode/utf8"

	"github.com/chorus-rt/chorus/tensor"
)

// MaxHeaderSize bounds the JSON header (the reference implementation's
// limit), so a corrupt length cannot make a reader allocate gigabytes.
const MaxHeaderSize = 100_000_000

// MetadataKey is the reserved header key of the free-form string map.
const MetadataKey = "__metadata__"

// dtypes maps safetensors dtype names to chorus dtypes.
var dtypes = map[string]tensor.DType{
	"F64": tensor.Float64, "F32": tensor.Float32, "F16": tensor.Float16, "BF16": tensor.BFloat16,
	"I64": tensor.Int64, "I32": tensor.Int32, "I16": tensor.Int16, "I8": tensor.Int8,
	"U8": tensor.Uint8, "BOOL": tensor.Bool,
}

// unsupported are safetensors dtypes chorus has no tensor type for; they
// are refused by name rather than as unknown.
var unsupported = map[string]bool{
	"U16": true, "U32": true, "U64": true, "C64": true,
	"F8_E4M3": true, "F8_E5M2": true, "F8_E8M0": true, "F6_E2M3": true, "F6_E3M2": true, "F4": true,
}

// ParseDType maps a safetensors dtype name (F32, BF16, ...) to a chorus
// dtype; the error wraps ErrDType.
func ParseDType(s string) (tensor.DType, error) {
	if d, ok := dtypes[s]; ok {
		return d, nil
	}
	if unsupported[s] {
		return tensor.Invalid, fmt.Errorf("%w: safetensors dtype %s has no chorus tensor type", ErrDType, s)
	}
	return tensor.Invalid, fmt.Errorf("%w: unknown safetensors dtype %q", ErrDType, s)
}

// DTypeName is the safetensors name of a chorus dtype.
func DTypeName(d tensor.DType) (string, error) {
	for k, v := range dtypes {
		if v == d {
			return k, nil
		}
	}
	return "", fmt.Errorf("%w: %v has no safetensors name", ErrDType, d)
}

// Info describes one tensor of a file. Begin and End are byte offsets into
// the data section (after the header).
type Info struct {
	Name       string
	DType      tensor.DType
	Shape      tensor.Shape
	Begin, End int64
}

// Size is the tensor's size in bytes.
func (i Info) Size() int64 { return i.End - i.Begin }

// Header is a parsed and validated header.
type Header struct {
	// Tensors in data order (by offset).
	Tensors  []Info
	Metadata map[string]string
	// DataStart is the file offset of the data section (8 + header length).
	DataStart int64
	byName    map[string]int
}

// Lookup returns the tensor's Info; ok is false when there is none.
func (h *Header) Lookup(name string) (Info, bool) {
	i, ok := h.byName[name]
	if !ok {
		return Info{}, false
	}
	return h.Tensors[i], true
}

// rawInfo is one header entry as written. The arrays stay raw until
// their length is known to be small: decoding a 100 MB shape array of
// zeros would take 400 MB.
type rawInfo struct {
	DType       *string         `json:"dtype"`
	Shape       json.RawMessage `json:"shape"`
	DataOffsets json.RawMessage `json:"data_offsets"`
}

// smallInts decodes a JSON array of at most max integers.
func smallInts(raw json.RawMessage, max int) ([]int64, error) {
	if bytes.Count(raw, []byte{','}) >= max {
		return nil, fmt.Errorf("more than %d numbers", max)
	}
	var v []int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("not an array")
	}
	return v, nil
}

// ParseHeader parses and validates the JSON header json of a file whose
// data section holds dataLen bytes. file names the file in errors.
func ParseHeader(file string, js []byte, dataLen int64) (*Header, error) {
	if len(js) > MaxHeaderSize {
		return nil, corrupt(file, "", "header length", fmt.Sprintf("%d bytes, more than the %d allowed", len(js), MaxHeaderSize))
	}
	if !utf8.Valid(js) {
		return nil, corrupt(file, "", "header", "not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, corrupt(file, "", "header", "not a JSON object")
	}
	h := &Header{byName: map[string]int{}}
	seenMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, corrupt(file, "", "header", "bad JSON: "+err.Error())
		}
		name, ok := tok.(string)
		if !ok {
			return nil, corrupt(file, "", "header", "bad JSON key")
		}
		if name == MetadataKey {
			if seenMeta {
				return nil, corrupt(file, "", MetadataKey, "appears twice")
			}
			seenMeta = true
			m, err := decodeStringMap(dec)
			if err != nil {
				return nil, corrupt(file, "", MetadataKey, err.Error())
			}
			h.Metadata = m
			continue
		}
		if name == "" {
			return nil, corrupt(file, "", "header", "empty tensor name")
		}
		if _, dup := h.byName[name]; dup {
			return nil, corrupt(file, name, "", "name appears twice in the header")
		}
		var raw rawInfo
		if err := dec.Decode(&raw); err != nil {
			return nil, corrupt(file, name, "", "bad entry: "+err.Error())
		}
		info, err := checkInfo(file, name, raw, dataLen)
		if err != nil {
			return nil, err
		}
		h.byName[name] = len(h.Tensors)
		h.Tensors = append(h.Tensors, info)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, corrupt(file, "", "header", "bad JSON: unterminated object")
	}
	// Only whitespace may follow (writers pad the header with spaces).
	if _, err := dec.Token(); err != io.EOF {
		return nil, corrupt(file, "", "header", "data after the JSON object")
	}
	if err := checkLayout(file, h, dataLen); err != nil {
		return nil, err
	}
	return h, nil
}

// decodeStringMap reads one JSON object of strings, refusing duplicates.
func decodeStringMap(dec *json.Decoder) (map[string]string, error) {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object of strings")
	}
	m := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("bad JSON: %v", err)
		}
		k, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("bad JSON key")
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("key %q appears twice", k)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("bad JSON: %v", err)
		}
		v, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("value of %q is not a string", k)
		}
		m[k] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, fmt.Errorf("bad JSON: unterminated object")
	}
	return m, nil
}

func checkInfo(file, name string, raw rawInfo, dataLen int64) (Info, error) {
	if raw.DType == nil {
		return Info{}, corrupt(file, name, "dtype", "missing")
	}
	if raw.Shape == nil {
		return Info{}, corrupt(file, name, "shape", "missing")
	}
	if raw.DataOffsets == nil {
		return Info{}, corrupt(file, name, "data_offsets", "missing")
	}
	dims, err := smallInts(raw.Shape, tensor.MaxDims)
	if err != nil {
		return Info{}, corrupt(file, name, "shape", fmt.Sprintf("want an array of at most %d dims: %v", tensor.MaxDims, err))
	}
	off, err := smallInts(raw.DataOffsets, 2)
	if err != nil || len(off) != 2 {
		return Info{}, corrupt(file, name, "data_offsets", fmt.Sprintf("want [begin, end]: %d numbers, %v", len(off), err))
	}
	dt, err := ParseDType(*raw.DType)
	if err != nil {
		return Info{}, &Error{File: file, Tensor: name, Field: "dtype", Msg: err.Error(), Kinds: []error{ErrDType}}
	}
	shape := tensor.Shape(dims)
	n, err := shape.NumElements()
	if err != nil {
		return Info{}, corrupt(file, name, "shape", fmt.Sprintf("%v: %v", []int64(shape), err))
	}
	b, e := off[0], off[1]
	if b < 0 || e < b {
		return Info{}, corrupt(file, name, "data_offsets", fmt.Sprintf("[%d, %d) is not a byte range", b, e))
	}
	if e > dataLen {
		return Info{}, truncated(file, name, "data_offsets", fmt.Sprintf("[%d, %d) ends past the %d-byte data section", b, e, dataLen))
	}
	size := int64(dt.Size())
	if n > math.MaxInt64/size || n*size != e-b {
		return Info{}, &Error{File: file, Tensor: name, Field: "data_offsets",
			Msg:   fmt.Sprintf("[%d, %d) holds %d bytes, but shape %v of %s needs %d elements x %d bytes", b, e, e-b, []int64(shape), *raw.DType, n, size),
			Kinds: []error{ErrCorrupt, ErrShape}}
	}
	return Info{Name: name, DType: dt, Shape: shape.Clone(), Begin: b, End: e}, nil
}

// checkLayout sorts the tensors by offset and checks that they tile the
// data section exactly, as the format requires.
func checkLayout(file string, h *Header, dataLen int64) error {
	sort.SliceStable(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	pos := int64(0)
	prev := ""
	for i, t := range h.Tensors {
		switch {
		case t.Begin > pos && prev == "":
			return corrupt(file, t.Name, "data_offsets", fmt.Sprintf("the data section starts with %d bytes no tensor owns", t.Begin))
		case t.Begin > pos:
			return corrupt(file, t.Name, "data_offsets", fmt.Sprintf("[%d, %d) leaves a gap of %d bytes after tensor %q", t.Begin, t.End, t.Begin-pos, prev))
		case t.Begin < pos:
			return corrupt(file, t.Name, "data_offsets", fmt.Sprintf("[%d, %d) overlaps tensor %q, which ends at %d", t.Begin, t.End, prev, pos))
		}
		h.byName[t.Name] = i
		pos, prev = t.End, t.Name
	}
	if pos != dataLen {
		return corrupt(file, "", "data section", fmt.Sprintf("%d bytes, but the tensors end at %d (bytes no tensor owns)", dataLen, pos))
	}
	return nil
}

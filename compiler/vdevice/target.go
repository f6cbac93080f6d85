package vdevice

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Target says how code for a device is compiled: a kind ("llvm", "c",
// "cuda", "nvptx") and string attributes (for example arch=sm_90). Targets
// are immutable and compared structurally by Equal, so two targets built
// separately from the same kind and attributes are the same target.
type Target struct {
	kind  string
	attrs map[string]string
}

// targetKinds maps each known target kind to the device type it compiles for.
var targetKinds = map[string]DeviceType{
	"llvm":  CPU,
	"c":     CPU,
	"cuda":  CUDA,
	"nvptx": CUDA,
}

// NewTarget returns a target of a known kind. Attribute keys must be
// identifiers (letters, digits, '_', not starting with a digit) so that the
// text form stays parseable; values may be any string. attrs is copied.
func NewTarget(kind string, attrs map[string]string) (*Target, error) {
	if _, ok := targetKinds[kind]; !ok {
		return nil, fmt.Errorf("%w: %q (known: c, cuda, llvm, nvptx)", ErrUnknownTarget, kind)
	}
	for k := range attrs {
		if !IsIdent(k) {
			return nil, fmt.Errorf("%w: target attribute key %q is not an identifier", ErrBadAttr, k)
		}
	}
	t := &Target{kind: kind}
	if len(attrs) > 0 {
		t.attrs = maps.Clone(attrs)
	}
	return t, nil
}

// IsIdent reports whether s is a non-empty identifier: ASCII letters,
// digits and '_', not starting with a digit.
func IsIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Kind is the target kind, for example "cuda".
func (t *Target) Kind() string {
	if t == nil {
		return ""
	}
	return t.kind
}

// Attr returns one attribute.
func (t *Target) Attr(key string) (string, bool) {
	if t == nil {
		return "", false
	}
	v, ok := t.attrs[key]
	return v, ok
}

// Attrs returns a copy of the attributes (nil when there are none).
func (t *Target) Attrs() map[string]string {
	if t == nil || len(t.attrs) == 0 {
		return nil
	}
	return maps.Clone(t.attrs)
}

// DeviceType is the device type the target compiles for (NoDeviceType for
// a nil target).
func (t *Target) DeviceType() DeviceType {
	if t == nil {
		return NoDeviceType
	}
	return targetKinds[t.kind]
}

// Equal compares kind and attributes; two nil targets are equal.
func (t *Target) Equal(o *Target) bool {
	if t == nil || o == nil {
		return t == nil && o == nil
	}
	return t.kind == o.kind && maps.Equal(t.attrs, o.attrs)
}

// String is the text form: the kind, then the attributes sorted by key,
// for example cuda(arch="sm_90").
func (t *Target) String() string {
	if t == nil {
		return "?"
	}
	if len(t.attrs) == 0 {
		return t.kind
	}
	var b strings.Builder
	b.WriteString(t.kind)
	b.WriteByte('(')
	for i, k := range slices.Sorted(maps.Keys(t.attrs)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(t.attrs[k]))
	}
	b.WriteByte(')')
	return b.String()
}

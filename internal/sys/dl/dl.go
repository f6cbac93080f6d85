package dl

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNotFound: no soname could be opened.
var ErrNotFound = errors.New("shared library not found")

// Lib is an opened library and its resolved symbols.
type Lib struct {
	Name string // the soname that opened
	syms map[string]uintptr
}

// Open tries sonames in order and resolves every symbol. The error wraps
// ErrNotFound when nothing opened, and lists every missing symbol
// otherwise.
func Open(what string, sonames, symbols []string) (*Lib, error) {
	var errs []string
	for _, so := range sonames {
		h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			msg := strings.TrimSpace(err.Error())
			if msg == "" {
				msg = so + ": cannot open shared object file"
			}
			errs = append(errs, msg)
			continue
		}
		l := &Lib{Name: so, syms: make(map[string]uintptr, len(symbols))}
		var missing []string
		for _, s := range symbols {
			p, err := purego.Dlsym(h, s)
			if err != nil || p == 0 {
				missing = append(missing, s)
				continue
			}
			l.syms[s] = p
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%s (%s) lacks %s", what, so, strings.Join(missing, ", "))
		}
		return l, nil
	}
	if len(errs) == 0 {
		errs = append(errs, "no library names to try")
	}
	return nil, fmt.Errorf("%w: %s: %s", ErrNotFound, what, errs[0])
}

// Sym returns a resolved symbol (0 for one not asked for in Open).
func (l *Lib) Sym(name string) uintptr { return l.syms[name] }

// CString copies a NUL-terminated string owned by the library (at most
// 64 KiB).
func CString(p uintptr) string {
	if p == 0 {
		return ""
	}
	// Reinterpret through memory: the pointer is C memory, not Go's.
	start := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	var b []byte
	for q := start; *(*byte)(q) != 0 && len(b) < 1<<16; q = unsafe.Add(q, 1) {
		b = append(b, *(*byte)(q))
	}
	return string(b)
}

package ir

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Print writes the module in the text format (see the package comment).
// The output is canonical: Parse then Print gives it back byte for byte.
func Print(w io.Writer, m *Module) error {
	if m == nil {
		return fmt.Errorf("ir: Print: %w: nil module", ErrBadArg)
	}
	bw := bufio.NewWriter(w)
	bw.WriteString("module @" + m.Name + "\n")
	for _, f := range m.Funcs {
		bw.WriteString("\n")
		if f == nil {
			bw.WriteString("<nil function>\n")
			continue
		}
		writeFunc(bw, f)
	}
	return bw.Flush()
}

// String returns the module's text form.
func (m *Module) String() string {
	var b strings.Builder
	_ = Print(&b, m) // a strings.Builder does not fail
	return b.String()
}

// String returns the function's text form.
func (f *Function) String() string {
	var b strings.Builder
	bw := bufio.NewWriter(&b)
	writeFunc(bw, f)
	bw.Flush()
	return b.String()
}

// String returns the binding's text form (one line, no newline).
func (b *Binding) String() string {
	var s strings.Builder
	writeBinding(&s, b)
	return s.String()
}

func writeFunc(w *bufio.Writer, f *Function) {
	w.WriteString("func @" + f.Name + "(")
	for i, p := range f.Params {
		if i > 0 {
			w.WriteString(", ")
		}
		w.WriteString("%" + p.Name + ": " + typeString(p.Type))
	}
	w.WriteString(") {\n")
	for _, blk := range f.Blocks {
		w.WriteString("  block {\n")
		if blk == nil {
			blk = &Block{}
		}
		for _, b := range blk.Bindings {
			w.WriteString("    ")
			writeBinding(w, b)
			w.WriteString("\n")
		}
		w.WriteString("  }\n")
	}
	w.WriteString("  return")
	for i, r := range f.Results {
		if i > 0 {
			w.WriteString(",")
		}
		w.WriteString(" " + r.String())
	}
	w.WriteString("\n}\n")
}

func writeBinding(w io.StringWriter, b *Binding) {
	if b == nil {
		w.WriteString("<nil>")
		return
	}
	if b.Result != "" {
		w.WriteString("%" + b.Result + " = ")
	}
	if r, ok := b.Ref(0); b.Op == OpAlias && ok && len(b.Args) == 1 {
		w.WriteString(r.String())
	} else {
		w.WriteString(b.Op.String() + "(")
		for i, a := range b.Args {
			if i > 0 {
				w.WriteString(", ")
			}
			if a == nil {
				w.WriteString("<nil>")
			} else {
				w.WriteString(a.String())
			}
		}
		w.WriteString(")")
	}
	if b.Type != nil {
		w.WriteString(" : " + b.Type.String())
	}
}

func typeString(t Type) string {
	if t == nil {
		return "<nil>"
	}
	return t.String()
}

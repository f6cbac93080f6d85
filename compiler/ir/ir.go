package ir

import (
	"fmt"
	"iter"
	"strconv"

	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

// Scope names used by the passes. ScopeGlobal is tensor.ScopeGlobal.
const (
	ScopeGlobal = tensor.ScopeGlobal
	ScopeIPC    = "ipc_memory"
)

// Pos is a position in IR text: 1-based line and byte column. The zero Pos
// means "not from text" (built with the builder or by a pass).
type Pos struct{ Line, Col int }

// IsValid reports whether p points into text.
func (p Pos) IsValid() bool { return p.Line > 0 }

func (p Pos) String() string { return strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Col) }

// Module is a list of functions with distinct names.
type Module struct {
	Name  string
	Funcs []*Function
}

// Func returns the function called name, or nil.
func (m *Module) Func(name string) *Function {
	for _, f := range m.Funcs {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// Function has typed parameters, a body of blocks of bindings run in order,
// and the values it returns. Value names are unique within a function
// (parameters included) and a value is visible from its definition to the
// end of the function, across blocks. Blocks only group bindings: the
// memory planner reuses storage inside a block, never across blocks.
type Function struct {
	Name    string
	Params  []Param
	Blocks  []*Block
	Results []Ref
	Pos     Pos
}

// Param is a function parameter.
type Param struct {
	Name string
	Type Type
	Pos  Pos
}

// Block is a sequence of bindings.
type Block struct {
	Bindings []*Binding
}

// Binding is one operation: `%Result = Op(Args) : Type`, or `Op(Args)`
// when the op defines no value (Result == "" and Type == nil). Ops that
// produce tensor data are destination-passing: they write into an out
// operand allocated earlier, so every byte the program touches is visible
// as an allocation (see the package comment).
type Binding struct {
	Result string
	Type   Type
	Op     Op
	Args   []Arg
	Pos    Pos
}

// Bindings iterates over a function's bindings in execution order, across
// blocks, with a running index (the numbering Verify and the memory planner
// use). This is the walk a VM performs. Nil blocks and bindings, which
// Verify rejects, are skipped.
func (f *Function) Bindings() iter.Seq2[int, *Binding] {
	return func(yield func(int, *Binding) bool) {
		i := 0
		for _, blk := range f.Blocks {
			if blk == nil {
				continue
			}
			for _, b := range blk.Bindings {
				if b == nil {
					continue // Verify reports it
				}
				if !yield(i, b) {
					return
				}
				i++
			}
		}
	}
}

// Walk calls fn for every binding in execution order with its block index
// and stops at the first error, which it returns.
func (f *Function) Walk(fn func(block int, b *Binding) error) error {
	for bi, blk := range f.Blocks {
		if blk == nil {
			continue
		}
		for _, b := range blk.Bindings {
			if b == nil {
				continue
			}
			if err := fn(bi, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Types maps every defined value (parameters and binding results) to its
// declared type. Later definitions of a duplicated name win; Verify
// reports duplicates.
func (f *Function) Types() map[string]Type {
	m := make(map[string]Type, len(f.Params))
	for _, p := range f.Params {
		m[p.Name] = p.Type
	}
	for _, b := range f.Bindings() {
		if b.Result != "" {
			m[b.Result] = b.Type
		}
	}
	return m
}

// Defs maps every binding result to the binding that defines it.
func (f *Function) Defs() map[string]*Binding {
	m := map[string]*Binding{}
	for _, b := range f.Bindings() {
		if b.Result != "" {
			m[b.Result] = b
		}
	}
	return m
}

// Clone returns a deep copy of the module (targets, which are immutable,
// are shared). Passes clone their input so that callers keep the original.
func (m *Module) Clone() *Module {
	if m == nil {
		return nil
	}
	c := &Module{Name: m.Name, Funcs: make([]*Function, len(m.Funcs))}
	for i, f := range m.Funcs {
		if f != nil {
			c.Funcs[i] = f.Clone()
		}
	}
	return c
}

// Clone returns a deep copy of the function.
func (f *Function) Clone() *Function {
	c := &Function{Name: f.Name, Pos: f.Pos}
	for _, p := range f.Params {
		c.Params = append(c.Params, Param{Name: p.Name, Type: CloneType(p.Type), Pos: p.Pos})
	}
	for _, blk := range f.Blocks {
		if blk == nil {
			c.Blocks = append(c.Blocks, nil)
			continue
		}
		nb := &Block{Bindings: make([]*Binding, len(blk.Bindings))}
		for i, b := range blk.Bindings {
			if b != nil {
				nb.Bindings[i] = b.Clone()
			}
		}
		c.Blocks = append(c.Blocks, nb)
	}
	c.Results = append([]Ref(nil), f.Results...)
	return c
}

// Clone returns a deep copy of the binding.
func (b *Binding) Clone() *Binding {
	c := *b
	c.Type = CloneType(b.Type)
	c.Args = make([]Arg, len(b.Args))
	for i, a := range b.Args {
		switch x := a.(type) {
		case ShapeLit:
			a = ShapeLit(tensor.Shape(x).Clone())
		case Floats:
			a = append(Floats(nil), x...)
		}
		c.Args[i] = a
	}
	return &c
}

// Ref returns argument i as a value reference.
func (b *Binding) Ref(i int) (Ref, bool) {
	if i < 0 || i >= len(b.Args) {
		return "", false
	}
	r, ok := b.Args[i].(Ref)
	return r, ok
}

// Refs returns the value references among the arguments, in order.
func (b *Binding) Refs() []Ref {
	var out []Ref
	for _, a := range b.Args {
		if r, ok := a.(Ref); ok {
			out = append(out, r)
		}
	}
	return out
}

// Arg is an operation argument: a value reference (Ref) or an immediate
// (Int, Str, Sym, Bool, ShapeLit, DTypeLit, VDLit).
type Arg interface {
	// String is the argument's text form.
	String() string
	isArg()
}

// Ref names a value: a parameter or a binding result, printed %name.
type Ref string

// Int is an integer immediate.
type Int int64

// Str is a string immediate, printed quoted.
type Str string

// Sym is a bare identifier immediate, for enumerations such as the
// reduction op (sum) or the all-reduce strategy (one_shot).
type Sym string

// Float is a floating-point immediate (an attribute such as a norm's
// epsilon), printed in the shortest form that reads back to the same
// value and always with a '.' or an exponent (1e-05, 10000.0), so that it
// does not read back as an Int. Verify rejects NaN and infinities.
type Float float64

// Bool is a boolean immediate, printed true or false.
type Bool bool

// ShapeLit is a shape immediate, printed [4, 8].
type ShapeLit tensor.Shape

// Floats is a list of floating-point immediates (rope's table of inverse
// frequencies), printed [1.0, 0.5]: every element in Float's form, so
// the list reads back as Floats, never as a shape.
type Floats []float64

// DTypeLit is a dtype immediate, printed by its canonical name.
type DTypeLit tensor.DType

// VDLit is a virtual device immediate, printed in braces.
type VDLit vdevice.VirtualDevice

func (Ref) isArg()      {}
func (Int) isArg()      {}
func (Str) isArg()      {}
func (Sym) isArg()      {}
func (Bool) isArg()     {}
func (Float) isArg()    {}
func (ShapeLit) isArg() {}
func (Floats) isArg()   {}
func (DTypeLit) isArg() {}
func (VDLit) isArg()    {}

func (r Ref) String() string  { return "%" + string(r) }
func (i Int) String() string  { return strconv.FormatInt(int64(i), 10) }
func (s Str) String() string  { return strconv.Quote(string(s)) }
func (s Sym) String() string  { return string(s) }
func (b Bool) String() string { return strconv.FormatBool(bool(b)) }

func (f Float) String() string {
	s := strconv.FormatFloat(float64(f), 'g', -1, 64)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'N' || c == 'I' {
			return s
		}
	}
	return s + ".0"
}
func (d DTypeLit) String() string { return tensor.DType(d).String() }
func (v VDLit) String() string    { return vdevice.VirtualDevice(v).String() }
func (s ShapeLit) String() string { return shapeString(tensor.Shape(s)) }

func (fs Floats) String() string {
	b := []byte{'['}
	for i, f := range fs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, Float(f).String()...)
	}
	return string(append(b, ']'))
}

func shapeString(s tensor.Shape) string {
	b := []byte{'['}
	for i, d := range s {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}

// argKindName names an argument's kind for error messages.
func argKindName(a Arg) string {
	switch a.(type) {
	case Ref:
		return "value"
	case Int:
		return "int"
	case Str:
		return "string"
	case Sym:
		return "symbol"
	case Bool:
		return "bool"
	case Float:
		return "float"
	case ShapeLit:
		return "shape"
	case Floats:
		return "float list"
	case DTypeLit:
		return "dtype"
	case VDLit:
		return "virtual device"
	case nil:
		return "nil"
	}
	return fmt.Sprintf("%T", a)
}

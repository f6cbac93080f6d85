package ir

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/compiler/vdevice"
)

// maxErrors bounds how many errors Verify collects; one bad value tends to
// cascade.
const maxErrors = 20

// Verify checks that a module is well formed: function and value names are
// unique, every reference names a value defined earlier, every op is known
// and has the right arguments, operand types and shapes fit the op, and
// every declared result type equals the type the op produces. It returns
// nil or the errors found (errors.Join of *Error values, each wrapping a
// sentinel such as ErrUndefined or ErrShape).
//
// Verify does not require the operands of one kernel to agree on their
// device: resolving that is device planning's job. VerifyDevices adds
// that check for planned modules.
func Verify(m *Module) error { return verifyModule(m, false) }

// VerifyDevices is Verify plus the checks that hold once devices are
// planned: operands of every kernel (matmul, add, gelu, the collectives)
// agree on their device (type, id, target; scopes may differ), device_copy
// operands agree with its src and dst, and every tensor and storage has a
// constrained device type, id and memory scope (ErrDevice).
func VerifyDevices(m *Module) error { return verifyModule(m, true) }

func verifyModule(m *Module, devices bool) error {
	if m == nil {
		return &Error{Binding: -1, Err: fmt.Errorf("%w: nil module", ErrBadArg)}
	}
	var errs []error
	seen := map[string]bool{}
	for _, f := range m.Funcs {
		if f == nil {
			errs = append(errs, &Error{Binding: -1, Err: fmt.Errorf("%w: nil function", ErrBadArg)})
			continue
		}
		if seen[f.Name] {
			errs = append(errs, &Error{Func: f.Name, Binding: -1, Pos: f.Pos, Err: fmt.Errorf("%w: function @%s", ErrRedefined, f.Name)})
		}
		seen[f.Name] = true
		errs = append(errs, verifyFunc(f, devices)...)
		if len(errs) >= maxErrors {
			break
		}
	}
	return errors.Join(errs...)
}

// VerifyFunction checks one function as Verify does.
func VerifyFunction(f *Function) error {
	if f == nil {
		return &Error{Binding: -1, Err: fmt.Errorf("%w: nil function", ErrBadArg)}
	}
	return errors.Join(verifyFunc(f, false)...)
}

// funcEnv tracks which values are defined so far, and which will be.
type funcEnv struct {
	defined map[Ref]Type
	later   map[Ref]bool // defined by some binding of the function
	sizes   map[Ref]int64

	checkDevices bool
}

func (e *funcEnv) devices() bool { return e.checkDevices }

// planned reports whether a type's device is planned: device type, id and
// memory scope constrained.
func planned(t Type) error {
	vd, ok := DeviceOf(t)
	if !ok || (vd.DeviceType() != vdevice.NoDeviceType && vd.VirtualDeviceID() >= 0 && vd.MemoryScope() != "") {
		return nil
	}
	return fmt.Errorf("%w: %v has no planned device (type, id and scope)", ErrDevice, t)
}

func (e *funcEnv) typeOf(r Ref) (Type, error) {
	if t, ok := e.defined[r]; ok {
		if t == nil {
			return nil, fmt.Errorf("%w: %v has no type", ErrTypeMismatch, r)
		}
		return t, nil
	}
	if e.later[r] {
		return nil, fmt.Errorf("%w: %v", ErrUseBeforeDef, r)
	}
	return nil, fmt.Errorf("%w: %v", ErrUndefined, r)
}

func (e *funcEnv) storageBytes(r Ref) (int64, bool) {
	n, ok := e.sizes[r]
	return n, ok
}

func verifyFunc(f *Function, devices bool) []error {
	var errs []error
	fail := func(i int, b *Binding, err error) {
		e := &Error{Func: f.Name, Binding: i, Err: err}
		if b != nil {
			e.Result, e.Op, e.Pos = b.Result, b.Op, b.Pos
		} else {
			e.Pos = f.Pos
		}
		errs = append(errs, e)
	}
	if !IsName(f.Name) {
		fail(-1, nil, fmt.Errorf("%w: bad function name %q", ErrBadArg, f.Name))
	}
	env := &funcEnv{defined: map[Ref]Type{}, later: map[Ref]bool{}, sizes: map[Ref]int64{}, checkDevices: devices}
	for _, p := range f.Params {
		r := Ref(p.Name)
		switch {
		case !IsName(p.Name):
			fail(-1, nil, fmt.Errorf("%w: bad parameter name %q", ErrBadArg, p.Name))
		case hasKey(env.defined, r):
			fail(-1, nil, fmt.Errorf("%w: parameter %v", ErrRedefined, r))
		case p.Type == nil:
			fail(-1, nil, fmt.Errorf("%w: parameter %v has no type", ErrTypeMismatch, r))
		}
		env.defined[r] = p.Type
		if devices && p.Type != nil {
			if err := planned(p.Type); err != nil {
				fail(-1, nil, fmt.Errorf("parameter %v: %w", r, err))
			}
		}
		if tt, ok := p.Type.(TensorType); ok {
			if err := checkTensorLayout(tt.Shape, tt.DType); err != nil {
				fail(-1, nil, fmt.Errorf("parameter %v: %w", r, err))
			}
		}
	}
	for bi, blk := range f.Blocks {
		if blk == nil {
			fail(-1, nil, fmt.Errorf("%w: block %d is nil", ErrBadArg, bi))
			continue
		}
		for j, b := range blk.Bindings {
			if b == nil {
				fail(-1, nil, fmt.Errorf("%w: block %d binding %d is nil", ErrBadArg, bi, j))
			}
		}
	}
	for _, b := range f.Bindings() {
		if b.Result != "" {
			env.later[Ref(b.Result)] = true
		}
	}
	for i, b := range f.Bindings() {
		if len(errs) >= maxErrors {
			return errs
		}
		if err := checkArgs(b); err != nil {
			fail(i, b, err)
		} else if got, err := infer(b, env); err != nil {
			fail(i, b, err)
		} else if b.Result != "" && !TypeEqual(got, b.Type) {
			fail(i, b, fmt.Errorf("%w: declared %v, the op gives %v", ErrTypeMismatch, b.Type, got))
		} else if devices && b.Type != nil {
			if err := planned(b.Type); err != nil {
				fail(i, b, err)
			}
		}
		if b.Result == "" {
			continue
		}
		r := Ref(b.Result)
		if !IsName(b.Result) {
			fail(i, b, fmt.Errorf("%w: bad value name %q", ErrBadArg, b.Result))
		}
		if _, dup := env.defined[r]; dup {
			fail(i, b, fmt.Errorf("%w: %v", ErrRedefined, r))
		}
		// Record the declared type even after an error, so that one bad
		// binding does not make every later use "undefined".
		env.defined[r] = b.Type
		if b.Op == OpAllocStorage && len(b.Args) > 0 {
			if n, ok := b.Args[0].(Int); ok {
				env.sizes[r] = int64(n)
			}
		}
	}
	for _, r := range f.Results {
		if _, err := env.typeOf(r); err != nil {
			fail(-1, nil, fmt.Errorf("return: %w", err))
		}
	}
	return errs
}

// IsName reports whether s can name a value or function: ASCII letters,
// digits, '_' and '.', not empty.
func IsName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return c == '_' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

package registry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/chorus-rt/chorus/tensor"
)

// Sentinel errors that callers test with errors.Is.
var (
	// ErrUnknownFunction: no function is registered under the name.
	ErrUnknownFunction = errors.New("unknown function")
	// ErrBadArgs: the argument count or a type does not match the function.
	ErrBadArgs = errors.New("bad arguments")
	// ErrDuplicate: a name is registered twice.
	ErrDuplicate = errors.New("function already registered")
)

// Env is what a function sees of the worker that runs it.
type Env interface {
	// WorkerID is the global worker id, 0..NumWorkers-1.
	WorkerID() int
	NumWorkers() int
	NumGroups() int
	// GroupID is WorkerID / GroupSize.
	GroupID() int
	GroupSize() int
	// WorkerRank is the rank inside the worker's group: WorkerID % GroupSize.
	WorkerRank() int
	// Device is the worker's default device.
	Device() tensor.Device
	// Alloc allocates an uninitialized-or-zeroed tensor on a device the
	// worker can reach, in the given memory scope.
	Alloc(dtype tensor.DType, shape tensor.Shape, dev tensor.Device, scope string) (*tensor.Tensor, error)
	// Context is cancelled when the worker shuts down.
	Context() context.Context
}

// Func is the raw calling convention: arguments are normalized values
// (see package value) with register references already resolved.
type Func func(env Env, args []any) (any, error)

// Info describes a registered function.
type Info struct {
	Name      string
	Signature string // Go signature for typed functions, "(raw)" otherwise
}

type entry struct {
	fn  Func
	sig string
}

// Registry is a concurrency-safe name -> function table.
type Registry struct {
	mu    sync.RWMutex
	funcs map[string]entry
}

// New returns an empty registry.
func New() *Registry { return &Registry{funcs: make(map[string]entry)} }

// Global is the process-wide registry that workers use by default.
var Global = New()

// Register adds a raw function.
func (r *Registry) Register(name string, fn Func) error {
	if fn == nil {
		return fmt.Errorf("registry: %q: nil function", name)
	}
	return r.add(name, entry{fn: fn, sig: "(raw)"})
}

// RegisterTyped adds an ordinary Go function; see Wrap for the accepted
// signatures.
func (r *Registry) RegisterTyped(name string, fn any) error {
	f, sig, err := Wrap(fn)
	if err != nil {
		return fmt.Errorf("registry: %q: %w", name, err)
	}
	return r.add(name, entry{fn: f, sig: sig})
}

func (r *Registry) add(name string, e entry) error {
	if name == "" {
		return errors.New("registry: empty function name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.funcs[name]; ok {
		return fmt.Errorf("registry: %q: %w", name, ErrDuplicate)
	}
	r.funcs[name] = e
	return nil
}

// Lookup finds a function; the error wraps ErrUnknownFunction.
func (r *Registry) Lookup(name string) (Func, error) {
	r.mu.RLock()
	e, ok := r.funcs[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownFunction, name)
	}
	return e.fn, nil
}

// List returns every registered function sorted by name.
func (r *Registry) List() []Info {
	r.mu.RLock()
	out := make([]Info, 0, len(r.funcs))
	for n, e := range r.funcs {
		out = append(out, Info{Name: n, Signature: e.sig})
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Register adds a raw function to Global.
func Register(name string, fn Func) error { return Global.Register(name, fn) }

// RegisterTyped adds a typed function to Global.
func RegisterTyped(name string, fn any) error { return Global.RegisterTyped(name, fn) }

// MustRegister is Register for init functions: a duplicate is a programming
// error and panics at start-up, never during a call.
func MustRegister(name string, fn Func) {
	if err := Register(name, fn); err != nil {
		panic(err)
	}
}

// MustRegisterTyped is RegisterTyped for init functions.
func MustRegisterTyped(name string, fn any) {
	if err := RegisterTyped(name, fn); err != nil {
		panic(err)
	}
}

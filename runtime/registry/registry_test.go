package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// fakeEnv is a minimal registry.Env for tests.
type fakeEnv struct {
	id, n, groupSize int
	dev              tensor.Device
}

var _ registry.Env = (*fakeEnv)(nil)

func (e *fakeEnv) WorkerID() int         { return e.id }
func (e *fakeEnv) NumWorkers() int       { return e.n }
func (e *fakeEnv) NumGroups() int        { return e.n / e.groupSize }
func (e *fakeEnv) GroupID() int          { return e.id / e.groupSize }
func (e *fakeEnv) GroupSize() int        { return e.groupSize }
func (e *fakeEnv) WorkerRank() int       { return e.id % e.groupSize }
func (e *fakeEnv) Device() tensor.Device { return e.dev }
func (e *fakeEnv) Context() context.Context {
	return context.Background()
}
func (e *fakeEnv) Alloc(dt tensor.DType, shape tensor.Shape, dev tensor.Device, scope string) (*tensor.Tensor, error) {
	return tensor.NewScoped(dt, shape, scope)
}

func newEnv() *fakeEnv { return &fakeEnv{id: 5, n: 8, groupSize: 4, dev: tensor.CUDADevice(1)} }

func rawConst(v any) registry.Func {
	return func(registry.Env, []any) (any, error) { return v, nil }
}

func TestRegisterAndLookup(t *testing.T) {
	r := registry.New()
	if err := r.Register("raw", func(env registry.Env, args []any) (any, error) {
		return fmt.Sprint(env.WorkerID(), len(args)), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterTyped("typed", func(a, b int64) int64 { return a + b }); err != nil {
		t.Fatal(err)
	}
	f, err := r.Lookup("raw")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f(newEnv(), []any{1, 2, 3}); err != nil || got != "5 3" {
		t.Fatalf("raw() = %v, %v; want \"5 3\"", got, err)
	}
	f, err = r.Lookup("typed")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f(nil, []any{int64(2), int64(40)}); err != nil || got != int64(42) {
		t.Fatalf("typed(2, 40) = %#v, %v; want int64(42)", got, err)
	}
}

func TestLookupUnknown(t *testing.T) {
	r := registry.New()
	if err := r.Register("present", rawConst(1)); err != nil {
		t.Fatal(err)
	}
	f, err := r.Lookup("no.such.fn")
	if f != nil {
		t.Errorf("Lookup of an unknown name returned a function")
	}
	if !errors.Is(err, registry.ErrUnknownFunction) {
		t.Fatalf("err = %v, want ErrUnknownFunction", err)
	}
	if !strings.Contains(err.Error(), `"no.such.fn"`) {
		t.Fatalf("error %q does not name the function", err)
	}
	if errors.Is(err, registry.ErrBadArgs) || errors.Is(err, registry.ErrDuplicate) {
		t.Fatalf("error %q matches an unrelated sentinel", err)
	}
	// An empty registry and an empty name fail the same way.
	if _, err := registry.New().Lookup(""); !errors.Is(err, registry.ErrUnknownFunction) {
		t.Fatalf("Lookup(\"\") err = %v", err)
	}
}

func TestRegisterErrors(t *testing.T) {
	r := registry.New()
	if err := r.Register("dup", rawConst(1)); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterTyped("dup.typed", func() {}); err != nil {
		t.Fatal(err)
	}
	var nilFunc registry.Func
	tests := []struct {
		name    string
		do      func() error
		dup     bool
		wantMsg string
	}{
		{"raw duplicate of raw", func() error { return r.Register("dup", rawConst(2)) }, true, `"dup"`},
		{"typed duplicate of raw", func() error { return r.RegisterTyped("dup", func() {}) }, true, `"dup"`},
		{"raw duplicate of typed", func() error { return r.Register("dup.typed", rawConst(2)) }, true, `"dup.typed"`},
		{"typed duplicate of typed", func() error { return r.RegisterTyped("dup.typed", func() int { return 1 }) }, true, `"dup.typed"`},
		{"raw empty name", func() error { return r.Register("", rawConst(1)) }, false, "empty function name"},
		{"typed empty name", func() error { return r.RegisterTyped("", func() {}) }, false, "empty function name"},
		{"raw nil func", func() error { return r.Register("nilraw", nil) }, false, "nil function"},
		{"raw typed-nil func", func() error { return r.Register("nilraw2", nilFunc) }, false, "nil function"},
		{"typed nil", func() error { return r.RegisterTyped("niltyped", nil) }, false, "want a function"},
		{"typed nil func value", func() error { return r.RegisterTyped("niltyped2", (func())(nil)) }, false, "want a function"},
		{"typed non-func", func() error { return r.RegisterTyped("notfunc", 42) }, false, "want a function, got int"},
		{"typed bad signature", func() error { return r.RegisterTyped("badsig", func(map[string]int) {}) }, false, `"badsig": parameter 0: unsupported parameter type map[string]int`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil {
				t.Fatal("want an error")
			}
			if got := errors.Is(err, registry.ErrDuplicate); got != tc.dup {
				t.Fatalf("errors.Is(%q, ErrDuplicate) = %v, want %v", err, got, tc.dup)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %q does not contain %q", err, tc.wantMsg)
			}
		})
	}
	// Failed registrations must not have replaced or added anything.
	f, err := r.Lookup("dup")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f(nil, nil); got != 1 {
		t.Fatalf("duplicate registration replaced the original: got %v", got)
	}
	for _, name := range []string{"", "nilraw", "nilraw2", "niltyped", "niltyped2", "notfunc", "badsig"} {
		if _, err := r.Lookup(name); !errors.Is(err, registry.ErrUnknownFunction) {
			t.Errorf("failed registration %q is present (err %v)", name, err)
		}
	}
	if n := len(r.List()); n != 2 {
		t.Fatalf("List has %d entries, want 2", n)
	}
}

func TestList(t *testing.T) {
	r := registry.New()
	if got := r.List(); got == nil || len(got) != 0 {
		t.Fatalf("List of an empty registry = %#v, want empty non-nil", got)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.RegisterTyped("m.typed", func(env registry.Env, x int, s string) (*tensor.Tensor, error) { return nil, nil }))
	must(r.Register("z.raw", rawConst(nil)))
	must(r.RegisterTyped("a.noargs", func() {}))
	must(r.Register("b.raw", rawConst(nil)))
	must(r.RegisterTyped("c.variadic", func(a float64, rest ...any) error { return nil }))
	got := r.List()
	want := []registry.Info{
		{Name: "a.noargs", Signature: "func()"},
		{Name: "b.raw", Signature: "(raw)"},
		{Name: "c.variadic", Signature: "func(float64, ...interface {}) error"},
		{Name: "m.typed", Signature: "func(registry.Env, int, string) (*tensor.Tensor, error)"},
		{Name: "z.raw", Signature: "(raw)"},
	}
	if len(got) != len(want) {
		t.Fatalf("List = %#v, want %#v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("List[%d] = %#v, want %#v", i, got[i], want[i])
		}
	}
	// List returns a fresh slice each time.
	got[0].Name = "mutated"
	if r.List()[0].Name != "a.noargs" {
		t.Fatal("List result aliases registry state")
	}
}

func TestGlobalHelpers(t *testing.T) {
	// registry.Global is shared with other packages' tests and init
	// functions: use unique names and never assume it is empty.
	const (
		raw      = "registry_test.global.raw"
		typed    = "registry_test.global.typed"
		mustRaw  = "registry_test.global.must_raw"
		mustTyp  = "registry_test.global.must_typed"
		unknownG = "registry_test.global.never_registered"
	)
	before := len(registry.Global.List())
	if err := registry.Register(raw, rawConst("r")); err != nil {
		t.Fatal(err)
	}
	if err := registry.RegisterTyped(typed, func(env registry.Env) int64 { return int64(env.GroupID()) }); err != nil {
		t.Fatal(err)
	}
	registry.MustRegister(mustRaw, rawConst("mr"))
	registry.MustRegisterTyped(mustTyp, func(s string) string { return s + "!" })

	if err := registry.Register(raw, rawConst("again")); !errors.Is(err, registry.ErrDuplicate) {
		t.Fatalf("duplicate Register err = %v", err)
	}
	if err := registry.RegisterTyped(typed, func() {}); !errors.Is(err, registry.ErrDuplicate) {
		t.Fatalf("duplicate RegisterTyped err = %v", err)
	}
	if err := registry.RegisterTyped("registry_test.global.bad", 3); err == nil {
		t.Fatal("RegisterTyped(non-func) succeeded")
	}

	f, err := registry.Global.Lookup(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := f(nil, nil); got != "r" {
		t.Fatalf("raw = %v", got)
	}
	f, err = registry.Global.Lookup(typed)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f(newEnv(), nil); err != nil || got != int64(1) {
		t.Fatalf("typed = %#v, %v; want int64(1)", got, err)
	}
	f, err = registry.Global.Lookup(mustTyp)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f(nil, []any{"hi"}); err != nil || got != "hi!" {
		t.Fatalf("must typed = %#v, %v", got, err)
	}
	if _, err := registry.Global.Lookup(unknownG); !errors.Is(err, registry.ErrUnknownFunction) {
		t.Fatalf("unknown lookup err = %v", err)
	}

	list := registry.Global.List()
	if len(list) != before+4 {
		t.Fatalf("Global.List grew from %d to %d, want +4", before, len(list))
	}
	if !sort.SliceIsSorted(list, func(i, j int) bool { return list[i].Name < list[j].Name }) {
		t.Fatal("Global.List is not sorted")
	}
	sigs := map[string]string{}
	for _, in := range list {
		sigs[in.Name] = in.Signature
	}
	for name, sig := range map[string]string{
		raw:     "(raw)",
		typed:   "func(registry.Env) int64",
		mustRaw: "(raw)",
		mustTyp: "func(string) string",
	} {
		if sigs[name] != sig {
			t.Errorf("signature of %s = %q, want %q", name, sigs[name], sig)
		}
	}
}

func TestMustRegisterPanics(t *testing.T) {
	const name = "registry_test.must_panics"
	registry.MustRegister(name, rawConst(1))
	tests := []struct {
		name string
		do   func()
		dup  bool
	}{
		{"MustRegister duplicate", func() { registry.MustRegister(name, rawConst(2)) }, true},
		{"MustRegisterTyped duplicate", func() { registry.MustRegisterTyped(name, func() {}) }, true},
		{"MustRegister nil", func() { registry.MustRegister("registry_test.must_nil", nil) }, false},
		{"MustRegisterTyped bad", func() { registry.MustRegisterTyped("registry_test.must_bad", func(chan int) {}) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("did not panic")
				}
				err, ok := r.(error)
				if !ok {
					t.Fatalf("panic value %#v is not an error", r)
				}
				if errors.Is(err, registry.ErrDuplicate) != tc.dup {
					t.Fatalf("panic %v: errors.Is(ErrDuplicate) != %v", err, tc.dup)
				}
			}()
			tc.do()
		})
	}
}

func TestConcurrentAccess(t *testing.T) {
	r := registry.New()
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for i := range n {
		wg.Add(3)
		go func() {
			defer wg.Done()
			if err := r.RegisterTyped(fmt.Sprintf("f%03d", i), func(x int) int { return x + i }); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			// Everyone races for the same name: exactly one wins.
			if err := r.Register("shared", rawConst(i)); err != nil && !errors.Is(err, registry.ErrDuplicate) {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			_ = r.List()
			_, _ = r.Lookup(fmt.Sprintf("f%03d", i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list := r.List()
	if len(list) != n+1 {
		t.Fatalf("List has %d entries, want %d", len(list), n+1)
	}
	for i := range n {
		f, err := r.Lookup(fmt.Sprintf("f%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := f(nil, []any{int64(1)}); err != nil || got != 1+i {
			t.Fatalf("f%03d(1) = %v, %v", i, got, err)
		}
	}
}

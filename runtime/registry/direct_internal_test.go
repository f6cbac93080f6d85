package registry

import (
	"errors"
	"fmt"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// The direct-call signatures behave exactly as the reflective path:
// results, nil pointers turned into nil, errors, argument-count errors.
func TestDirectMatchesReflect(t *testing.T) {
	boom := errors.New("boom")
	var nilTensor *tensor.Tensor
	fns := map[string]any{
		"func()":                    func() {},
		"func() error":              func() error { return boom },
		"func(Env)":                 func(Env) {},
		"func(Env) error":           func(env Env) error { return fmt.Errorf("env %v", env) },
		"func(Env, ...any) value":   func(_ Env, a ...any) (any, error) { return len(a), nil },
		"func(Env, ...any) nilptr":  func(_ Env, a ...any) (any, error) { return nilTensor, nil },
		"func(Env, ...any) error":   func(_ Env, a ...any) (any, error) { return nil, boom },
		"func(...any) echo":         func(a ...any) (any, error) { return a, nil },
		"func(...any) nilptr+error": func(a ...any) (any, error) { return nilTensor, boom },
	}
	argLists := [][]any{nil, {}, {1}, {nil, "x"}}
	for name, fn := range fns {
		fast, _, err := wrap(fn, true)
		if err != nil {
			t.Fatal(name, err)
		}
		slow, _, err := wrap(fn, false)
		if err != nil {
			t.Fatal(name, err)
		}
		if direct(fn, "") == nil {
			t.Fatalf("%s: no direct path", name)
		}
		for _, args := range argLists {
			gr, ge := fast(nil, args)
			wr, we := slow(nil, args)
			if fmt.Sprintf("%#v", gr) != fmt.Sprintf("%#v", wr) {
				t.Errorf("%s%v: result %#v, reflective %#v", name, args, gr, wr)
			}
			if fmt.Sprint(ge) != fmt.Sprint(we) || errors.Is(ge, ErrBadArgs) != errors.Is(we, ErrBadArgs) || errors.Is(ge, boom) != errors.Is(we, boom) {
				t.Errorf("%s%v: error %v, reflective %v", name, args, ge, we)
			}
		}
	}
	// Other signatures keep the reflective path.
	if direct(func(int) {}, "") != nil {
		t.Fatal("func(int) took the direct path")
	}
}

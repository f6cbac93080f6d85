package registry_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/tensor"
)

func mustWrap(t *testing.T, fn any) registry.Func {
	t.Helper()
	f, _, err := registry.Wrap(fn)
	if err != nil {
		t.Fatalf("Wrap(%T): %v", fn, err)
	}
	return f
}

// TestWrapParamTypes passes one normalized value to a function of each
// accepted parameter type and checks the Go value it received.
func TestWrapParamTypes(t *testing.T) {
	tt := tensor.MustNew(tensor.Float32, tensor.Shape{2})
	tests := []struct {
		name string
		fn   any // func(env registry.Env, x T) T: echoes its argument
		arg  any
		want any
	}{
		{"int", func(_ registry.Env, x int) int { return x }, int64(-3), int(-3)},
		{"int8", func(_ registry.Env, x int8) int8 { return x }, int64(math.MinInt8), int8(math.MinInt8)},
		{"int16", func(_ registry.Env, x int16) int16 { return x }, int64(math.MaxInt16), int16(math.MaxInt16)},
		{"int32", func(_ registry.Env, x int32) int32 { return x }, int64(math.MinInt32), int32(math.MinInt32)},
		{"int64", func(_ registry.Env, x int64) int64 { return x }, int64(math.MaxInt64), int64(math.MaxInt64)},
		{"uint8", func(_ registry.Env, x uint8) uint8 { return x }, int64(math.MaxUint8), uint8(math.MaxUint8)},
		{"uint16", func(_ registry.Env, x uint16) uint16 { return x }, int64(math.MaxUint16), uint16(math.MaxUint16)},
		{"uint32", func(_ registry.Env, x uint32) uint32 { return x }, int64(math.MaxUint32), uint32(math.MaxUint32)},
		{"uint64", func(_ registry.Env, x uint64) uint64 { return x }, int64(math.MaxInt64), uint64(math.MaxInt64)},
		{"uint", func(_ registry.Env, x uint) uint { return x }, int64(0), uint(0)},
		{"float32", func(_ registry.Env, x float32) float32 { return x }, 1.5, float32(1.5)},
		{"float64", func(_ registry.Env, x float64) float64 { return x }, -2.25, -2.25},
		{"float32 from int", func(_ registry.Env, x float32) float32 { return x }, int64(3), float32(3)},
		{"float64 from int", func(_ registry.Env, x float64) float64 { return x }, int64(-7), float64(-7)},
		{"bool", func(_ registry.Env, x bool) bool { return x }, true, true},
		{"string", func(_ registry.Env, x string) string { return x }, "héllo", "héllo"},
		{"bytes", func(_ registry.Env, x []byte) []byte { return x }, []byte{0, 1, 255}, []byte{0, 1, 255}},
		{"dtype", func(_ registry.Env, x tensor.DType) tensor.DType { return x }, tensor.Int16, tensor.Int16},
		{"device", func(_ registry.Env, x tensor.Device) tensor.Device { return x }, tensor.CUDADevice(2), tensor.CUDADevice(2)},
		{"shape", func(_ registry.Env, x tensor.Shape) tensor.Shape { return x }, tensor.Shape{3, 4}, tensor.Shape{3, 4}},
		{"tensor", func(_ registry.Env, x *tensor.Tensor) *tensor.Tensor { return x }, tt, tt},
		{"ref", func(_ registry.Env, x value.Ref) value.Ref { return x }, value.Ref(9), value.Ref(9)},
		{"any int", func(_ registry.Env, x any) any { return x }, int64(1), int64(1)},
		{"any tensor", func(_ registry.Env, x any) any { return x }, tt, tt},
		{"any non-wire", func(_ registry.Env, x any) any { return x }, map[string]int{"a": 1}, map[string]int{"a": 1}},
		{"any nil", func(_ registry.Env, x any) any { return x }, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustWrap(t, tc.fn)
			got, err := f(newEnv(), []any{tc.arg})
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if reflect.TypeOf(got) != reflect.TypeOf(tc.want) || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %T %#v, want %T %#v", got, got, tc.want, tc.want)
			}
		})
	}
}

func TestWrapTensorIdentity(t *testing.T) {
	tt := tensor.MustNew(tensor.Int8, tensor.Shape{1})
	f := mustWrap(t, func(x *tensor.Tensor) *tensor.Tensor { return x })
	got, err := f(nil, []any{tt})
	if err != nil || got.(*tensor.Tensor) != tt {
		t.Fatalf("tensor not passed through by pointer: %v, %v", got, err)
	}
}

func TestWrapAllParamsTogether(t *testing.T) {
	tt := tensor.MustNew(tensor.Uint8, tensor.Shape{1})
	var seen []any
	fn := func(env registry.Env, a int, b int8, c int16, d int32, e int64, f uint8, g uint16, h uint32, i uint64,
		j float32, k float64, l bool, m string, n []byte, o tensor.DType, p tensor.Device, q tensor.Shape,
		r *tensor.Tensor, s value.Ref, u any, rest ...any) {
		seen = []any{env.WorkerID(), a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, u, rest}
	}
	f, sig, err := registry.Wrap(fn)
	if err != nil {
		t.Fatal(err)
	}
	if sig != reflect.TypeOf(fn).String() {
		t.Fatalf("sig = %q", sig)
	}
	args := []any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8), int64(9),
		10.5, 11.5, true, "m", []byte("n"), tensor.Float64, tensor.CPUDevice, tensor.Shape{17},
		tt, value.Ref(19), "u", int64(21), nil, "z"}
	res, err := f(newEnv(), args)
	if err != nil || res != nil {
		t.Fatalf("call = %v, %v; want nil, nil", res, err)
	}
	want := []any{5, 1, int8(2), int16(3), int32(4), int64(5), uint8(6), uint16(7), uint32(8), uint64(9),
		float32(10.5), 11.5, true, "m", []byte("n"), tensor.Float64, tensor.CPUDevice, tensor.Shape{17},
		tt, value.Ref(19), "u", []any{int64(21), nil, "z"}}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("function saw\n%#v\nwant\n%#v", seen, want)
	}
}

func TestWrapEnv(t *testing.T) {
	env := newEnv()
	var got registry.Env
	f := mustWrap(t, func(e registry.Env, x int) int { got = e; return e.WorkerRank() + x })
	res, err := f(env, []any{int64(10)})
	if err != nil || res != 11 {
		t.Fatalf("= %v, %v; want 11", res, err)
	}
	if got != registry.Env(env) {
		t.Fatal("function did not receive the caller's Env")
	}
	// A nil Env reaches the function as a nil interface, without a panic
	// in Wrap itself.
	var sawNil bool
	f = mustWrap(t, func(e registry.Env) { sawNil = e == nil })
	if _, err := f(nil, nil); err != nil || !sawNil {
		t.Fatalf("nil env: err %v, sawNil %v", err, sawNil)
	}
	// Without an Env parameter the Env is not counted as an argument.
	f = mustWrap(t, func(x int) int { return x })
	if res, err := f(env, []any{int64(4)}); err != nil || res != 4 {
		t.Fatalf("= %v, %v", res, err)
	}
}

func TestWrapVariadic(t *testing.T) {
	var got []any
	tests := []struct {
		name string
		fn   any
		args []any
		want []any
	}{
		{"only variadic, none", func(rest ...any) { got = rest }, nil, nil},
		{"only variadic, some", func(rest ...any) { got = rest }, []any{int64(1), "a", nil}, []any{int64(1), "a", nil}},
		{"env and variadic", func(_ registry.Env, rest ...any) { got = rest }, []any{true}, []any{true}},
		{"fixed then variadic, none", func(_ int, rest ...any) { got = rest }, []any{int64(1)}, nil},
		{"fixed then variadic, some", func(_ registry.Env, _ string, rest ...any) { got = rest }, []any{"s", 2.0, tensor.Shape{1}}, []any{2.0, tensor.Shape{1}}},
		{"non-wire values pass raw", func(rest ...any) { got = rest }, []any{[]int{1}, struct{}{}}, []any{[]int{1}, struct{}{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got = []any{"unset"}
			f := mustWrap(t, tc.fn)
			if _, err := f(newEnv(), tc.args); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) || (len(tc.want) > 0 && !reflect.DeepEqual(got, tc.want)) {
				t.Fatalf("rest = %#v, want %#v", got, tc.want)
			}
		})
	}
}

type point struct{ X, Y int }

func TestWrapResults(t *testing.T) {
	sentinel := errors.New("boom")
	tt := tensor.MustNew(tensor.Float32, tensor.Shape{1})
	var nilTensor *tensor.Tensor
	tests := []struct {
		name    string
		fn      any
		want    any
		wantErr error
	}{
		{"none", func() {}, nil, nil},
		{"error nil", func() error { return nil }, nil, nil},
		{"error", func() error { return sentinel }, nil, sentinel},
		{"value", func() int64 { return 7 }, int64(7), nil},
		{"zero value", func() int64 { return 0 }, int64(0), nil},
		{"value string", func() string { return "x" }, "x", nil},
		{"value non-wire", func() point { return point{1, 2} }, point{1, 2}, nil},
		{"value pointer", func() *point { return &point{1, 2} }, &point{1, 2}, nil},
		{"nil pointer", func() *point { return nil }, nil, nil},
		{"tensor", func() *tensor.Tensor { return tt }, tt, nil},
		{"nil tensor", func() *tensor.Tensor { return nil }, nil, nil},
		{"nil any", func() any { return nil }, nil, nil},
		{"nil tensor in any", func() any { return nilTensor }, nil, nil},
		{"nil tensor in any with error", func() (any, error) { return nilTensor, nil }, nil, nil},
		{"value and nil error", func() (float64, error) { return 1.5, nil }, 1.5, nil},
		{"value and error", func() (float64, error) { return 0, sentinel }, float64(0), sentinel},
		{"tensor and nil error", func() (*tensor.Tensor, error) { return tt, nil }, tt, nil},
		{"nil tensor and nil error", func() (*tensor.Tensor, error) { return nil, nil }, nil, nil},
		{"nil tensor and error", func() (*tensor.Tensor, error) { return nil, sentinel }, nil, sentinel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustWrap(t, tc.fn)
			got, err := f(nil, nil)
			if err != tc.wantErr {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.want == nil {
				if got != nil {
					t.Fatalf("result = %T %#v, want untyped nil", got, got)
				}
				return
			}
			if reflect.TypeOf(got) != reflect.TypeOf(tc.want) || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("result = %T %#v, want %T %#v", got, got, tc.want, tc.want)
			}
		})
	}
}

type wrappedErr struct{ inner error }

func (e *wrappedErr) Error() string { return "wrapped: " + e.inner.Error() }
func (e *wrappedErr) Unwrap() error { return e.inner }

func TestWrapErrorPassThrough(t *testing.T) {
	inner := errors.New("inner")
	orig := &wrappedErr{inner}
	f := mustWrap(t, func(x int) (int, error) { return x, orig })
	_, err := f(nil, []any{int64(1)})
	if err != error(orig) {
		t.Fatalf("error was not passed through unchanged: %v", err)
	}
	if !errors.Is(err, inner) {
		t.Fatal("errors.Is lost the wrapped chain")
	}
	var we *wrappedErr
	if !errors.As(err, &we) || we != orig {
		t.Fatal("errors.As lost the concrete error")
	}
	if errors.Is(err, registry.ErrBadArgs) {
		t.Fatal("a function's own error must not be reported as ErrBadArgs")
	}
	// A function may itself report ErrBadArgs; that is preserved too.
	f = mustWrap(t, func() error { return registry.ErrBadArgs })
	if _, err := f(nil, nil); err != registry.ErrBadArgs {
		t.Fatalf("err = %v", err)
	}
}

func TestWrapRejectedSignatures(t *testing.T) {
	var nilFunc func()
	tests := []struct {
		name string
		fn   any
		want string
	}{
		{"nil", nil, "want a function, got <nil>"},
		{"nil func", nilFunc, "want a function, got func()"},
		{"int", 42, "want a function, got int"},
		{"string", "f", "want a function, got string"},
		{"raw Func is fine but a pointer to one is not", new(registry.Func), "want a function, got *registry.Func"},
		{"variadic int", func(xs ...int) {}, "variadic parameter must be ...any, got []int"},
		{"env then variadic string", func(_ registry.Env, xs ...string) {}, "variadic parameter must be ...any, got []string"},
		{"three results", func() (int, int, error) { return 0, 0, nil }, "at most two results, got 3"},
		{"second result not error", func() (int, int) { return 0, 0 }, "second result must be error, got int"},
		//lint:ignore ST1008 the wrong order is the case under test
		{"error then value", func() (error, int) { return nil, 0 }, "second result must be error, got int"},
		{"map param", func(map[string]int) {}, "parameter 0: unsupported parameter type map[string]int"},
		{"chan param", func(int, chan int) {}, "parameter 1: unsupported parameter type chan int"},
		{"func param", func(func()) {}, "parameter 0: unsupported parameter type func()"},
		{"struct param", func(point) {}, "parameter 0: unsupported parameter type registry_test.point"},
		{"pointer param", func(*int) {}, "parameter 0: unsupported parameter type *int"},
		{"[]int param", func([]int) {}, "parameter 0: unsupported parameter type []int"},
		{"[]int64 param", func([]int64) {}, "parameter 0: unsupported parameter type []int64"},
		{"[]any param", func([]any) {}, "parameter 0: unsupported parameter type []interface {}"},
		{"error param", func(error) {}, "parameter 0: unsupported parameter type error"},
		{"uintptr param", func(uintptr) {}, "parameter 0: unsupported parameter type uintptr"},
		{"complex param", func(complex128) {}, "parameter 0: unsupported parameter type complex128"},
		{"env not first", func(int, registry.Env) {}, "parameter 1: unsupported parameter type registry.Env"},
		{"two envs", func(registry.Env, registry.Env) {}, "parameter 0: unsupported parameter type registry.Env"},
		{"concrete env type", func(*fakeEnv) {}, "parameter 0: unsupported parameter type *registry_test.fakeEnv"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, sig, err := registry.Wrap(tc.fn)
			if err == nil {
				t.Fatalf("Wrap(%T) succeeded, want error", tc.fn)
			}
			if f != nil || sig != "" {
				t.Errorf("Wrap returned a function or signature alongside an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestWrapAcceptsRawFuncShape(t *testing.T) {
	// The raw signature is not a valid typed signature: its []any
	// parameter is not ...any.
	if _, _, err := registry.Wrap(func(registry.Env, []any) (any, error) { return nil, nil }); err == nil {
		t.Fatal("Wrap accepted a raw-shaped function with a []any parameter")
	}
}

func TestWrapArgCount(t *testing.T) {
	tests := []struct {
		name string
		fn   any
		args []any
		want string
	}{
		{"too few", func(a, b int) {}, []any{int64(1)}, "want 2 arguments, got 1"},
		{"none for one", func(_ registry.Env, a string) {}, nil, "want 1 arguments, got 0"},
		{"too many", func(a int) {}, []any{int64(1), int64(2)}, "want 1 arguments, got 2"},
		{"some for none", func() {}, []any{nil}, "want 0 arguments, got 1"},
		{"env not counted", func(registry.Env) {}, []any{int64(1)}, "want 0 arguments, got 1"},
		{"variadic too few", func(a, b int, rest ...any) {}, []any{int64(1)}, "want at least 2 arguments, got 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustWrap(t, tc.fn)
			res, err := f(newEnv(), tc.args)
			if !errors.Is(err, registry.ErrBadArgs) {
				t.Fatalf("err = %v, want ErrBadArgs", err)
			}
			if res != nil {
				t.Errorf("result %#v alongside an error", res)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if sig := reflect.TypeOf(tc.fn).String(); !strings.Contains(err.Error(), sig) {
				t.Fatalf("error %q does not name the signature %q", err, sig)
			}
		})
	}
}

func TestWrapArgErrors(t *testing.T) {
	tt := tensor.MustNew(tensor.Float32, tensor.Shape{1})
	var nilTensor *tensor.Tensor
	tests := []struct {
		name string
		fn   any
		args []any
		want string
	}{
		// Wrong kinds.
		{"string for int", func(int) {}, []any{"1"}, "argument 0: want int, got string"},
		{"float for int", func(int) {}, []any{1.0}, "argument 0: want int, got float"},
		{"float for int64", func(_ registry.Env, _ string, _ int64) {}, []any{"s", 2.5}, "argument 1: want int64, got float"},
		{"float for uint8", func(uint8) {}, []any{1.0}, "argument 0: want uint8, got float"},
		{"bool for int", func(int) {}, []any{true}, "argument 0: want int, got bool"},
		{"nil for int", func(int) {}, []any{nil}, "argument 0: want int, got nil"},
		{"ref for int", func(int) {}, []any{value.Ref(1)}, "argument 0: want int, got ref"},
		{"non-normalized int", func(int) {}, []any{int32(1)}, "argument 0: want int, got int32"},
		{"string for float", func(float64) {}, []any{"1.0"}, "argument 0: want float64, got string"},
		{"bool for float32", func(float32) {}, []any{false}, "argument 0: want float32, got bool"},
		{"non-normalized float32", func(float64) {}, []any{float32(1)}, "argument 0: want float64, got float32"},
		{"int for bool", func(bool) {}, []any{int64(1)}, "argument 0: want bool, got int"},
		{"int for string", func(string) {}, []any{int64(1)}, "argument 0: want string, got int"},
		{"string for bytes", func([]byte) {}, []any{"abc"}, "argument 0: want []uint8, got string"},
		{"int for dtype", func(tensor.DType) {}, []any{int64(1)}, "argument 0: want DType, got int"},
		{"string for device", func(tensor.Device) {}, []any{"cpu"}, "argument 0: want Device, got string"},
		{"[]int64 for shape", func(tensor.Shape) {}, []any{[]int64{1}}, "argument 0: want Shape, got []int64"},
		{"nil for shape", func(tensor.Shape) {}, []any{nil}, "argument 0: want Shape, got nil"},
		{"int for ref", func(value.Ref) {}, []any{int64(1)}, "argument 0: want value.Ref, got int"},
		{"tensor for int", func(int) {}, []any{tt}, "argument 0: want int, got tensor"},
		{"shape for tensor", func(*tensor.Tensor) {}, []any{tensor.Shape{1}}, "argument 0: want tensor, got shape"},
		{"nil for tensor", func(*tensor.Tensor) {}, []any{nil}, "argument 0: want tensor, got nil"},
		{"typed nil for tensor", func(*tensor.Tensor) {}, []any{nilTensor}, "argument 0: want tensor, got tensor"},
		{"non-wire for tensor", func(*tensor.Tensor) {}, []any{&point{}}, "argument 0: want tensor, got *registry_test.point"},
		{"second arg bad", func(_ registry.Env, _ int, _ bool, _ string) {}, []any{int64(1), true, 3.0}, "argument 2: want string, got float"},
		{"variadic fixed bad", func(_ int, _ ...any) {}, []any{"x", 1}, "argument 0: want int, got string"},
		// Integer range checks.
		{"int8 overflow", func(int8) {}, []any{int64(128)}, "argument 0: 128 overflows int8"},
		{"int8 underflow", func(int8) {}, []any{int64(-129)}, "argument 0: -129 overflows int8"},
		{"int16 overflow", func(int16) {}, []any{int64(math.MaxInt16 + 1)}, "argument 0: 32768 overflows int16"},
		{"int32 overflow", func(int32) {}, []any{int64(math.MaxInt32 + 1)}, "argument 0: 2147483648 overflows int32"},
		{"int32 underflow", func(int32) {}, []any{int64(math.MinInt32 - 1)}, "argument 0: -2147483649 overflows int32"},
		{"uint8 overflow", func(uint8) {}, []any{int64(256)}, "argument 0: 256 out of range for uint8"},
		{"uint8 negative", func(uint8) {}, []any{int64(-1)}, "argument 0: -1 out of range for uint8"},
		{"uint16 overflow", func(uint16) {}, []any{int64(math.MaxUint16 + 1)}, "argument 0: 65536 out of range for uint16"},
		{"uint32 overflow", func(uint32) {}, []any{int64(math.MaxUint32 + 1)}, "argument 0: 4294967296 out of range for uint32"},
		{"uint negative", func(uint) {}, []any{int64(-5)}, "argument 0: -5 out of range for uint"},
		{"uint64 negative", func(uint64) {}, []any{int64(math.MinInt64)}, "argument 0: -9223372036854775808 out of range for uint64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			// Wrap a function with the same signature that records calls.
			ft := reflect.TypeOf(tc.fn)
			spy := reflect.MakeFunc(ft, func(in []reflect.Value) []reflect.Value {
				called = true
				return nil
			}).Interface()
			f := mustWrap(t, spy)
			res, err := f(newEnv(), tc.args)
			if err == nil {
				t.Fatal("call succeeded, want error")
			}
			if called {
				t.Error("function was called despite a bad argument")
			}
			if res != nil {
				t.Errorf("result %#v alongside an error", res)
			}
			if !errors.Is(err, registry.ErrBadArgs) {
				t.Fatalf("err %q does not wrap ErrBadArgs", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "(signature "+ft.String()+")") {
				t.Fatalf("error %q does not name the signature %s", err, ft)
			}
		})
	}
}

func TestWrapIntBoundariesAccepted(t *testing.T) {
	tests := []struct {
		name string
		fn   any
		arg  int64
	}{
		{"int8 max", func(x int8) int64 { return int64(x) }, math.MaxInt8},
		{"int8 min", func(x int8) int64 { return int64(x) }, math.MinInt8},
		{"int16 min", func(x int16) int64 { return int64(x) }, math.MinInt16},
		{"int32 max", func(x int32) int64 { return int64(x) }, math.MaxInt32},
		{"int min", func(x int) int64 { return int64(x) }, math.MinInt64},
		{"uint8 zero", func(x uint8) int64 { return int64(x) }, 0},
		{"uint8 max", func(x uint8) int64 { return int64(x) }, math.MaxUint8},
		{"uint32 max", func(x uint32) int64 { return int64(x) }, math.MaxUint32},
		{"uint max int64", func(x uint) int64 { return int64(x) }, math.MaxInt64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mustWrap(t, tc.fn)(nil, []any{tc.arg})
			if err != nil || got != tc.arg {
				t.Fatalf("= %v, %v; want %d", got, err, tc.arg)
			}
		})
	}
}

func TestWrapPanicPropagates(t *testing.T) {
	type marker struct{ msg string }
	tests := []struct {
		name string
		fn   any
		args []any
		want any
	}{
		{"panic value", func() { panic(marker{"custom"}) }, nil, marker{"custom"}},
		{"panic string with result", func(x int) int { panic("bad " + string(rune('0'+x))) }, []any{int64(3)}, "bad 3"},
		{"panic error", func(_ registry.Env) error { panic(registry.ErrUnknownFunction) }, nil, registry.ErrUnknownFunction},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustWrap(t, tc.fn)
			var res any
			var err error
			recovered := func() (r any) {
				defer func() { r = recover() }()
				res, err = f(newEnv(), tc.args)
				return nil
			}()
			if recovered == nil {
				t.Fatalf("panic was swallowed: result %v, err %v", res, err)
			}
			if recovered != tc.want {
				t.Fatalf("recovered %#v, want the original panic value %#v", recovered, tc.want)
			}
		})
	}
	// A nil-pointer dereference inside the function is a runtime error
	// panic, not a returned error.
	f := mustWrap(t, func(x *tensor.Tensor) int64 { var p *tensor.Tensor; return p.NumBytes() })
	func() {
		defer func() {
			r := recover()
			if _, ok := r.(interface{ RuntimeError() }); !ok {
				t.Fatalf("recovered %#v, want a runtime error", r)
			}
		}()
		_, _ = f(nil, []any{tensor.MustNew(tensor.Int8, tensor.Shape{1})})
		t.Fatal("no panic")
	}()
}

func TestWrapReusable(t *testing.T) {
	// One wrapped Func serves many calls, good and bad, independently.
	f := mustWrap(t, func(a int, b int8) int { return a * int(b) })
	for i := range 3 {
		if got, err := f(nil, []any{int64(i), int64(2)}); err != nil || got != 2*i {
			t.Fatalf("call %d = %v, %v", i, got, err)
		}
		if _, err := f(nil, []any{int64(i), int64(1000)}); !errors.Is(err, registry.ErrBadArgs) {
			t.Fatalf("bad call %d err = %v", i, err)
		}
	}
}

func TestWrapSignature(t *testing.T) {
	tests := []struct {
		fn   any
		want string
	}{
		{func() {}, "func()"},
		{func(registry.Env, int64) (*tensor.Tensor, error) { return nil, nil }, "func(registry.Env, int64) (*tensor.Tensor, error)"},
		{func(value.Ref, ...any) error { return nil }, "func(value.Ref, ...interface {}) error"},
	}
	for _, tc := range tests {
		_, sig, err := registry.Wrap(tc.fn)
		if err != nil || sig != tc.want {
			t.Errorf("Wrap(%T) sig = %q, %v; want %q", tc.fn, sig, err, tc.want)
		}
	}
}

package registry

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/tensor"
)

var (
	envType    = reflect.TypeFor[Env]()
	errorType  = reflect.TypeFor[error]()
	anyType    = reflect.TypeFor[any]()
	tensorType = reflect.TypeFor[*tensor.Tensor]()
)

// Wrap turns an ordinary Go function into a Func.
//
// Accepted parameters: optionally a leading registry.Env, then any of
// int, int8..int64, uint8..uint64, float32, float64, bool, string, []byte,
// tensor.DType, tensor.Device, tensor.Shape, *tensor.Tensor, value.Ref and
// any (which receives the raw value). A final variadic ...any collects the
// rest. Results: nothing, error, T, or (T, error), where T is any type (a
// register may hold any Go value; only wire kinds can be fetched to the
// controller).
//
// Integer arguments are range-checked; ints are not silently converted to
// floats or bools, but an int argument is accepted for a float parameter
// since callers commonly write 1 for 1.0.
func Wrap(fn any) (Func, string, error) { return wrap(fn, true) }

// wrap is Wrap; fast=false always takes the reflective path (tests
// compare the two).
func wrap(fn any, fast bool) (Func, string, error) {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		return nil, "", fmt.Errorf("want a function, got %T", fn)
	}
	t := v.Type()
	sig := t.String()
	first := 0
	if t.NumIn() > 0 && t.In(0) == envType {
		first = 1
	}
	nin := t.NumIn()
	variadic := t.IsVariadic()
	if variadic && t.In(nin-1).Elem() != anyType {
		return nil, "", fmt.Errorf("variadic parameter must be ...any, got %s", t.In(nin-1))
	}
	fixed := nin - first
	if variadic {
		fixed--
	}
	convs := make([]func(any) (reflect.Value, error), fixed)
	for i := range fixed {
		c, err := converter(t.In(first + i))
		if err != nil {
			return nil, "", fmt.Errorf("parameter %d: %w", i, err)
		}
		convs[i] = c
	}
	if f := direct(fn, sig); fast && f != nil {
		return f, sig, nil
	}
	var hasErr, hasVal bool
	switch t.NumOut() {
	case 0:
	case 1:
		if t.Out(0) == errorType {
			hasErr = true
		} else {
			hasVal = true
		}
	case 2:
		if t.Out(1) != errorType {
			return nil, "", fmt.Errorf("second result must be error, got %s", t.Out(1))
		}
		hasVal, hasErr = true, true
	default:
		return nil, "", fmt.Errorf("at most two results, got %d", t.NumOut())
	}

	f := func(env Env, args []any) (any, error) {
		if len(args) < fixed || (!variadic && len(args) != fixed) {
			want := fmt.Sprintf("%d", fixed)
			if variadic {
				want = "at least " + want
			}
			return nil, fmt.Errorf("%w: want %s arguments, got %d (signature %s)", ErrBadArgs, want, len(args), sig)
		}
		in := make([]reflect.Value, 0, first+len(args))
		if first == 1 {
			if env == nil {
				in = append(in, reflect.Zero(envType))
			} else {
				in = append(in, reflect.ValueOf(env))
			}
		}
		for i := range fixed {
			rv, err := convs[i](args[i])
			if err != nil {
				return nil, fmt.Errorf("%w: argument %d: %v (signature %s)", ErrBadArgs, i, err, sig)
			}
			in = append(in, rv)
		}
		for _, a := range args[fixed:] {
			if a == nil {
				in = append(in, reflect.Zero(anyType))
			} else {
				in = append(in, reflect.ValueOf(a))
			}
		}
		out := v.Call(in)
		var res any
		var err error
		if hasVal {
			// A nil pointer result means "no value": store nil, not a
			// typed nil that would look like a tensor to later readers.
			// An interface result (e.g. any) is unwrapped first, so a nil
			// *tensor.Tensor returned as any is caught too.
			o := out[0]
			if o.Kind() == reflect.Interface && !o.IsNil() {
				o = o.Elem()
			}
			if !(o.Kind() == reflect.Pointer || o.Kind() == reflect.Interface) || !o.IsNil() {
				res = o.Interface()
			}
		}
		if hasErr {
			if e := out[len(out)-1]; !e.IsNil() {
				err = e.Interface().(error)
			}
		}
		return res, err
	}
	return f, sig, nil
}

// converter returns a function that checks and converts one normalized
// argument to parameter type pt.
func converter(pt reflect.Type) (func(any) (reflect.Value, error), error) {
	if pt == anyType {
		return func(a any) (reflect.Value, error) {
			if a == nil {
				return reflect.Zero(anyType), nil
			}
			return reflect.ValueOf(a), nil
		}, nil
	}
	exact := func(want any) func(any) (reflect.Value, error) {
		wt := reflect.TypeOf(want)
		return func(a any) (reflect.Value, error) {
			if a != nil && reflect.TypeOf(a) == wt {
				return reflect.ValueOf(a).Convert(pt), nil
			}
			return reflect.Value{}, fmt.Errorf("want %s, got %s", kindName(pt), value.Describe(a))
		}
	}
	switch pt {
	case tensorType:
		return func(a any) (reflect.Value, error) {
			t, ok := a.(*tensor.Tensor)
			if !ok || t == nil {
				return reflect.Value{}, fmt.Errorf("want tensor, got %s", value.Describe(a))
			}
			return reflect.ValueOf(t), nil
		}, nil
	case reflect.TypeFor[tensor.DType]():
		return exact(tensor.DType(0)), nil
	case reflect.TypeFor[tensor.Device]():
		return exact(tensor.Device{}), nil
	case reflect.TypeFor[tensor.Shape]():
		return exact(tensor.Shape(nil)), nil
	case reflect.TypeFor[value.Ref]():
		return exact(value.Ref(0)), nil
	case reflect.TypeFor[[]byte]():
		return exact([]byte(nil)), nil
	}
	switch pt.Kind() {
	case reflect.Bool:
		return exact(false), nil
	case reflect.String:
		return exact(""), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(a any) (reflect.Value, error) {
			i, ok := a.(int64)
			if !ok {
				return reflect.Value{}, fmt.Errorf("want %s, got %s", pt, value.Describe(a))
			}
			rv := reflect.New(pt).Elem()
			if rv.OverflowInt(i) {
				return reflect.Value{}, fmt.Errorf("%d overflows %s", i, pt)
			}
			rv.SetInt(i)
			return rv, nil
		}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return func(a any) (reflect.Value, error) {
			i, ok := a.(int64)
			if !ok {
				return reflect.Value{}, fmt.Errorf("want %s, got %s", pt, value.Describe(a))
			}
			rv := reflect.New(pt).Elem()
			if i < 0 || rv.OverflowUint(uint64(i)) {
				return reflect.Value{}, fmt.Errorf("%d out of range for %s", i, pt)
			}
			rv.SetUint(uint64(i))
			return rv, nil
		}, nil
	case reflect.Float32, reflect.Float64:
		return func(a any) (reflect.Value, error) {
			rv := reflect.New(pt).Elem()
			switch x := a.(type) {
			case float64:
				rv.SetFloat(x)
			case int64:
				rv.SetFloat(float64(x))
			default:
				return reflect.Value{}, fmt.Errorf("want %s, got %s", pt, value.Describe(a))
			}
			return rv, nil
		}, nil
	}
	return nil, fmt.Errorf("unsupported parameter type %s", pt)
}

func kindName(t reflect.Type) string {
	s := t.String()
	return strings.TrimPrefix(s, "tensor.")
}

// direct calls functions of the most common signatures, which need no
// argument conversion, without reflect.Value.Call (about 0.2 us and an
// allocation per call on a many-core host: a no-op command's whole
// budget). Results and errors are those of the reflective path.
func direct(fn any, sig string) Func {
	none := func(args []any) error {
		if len(args) != 0 {
			return fmt.Errorf("%w: want 0 arguments, got %d (signature %s)", ErrBadArgs, len(args), sig)
		}
		return nil
	}
	switch f := fn.(type) {
	case func():
		return func(_ Env, args []any) (any, error) {
			if err := none(args); err != nil {
				return nil, err
			}
			f()
			return nil, nil
		}
	case func() error:
		return func(_ Env, args []any) (any, error) {
			if err := none(args); err != nil {
				return nil, err
			}
			return nil, f()
		}
	case func(Env):
		return func(env Env, args []any) (any, error) {
			if err := none(args); err != nil {
				return nil, err
			}
			f(env)
			return nil, nil
		}
	case func(Env) error:
		return func(env Env, args []any) (any, error) {
			if err := none(args); err != nil {
				return nil, err
			}
			return nil, f(env)
		}
	case func(Env, ...any) (any, error):
		return func(env Env, args []any) (any, error) {
			res, err := f(env, nonNil(args)...)
			return noNilPointer(res), err
		}
	case func(...any) (any, error):
		return func(_ Env, args []any) (any, error) {
			res, err := f(nonNil(args)...)
			return noNilPointer(res), err
		}
	}
	return nil
}

// noNilPointer turns a nil pointer held in an interface into nil, as the
// reflective path does: "no value", not a typed nil that would look like
// a tensor to later readers.
func noNilPointer(v any) any {
	if v == nil {
		return nil
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil
	}
	return v
}

// nonNil: the reflective path hands a variadic parameter an empty slice,
// never nil.
func nonNil(args []any) []any {
	if args == nil {
		return []any{}
	}
	return args
}

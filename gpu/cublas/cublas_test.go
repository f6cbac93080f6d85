package cublas_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/gpu/cublas"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/tensor"
)

func TestDataTypeOf(t *testing.T) {
	want := map[tensor.DType]cublas.DataType{tensor.Float32: 0, tensor.Float16: 2, tensor.BFloat16: 14, tensor.Float64: 1}
	for _, dt := range tensor.DTypes {
		got, err := cublas.DataTypeOf(dt)
		w, ok := want[dt]
		if ok != (err == nil) || (ok && got != w) {
			t.Errorf("DataTypeOf(%s) = %d, %v; want %d (ok=%v)", dt, got, err, w, ok)
		}
	}
}

func TestErrorNames(t *testing.T) {
	cases := []struct {
		code int
		want string
	}{
		{7, "CUBLAS_STATUS_INVALID_VALUE (7)"},
		{15, "CUBLAS_STATUS_NOT_SUPPORTED"},
		{99, "CUBLAS_STATUS_UNKNOWN (99)"},
	}
	for _, c := range cases {
		e := &cublas.Error{Func: "cublasGemmEx", Code: c.code}
		if !strings.Contains(e.Error(), c.want) {
			t.Errorf("code %d: %q lacks %q", c.code, e.Error(), c.want)
		}
	}
}

func load(t *testing.T) (*cublas.Lib, *cuda.Driver) {
	l, err := cublas.Load()
	if err != nil {
		if !errors.Is(err, cublas.ErrNotLoaded) {
			t.Fatalf("Load: %v", err)
		}
		gputest.Skipf(t, "no cuBLAS here: %v", err)
	}
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(t, "no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		gputest.Skipf(t, "cuInit: %v", err)
	}
	return l, d
}

// TestMatmulRowMajor multiplies small row-major matrices on device 0 in
// float32, float16 and bfloat16 and compares with a float64 product:
// a·b with b [k, n] (MatmulRowMajor) and a·bᵀ with b [n, k]
// (MatmulRowMajorNT, the same b transposed in memory).
func TestMatmulRowMajor(t *testing.T) {
	l, d := load(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := d.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer d.PrimaryCtxRelease(dev)
	if err := d.SetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := l.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Destroy(h)
	if v, err := l.Version(h); err != nil || v < 11000 {
		t.Fatalf("version %d, %v", v, err)
	}
	if err := l.SetMathMode(h, cublas.DefaultMath); err != nil {
		t.Fatal(err)
	}
	const m, k, n = 5, 7, 3
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
		a, b := tensor.MustNew(dt, tensor.Shape{m, k}), tensor.MustNew(dt, tensor.Shape{k, n})
		if err := tensor.RandomRange(a, 1, -1, 1); err != nil {
			t.Fatal(err)
		}
		if err := tensor.RandomRange(b, 2, -1, 1); err != nil {
			t.Fatal(err)
		}
		af, _ := tensor.ToFloat64(a)
		bf, _ := tensor.ToFloat64(b)
		want := make([]float64, m*n)
		for i := range m {
			for j := range n {
				for p := range k {
					want[i*n+j] += af[i*k+p] * bf[p*n+j]
				}
			}
		}
		c := tensor.MustNew(dt, tensor.Shape{m, n})
		var ptrs [3]cuda.DevicePtr
		for i, x := range []*tensor.Tensor{a, b, c} {
			if ptrs[i], err = d.MemAlloc(x.NumBytes()); err != nil {
				t.Fatal(err)
			}
			defer d.MemFree(ptrs[i])
			if err := d.MemcpyHtoD(ptrs[i], x.Bytes()); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.MatmulRowMajor(h, m, n, k, uintptr(ptrs[0]), uintptr(ptrs[1]), uintptr(ptrs[2]), dt); err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		if err := d.CtxSynchronize(); err != nil {
			t.Fatal(err)
		}
		if err := d.MemcpyDtoH(c.Bytes(), ptrs[2]); err != nil {
			t.Fatal(err)
		}
		rtol, atol := tensor.DefaultTolerance(dt)
		if err := tensor.CloseTo(c, want, rtol*10, atol*10); err != nil {
			t.Errorf("%s: %v", dt, err)
		}

		// b transposed in memory, [n, k], through op T; c poisoned first.
		bt := tensor.MustNew(dt, tensor.Shape{n, k})
		bb, tb, es := b.Bytes(), bt.Bytes(), dt.Size()
		for p := range k {
			for j := range n {
				copy(tb[(j*k+p)*es:(j*k+p+1)*es], bb[(p*n+j)*es:(p*n+j+1)*es])
			}
		}
		if err := d.MemcpyHtoD(ptrs[1], bt.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := tensor.Poison(c); err != nil {
			t.Fatal(err)
		}
		if err := d.MemcpyHtoD(ptrs[2], c.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := l.MatmulRowMajorNT(h, m, n, k, uintptr(ptrs[0]), uintptr(ptrs[1]), uintptr(ptrs[2]), dt); err != nil {
			t.Fatalf("%s NT: %v", dt, err)
		}
		if err := d.CtxSynchronize(); err != nil {
			t.Fatal(err)
		}
		if err := d.MemcpyDtoH(c.Bytes(), ptrs[2]); err != nil {
			t.Fatal(err)
		}
		if err := tensor.CloseTo(c, want, rtol*10, atol*10); err != nil {
			t.Errorf("%s NT: %v", dt, err)
		}
	}
}

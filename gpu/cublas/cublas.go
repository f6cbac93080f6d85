package cublas

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/dl"
	"github.com/chorus-rt/chorus/tensor"
)

// ErrNotLoaded: libcublas could not be loaded.
var ErrNotLoaded = errors.New("cublas: library not loaded")

// Handle is a cublasHandle_t.
type Handle uintptr

// DataType is cudaDataType_t (library_types.h).
type DataType int32

const (
	R32F  DataType = 0  // CUDA_R_32F
	R64F  DataType = 1  // CUDA_R_64F
	R16F  DataType = 2  // CUDA_R_16F
	R16BF DataType = 14 // CUDA_R_16BF
)

// Operation is cublasOperation_t.
type Operation int32

const (
	OpN Operation = 0 // CUBLAS_OP_N
	OpT Operation = 1 // CUBLAS_OP_T
)

// ComputeType is cublasComputeType_t.
type ComputeType int32

const (
	Compute32F ComputeType = 68 // CUBLAS_COMPUTE_32F: float accumulation
	Compute64F ComputeType = 70 // CUBLAS_COMPUTE_64F
)

// GemmAlgo is cublasGemmAlgo_t.
type GemmAlgo int32

// GemmDefault is CUBLAS_GEMM_DEFAULT.
const GemmDefault GemmAlgo = -1

// MathMode is cublasMath_t.
type MathMode int32

const (
	DefaultMath  MathMode = 0 // CUBLAS_DEFAULT_MATH: no TF32 for float32 inputs
	PedanticMath MathMode = 2 // CUBLAS_PEDANTIC_MATH
	TF32Math     MathMode = 3 // CUBLAS_TF32_TENSOR_OP_MATH
)

// statusNames are cublasStatus_t's names (cublas_api.h).
var statusNames = map[int]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// Error is a failed cuBLAS call.
type Error struct {
	Func string
	Code int
}

func (e *Error) Error() string {
	name, ok := statusNames[e.Code]
	if !ok {
		name = "CUBLAS_STATUS_UNKNOWN"
	}
	return fmt.Sprintf("cublas: %s: %s (%d)", e.Func, name, e.Code)
}

// Lib is a loaded libcublas.
type Lib struct {
	Name string // the soname that opened
	c    dl.Caller
	gemm uintptr
}

var symbols = []string{
	"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
	"cublasGetVersion_v2", "cublasGemmEx",
}

var sonames = []string{
	"libcublas.so.13", "libcublas.so.12", "libcublas.so",
	"/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
}

// Load opens libcublas and resolves every symbol; the error wraps
// ErrNotLoaded when the library is missing or lacks a symbol.
func Load() (*Lib, error) {
	lib, err := dl.Open("cuBLAS", sonames, symbols)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotLoaded, err)
	}
	l := &Lib{Name: lib.Name, c: dl.NewCaller(lib, func(fn string, status int32) error {
		return &Error{Func: fn, Code: int(status)}
	})}
	l.gemm = l.c.Sym("cublasGemmEx")
	return l, nil
}

// Version is cublasGetVersion's number (e.g. 120903 for 12.9.3); it needs
// a handle.
func (l *Lib) Version(h Handle) (int, error) {
	var v int32
	err := l.c.Call("cublasGetVersion_v2", uintptr(h), uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// Create makes a handle on the current context's device.
func (l *Lib) Create() (Handle, error) {
	var h Handle
	err := l.c.Call("cublasCreate_v2", uintptr(unsafe.Pointer(&h)))
	return h, err
}

// Destroy releases a handle.
func (l *Lib) Destroy(h Handle) error { return l.c.Call("cublasDestroy_v2", uintptr(h)) }

// SetStream makes the handle enqueue on stream s (a CUstream).
func (l *Lib) SetStream(h Handle, s uintptr) error {
	return l.c.Call("cublasSetStream_v2", uintptr(h), s)
}

// SetMathMode sets the handle's math mode.
func (l *Lib) SetMathMode(h Handle, m MathMode) error {
	return l.c.Call("cublasSetMathMode", uintptr(h), uintptr(uint32(m)))
}

// GemmEx is cublasGemmEx, column-major: C = alpha·op(A)·op(B) + beta·C
// with op(A) m×k, op(B) k×n and C m×n. alpha and beta point to host
// scalars of the compute type's scalar type (float32 for Compute32F).
// A, B and C are device addresses.
func (l *Lib) GemmEx(h Handle, ta, tb Operation, m, n, k int, alpha unsafe.Pointer,
	a uintptr, at DataType, lda int, b uintptr, bt DataType, ldb int,
	beta unsafe.Pointer, c uintptr, ct DataType, ldc int, compute ComputeType, algo GemmAlgo) error {
	return l.c.Check("cublasGemmEx", l.gemm, uintptr(h), uintptr(ta), uintptr(tb),
		uintptr(m), uintptr(n), uintptr(k), uintptr(alpha),
		a, uintptr(at), uintptr(lda), b, uintptr(bt), uintptr(ldb),
		uintptr(beta), c, uintptr(ct), uintptr(ldc), uintptr(compute), uintptr(int64(algo)))
}

// DataTypeOf maps a chorus dtype to cuBLAS's (float32, float16, bfloat16
// and float64).
func DataTypeOf(dt tensor.DType) (DataType, error) {
	switch dt {
	case tensor.Float32:
		return R32F, nil
	case tensor.Float16:
		return R16F, nil
	case tensor.BFloat16:
		return R16BF, nil
	case tensor.Float64:
		return R64F, nil
	}
	return 0, fmt.Errorf("cublas: no GEMM data type for %s", dt)
}

// scalars are GEMM's alpha = 1, beta = 0 in float32 and float64, in heap
// memory that lives for the process (the library reads them during the
// call only).
var (
	one32, zero32 = new(float32), new(float32)
	one64, zero64 = new(float64), new(float64)
)

func init() { *one32, *one64 = 1, 1 }

// MatmulRowMajor computes the row-major product c[m,n] = a[m,k]·b[k,n]
// (all of dtype dt, contiguous) with float accumulation (float64 for
// float64), by the column-major identity in the package comment.
func (l *Lib) MatmulRowMajor(h Handle, m, n, k int, a, b, c uintptr, dt tensor.DType) error {
	t, err := DataTypeOf(dt)
	if err != nil {
		return err
	}
	if m < 0 || n < 0 || k < 0 || m > 1<<31-1 || n > 1<<31-1 || k > 1<<31-1 {
		return fmt.Errorf("cublas: matmul dimensions %d×%d×%d out of range", m, k, n)
	}
	if m == 0 || n == 0 {
		return nil
	}
	compute, alpha, beta := Compute32F, unsafe.Pointer(one32), unsafe.Pointer(zero32)
	if dt == tensor.Float64 {
		compute, alpha, beta = Compute64F, unsafe.Pointer(one64), unsafe.Pointer(zero64)
	}
	// Column-major view: Cᵀ (n×m, ld n) = Bᵀ (n×k, ld n) · Aᵀ (k×m, ld k).
	return l.GemmEx(h, OpN, OpN, n, m, k, alpha, b, t, max(n, 1), a, t, max(k, 1), beta, c, t, max(n, 1), compute, GemmDefault)
}

// MatmulRowMajorNT computes the row-major product c[m,n] = a[m,k]·b[n,k]ᵀ
// (b as nn.Linear stores weights, [out, in]) without transposing b in
// memory: cuBLAS reads it with op T.
func (l *Lib) MatmulRowMajorNT(h Handle, m, n, k int, a, b, c uintptr, dt tensor.DType) error {
	t, err := DataTypeOf(dt)
	if err != nil {
		return err
	}
	if m < 0 || n < 0 || k < 0 || m > 1<<31-1 || n > 1<<31-1 || k > 1<<31-1 {
		return fmt.Errorf("cublas: matmul dimensions %d×%d×%d out of range", m, k, n)
	}
	if m == 0 || n == 0 {
		return nil
	}
	compute, alpha, beta := Compute32F, unsafe.Pointer(one32), unsafe.Pointer(zero32)
	if dt == tensor.Float64 {
		compute, alpha, beta = Compute64F, unsafe.Pointer(one64), unsafe.Pointer(zero64)
	}
	// Column-major view: Cᵀ (n×m, ld n) = op_T(B) · Aᵀ (k×m, ld k), where
	// row-major b [n, k] is the column-major k×n matrix Bᵀ (ld k), so
	// op T of it is n×k.
	return l.GemmEx(h, OpT, OpN, n, m, k, alpha, b, t, max(k, 1), a, t, max(k, 1), beta, c, t, max(n, 1), compute, GemmDefault)
}

package tensor

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// ScopeGlobal is the default memory scope: ordinary device (or host) memory.
// Other scopes (for example "ipc_memory") are provided by allocators in
// higher layers; the tensor only records the name.
const ScopeGlobal = "global"

// hostAlign is the alignment of host storage, enough for any vector width
// the CPU collectives use.
const hostAlign = 64

// ErrNotHost is returned when host bytes are asked of a tensor whose storage
// is not host memory.
var ErrNotHost = errors.New("tensor: storage is not in host memory")

// DeviceBuffer is device memory owned by a backend (for example a CUDA
// allocation). The tensor package never dereferences it.
type DeviceBuffer interface {
	// Ptr is the device address of the first byte.
	Ptr() uintptr
	// Size is the usable size in bytes.
	Size() int64
}

// Storage is one contiguous allocation. Host storage keeps its bytes in
// Host; device storage keeps a backend's DeviceBuffer.
type Storage struct {
	Device Device
	Scope  string
	host   []byte
	buf    DeviceBuffer
	nbytes int64
}

// HostAllocFunc allocates host memory for storages: n zeroed bytes,
// 64-byte aligned, that stay valid as long as any slice of them is
// reachable (Go memory semantics: the garbage collector decides, as for
// make).
type HostAllocFunc func(n int64) ([]byte, error)

type hostAllocator struct {
	min   int64
	alloc HostAllocFunc
}

var (
	hostAlloc     atomic.Pointer[hostAllocator]
	hostAllocs    atomic.Int64
	hostFallbacks atomic.Int64
	hostLastError atomic.Pointer[string]
)

// SetHostAllocator makes NewHostStorage take storages of at least minBytes
// from alloc (nil: the Go heap for all); it returns a function that puts
// the previous allocator back. Worker processes install the shared tensor
// arena with it, so that peers can read large tensors directly. When alloc
// fails, the storage comes from the Go heap and the failure is counted
// (HostAllocatorStats), never silent.
func SetHostAllocator(minBytes int64, alloc HostAllocFunc) (restore func()) {
	var h *hostAllocator
	if alloc != nil {
		h = &hostAllocator{min: max(minBytes, 1), alloc: alloc}
	}
	prev := hostAlloc.Swap(h)
	return func() { hostAlloc.Store(prev) }
}

// HostAllocStats counts what the host allocator of SetHostAllocator did.
type HostAllocStats struct {
	Allocs    int64  `json:"allocs"`    // storages it allocated
	Fallbacks int64  `json:"fallbacks"` // storages that fell back to the Go heap when it failed
	LastError string `json:"last_error,omitempty"`
}

// HostAllocatorStats returns the host allocator's counters (totals since
// the process started).
func HostAllocatorStats() HostAllocStats {
	s := HostAllocStats{Allocs: hostAllocs.Load(), Fallbacks: hostFallbacks.Load()}
	if e := hostLastError.Load(); e != nil {
		s.LastError = *e
	}
	return s
}

// NewHostStorage allocates zeroed, 64-byte aligned host memory: from the
// host allocator (SetHostAllocator) when one is set and nbytes reaches its
// minimum, else from the Go heap.
func NewHostStorage(nbytes int64, scope string) (*Storage, error) {
	if nbytes < 0 {
		return nil, fmt.Errorf("tensor: negative storage size %d", nbytes)
	}
	if scope == "" {
		scope = ScopeGlobal
	}
	if h := hostAlloc.Load(); h != nil && nbytes >= h.min {
		b, err := h.alloc(nbytes)
		switch {
		case err != nil:
		case int64(len(b)) < nbytes || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%hostAlign != 0:
			err = fmt.Errorf("host allocator returned %d bytes at %p for %d (want %d-byte aligned)", len(b), unsafe.SliceData(b), nbytes, hostAlign)
		default:
			hostAllocs.Add(1)
			return &Storage{Device: CPUDevice, Scope: scope, host: b[:nbytes:nbytes], nbytes: nbytes}, nil
		}
		msg := err.Error()
		hostLastError.Store(&msg)
		hostFallbacks.Add(1)
	}
	raw := make([]byte, nbytes+hostAlign)
	off := int((hostAlign - uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%hostAlign) % hostAlign)
	return &Storage{Device: CPUDevice, Scope: scope, host: raw[off : off+int(nbytes) : off+int(nbytes)], nbytes: nbytes}, nil
}

// NewDeviceStorage wraps a backend's buffer.
func NewDeviceStorage(dev Device, scope string, buf DeviceBuffer) *Storage {
	if scope == "" {
		scope = ScopeGlobal
	}
	return &Storage{Device: dev, Scope: scope, buf: buf, nbytes: buf.Size()}
}

// Size is the storage size in bytes.
func (s *Storage) Size() int64 { return s.nbytes }

// Host returns the host bytes, or nil for device storage.
func (s *Storage) Host() []byte { return s.host }

// Buffer returns the device buffer, or nil for host storage.
func (s *Storage) Buffer() DeviceBuffer { return s.buf }

// Tensor is a dense, row-major view over a Storage.
type Tensor struct {
	dtype   DType
	shape   Shape
	storage *Storage
	offset  int64
	nbytes  int64
}

// New allocates a zeroed host tensor in the global scope.
func New(dtype DType, shape Shape) (*Tensor, error) {
	return NewScoped(dtype, shape, ScopeGlobal)
}

// NewScoped allocates a zeroed host tensor in the given memory scope.
func NewScoped(dtype DType, shape Shape, scope string) (*Tensor, error) {
	n, err := checkLayout(dtype, shape)
	if err != nil {
		return nil, err
	}
	st, err := NewHostStorage(n, scope)
	if err != nil {
		return nil, err
	}
	return &Tensor{dtype: dtype, shape: shape.Clone(), storage: st, nbytes: n}, nil
}

// MustNew is New for tests and examples with constant arguments.
func MustNew(dtype DType, shape Shape) *Tensor {
	t, err := New(dtype, shape)
	if err != nil {
		panic(err)
	}
	return t
}

// View returns a tensor of the given dtype and shape that starts offset
// bytes into s. It checks bounds and element alignment.
func View(s *Storage, offset int64, dtype DType, shape Shape) (*Tensor, error) {
	n, err := checkLayout(dtype, shape)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errors.New("tensor: view of nil storage")
	}
	if offset < 0 || offset > s.nbytes || n > s.nbytes-offset {
		return nil, fmt.Errorf("tensor: view [%d, %d) out of bounds of %d-byte storage", offset, offset+n, s.nbytes)
	}
	if offset%int64(dtype.Size()) != 0 {
		return nil, fmt.Errorf("tensor: view offset %d not aligned to %s (%d bytes)", offset, dtype, dtype.Size())
	}
	return &Tensor{dtype: dtype, shape: shape.Clone(), storage: s, offset: offset, nbytes: n}, nil
}

func checkLayout(dtype DType, shape Shape) (int64, error) {
	if !dtype.Valid() {
		return 0, fmt.Errorf("tensor: invalid dtype %v", dtype)
	}
	if err := shape.Validate(); err != nil {
		return 0, err
	}
	n, _ := shape.NumElements()
	if n > (1<<62)/int64(dtype.Size()) {
		return 0, fmt.Errorf("tensor: shape %v of %s is too large", shape, dtype)
	}
	return n * int64(dtype.Size()), nil
}

// View returns a view of t's storage at a byte offset relative to t.
func (t *Tensor) View(offset int64, dtype DType, shape Shape) (*Tensor, error) {
	return View(t.storage, t.offset+offset, dtype, shape)
}

// Reshape returns a view with the same bytes and a new shape of equal size.
func (t *Tensor) Reshape(shape Shape) (*Tensor, error) {
	n, err := shape.NumElements()
	if err != nil {
		return nil, err
	}
	if n != t.NumElements() {
		return nil, fmt.Errorf("tensor: cannot reshape %v (%d elements) to %v (%d elements)", t.shape, t.NumElements(), shape, n)
	}
	return View(t.storage, t.offset, t.dtype, shape)
}

func (t *Tensor) DType() DType { return t.dtype }

// Shape returns the shape; callers must not modify it.
func (t *Tensor) Shape() Shape      { return t.shape }
func (t *Tensor) Device() Device    { return t.storage.Device }
func (t *Tensor) Scope() string     { return t.storage.Scope }
func (t *Tensor) Storage() *Storage { return t.storage }

// Offset is the byte offset of the first element within the storage.
func (t *Tensor) Offset() int64 { return t.offset }

// NumBytes is the size of the view in bytes.
func (t *Tensor) NumBytes() int64 { return t.nbytes }

// NumElements is the number of elements of the view.
func (t *Tensor) NumElements() int64 {
	return t.nbytes / int64(t.dtype.Size())
}

// IsHost reports whether the storage is host memory.
func (t *Tensor) IsHost() bool {
	return t.storage.host != nil || (t.storage.buf == nil && t.storage.Device.Kind == CPU)
}

// Bytes returns the view's bytes in host memory, or nil for device tensors.
func (t *Tensor) Bytes() []byte {
	if t.storage.host == nil {
		return nil
	}
	return t.storage.host[t.offset : t.offset+t.nbytes : t.offset+t.nbytes]
}

// HostBytes is Bytes with an error for device tensors.
func (t *Tensor) HostBytes() ([]byte, error) {
	if !t.IsHost() {
		return nil, fmt.Errorf("%w (device %v)", ErrNotHost, t.Device())
	}
	return t.Bytes(), nil
}

// Clone returns a deep copy of a host tensor in fresh storage of the same scope.
func (t *Tensor) Clone() (*Tensor, error) {
	src, err := t.HostBytes()
	if err != nil {
		return nil, err
	}
	c, err := NewScoped(t.dtype, t.shape, t.storage.Scope)
	if err != nil {
		return nil, err
	}
	copy(c.Bytes(), src)
	return c, nil
}

// SameLayout reports whether a and b have equal dtype and shape.
func SameLayout(a, b *Tensor) bool {
	return a.dtype == b.dtype && a.shape.Equal(b.shape)
}

func (t *Tensor) String() string {
	return fmt.Sprintf("Tensor(%s, %v, %v, scope=%s)", t.dtype, t.shape, t.Device(), t.Scope())
}

// Elem is the set of Go types that back dtypes, used by Data.
type Elem interface {
	bool | int8 | int16 | int32 | int64 | uint8 | F16 | BF16 | float32 | float64
}

// DTypeOf returns the dtype whose elements have Go type T.
func DTypeOf[T Elem]() DType {
	var z T
	switch any(z).(type) {
	case bool:
		return Bool
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case F16:
		return Float16
	case BF16:
		return BFloat16
	case float32:
		return Float32
	case float64:
		return Float64
	}
	return Invalid
}

// Data returns the elements of a host tensor as a typed slice aliasing its
// storage. The dtype must match T exactly.
func Data[T Elem](t *Tensor) ([]T, error) {
	want := DTypeOf[T]()
	if t.dtype != want {
		return nil, fmt.Errorf("tensor: %s data requested of a %s tensor", want, t.dtype)
	}
	b, err := t.HostBytes()
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return []T{}, nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), t.NumElements()), nil
}

// FromSlice makes a 1-D host tensor holding a copy of data.
func FromSlice[T Elem](data []T) *Tensor {
	t := MustNew(DTypeOf[T](), Shape{int64(len(data))})
	d, _ := Data[T](t)
	copy(d, data)
	return t
}

package tensor_test

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/chorus-rt/chorus/tensor"
)

func TestNewHostStorage(t *testing.T) {
	for n := int64(0); n <= 300; n++ {
		s, err := tensor.NewHostStorage(n, "")
		if err != nil {
			t.Fatal(err)
		}
		h := s.Host()
		if h == nil || int64(len(h)) != n || int64(cap(h)) != n || s.Size() != n {
			t.Fatalf("size %d: len %d cap %d Size %d", n, len(h), cap(h), s.Size())
		}
		if n > 0 {
			if p := uintptr(unsafe.Pointer(&h[0])); p%64 != 0 {
				t.Fatalf("size %d: host memory at %#x is not 64-byte aligned", n, p)
			}
		}
		for i, b := range h {
			if b != 0 {
				t.Fatalf("size %d: byte %d = %#x, want zeroed memory", n, i, b)
			}
		}
		if s.Scope != tensor.ScopeGlobal || s.Device != tensor.CPUDevice || s.Buffer() != nil {
			t.Fatalf("size %d: scope %q device %v buffer %v", n, s.Scope, s.Device, s.Buffer())
		}
	}
	if s, _ := tensor.NewHostStorage(8, "ipc_memory"); s.Scope != "ipc_memory" {
		t.Errorf("scope %q", s.Scope)
	}
	if _, err := tensor.NewHostStorage(-1, ""); err == nil {
		t.Error("negative size accepted")
	}
	// Every tensor's data is aligned, whatever its dtype.
	for _, dt := range tensor.DTypes {
		x := tensor.MustNew(dt, tensor.Shape{3})
		if p := uintptr(unsafe.Pointer(&x.Bytes()[0])); p%64 != 0 {
			t.Errorf("%s tensor at %#x", dt, p)
		}
	}
}

func TestNew(t *testing.T) {
	x, err := tensor.New(tensor.Float32, tensor.Shape{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if x.DType() != tensor.Float32 || !x.Shape().Equal(tensor.Shape{2, 3}) || x.NumElements() != 6 || x.NumBytes() != 24 ||
		x.Offset() != 0 || x.Device() != tensor.CPUDevice || x.Scope() != tensor.ScopeGlobal || !x.IsHost() {
		t.Errorf("New: %v elements %d bytes %d", x, x.NumElements(), x.NumBytes())
	}
	if got := x.String(); got != "Tensor(float32, (2, 3), cpu, scope=global)" {
		t.Errorf("String() = %q", got)
	}
	shape := tensor.Shape{4}
	y := tensor.MustNew(tensor.Int8, shape)
	shape[0] = 9
	if y.Shape()[0] != 4 {
		t.Error("New keeps the caller's shape slice")
	}
	bad := []struct {
		dt    tensor.DType
		shape tensor.Shape
	}{
		{tensor.Invalid, tensor.Shape{1}},
		{tensor.DType(99), tensor.Shape{1}},
		{tensor.Float32, tensor.Shape{-1}},
		{tensor.Float32, tensor.Shape{1 << 61}},          // 2^63 bytes
		{tensor.Float64, tensor.Shape{1 << 40, 1 << 40}}, // element count overflows
		{tensor.Float32, make(tensor.Shape, tensor.MaxDims+1)},
	}
	for _, b := range bad {
		if _, err := tensor.New(b.dt, b.shape); err == nil {
			t.Errorf("New(%v, %v) succeeded", b.dt, b.shape)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("MustNew(invalid) did not panic")
			}
		}()
		tensor.MustNew(tensor.Invalid, nil)
	}()
	sc, err := tensor.NewScoped(tensor.Int32, nil, "ipc_memory")
	if err != nil || sc.Scope() != "ipc_memory" || sc.NumElements() != 1 {
		t.Errorf("NewScoped: %v, %v", sc, err)
	}
}

func TestView(t *testing.T) {
	st, err := tensor.NewHostStorage(64, "")
	if err != nil {
		t.Fatal(err)
	}
	v, err := tensor.View(st, 16, tensor.Float32, tensor.Shape{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	if v.Offset() != 16 || v.NumBytes() != 16 || v.Storage() != st {
		t.Errorf("view: offset %d bytes %d", v.Offset(), v.NumBytes())
	}
	if &v.Bytes()[0] != &st.Host()[16] || cap(v.Bytes()) != 16 {
		t.Error("view bytes do not alias the storage, or can grow past the view")
	}
	// Relative views.
	w, err := v.View(8, tensor.Int16, tensor.Shape{4})
	if err != nil || w.Offset() != 24 {
		t.Errorf("v.View(8) = %v offset %d, %v", w, w.Offset(), err)
	}
	// The whole storage, and an empty view at its end.
	if _, err := tensor.View(st, 0, tensor.Uint8, tensor.Shape{64}); err != nil {
		t.Errorf("full view: %v", err)
	}
	if _, err := tensor.View(st, 64, tensor.Float64, tensor.Shape{0}); err != nil {
		t.Errorf("empty view at the end: %v", err)
	}
	bad := []struct {
		name   string
		offset int64
		dt     tensor.DType
		shape  tensor.Shape
		want   string
	}{
		{"past the end", 56, tensor.Float64, tensor.Shape{2}, "out of bounds"},
		{"too large", 0, tensor.Uint8, tensor.Shape{65}, "out of bounds"},
		{"negative offset", -8, tensor.Float64, tensor.Shape{1}, "out of bounds"},
		{"offset beyond", 72, tensor.Float64, tensor.Shape{0}, "out of bounds"},
		{"huge offset", 1 << 62, tensor.Uint8, tensor.Shape{1}, "out of bounds"},
		{"misaligned float32", 2, tensor.Float32, tensor.Shape{1}, "not aligned"},
		{"misaligned float64", 4, tensor.Float64, tensor.Shape{1}, "not aligned"},
		{"misaligned float16", 1, tensor.Float16, tensor.Shape{1}, "not aligned"},
		{"invalid dtype", 0, tensor.Invalid, tensor.Shape{1}, "invalid dtype"},
		{"negative dim", 0, tensor.Uint8, tensor.Shape{-1}, "negative"},
	}
	for _, b := range bad {
		if _, err := tensor.View(st, b.offset, b.dt, b.shape); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: View = %v, want %q", b.name, err, b.want)
		}
	}
	// Tensor.View checks bounds relative to the storage, not the tensor.
	if _, err := v.View(48, tensor.Float32, tensor.Shape{1}); err == nil {
		t.Error("relative view past the storage accepted")
	}
	if _, err := v.View(-16, tensor.Float32, tensor.Shape{1}); err != nil {
		t.Errorf("relative view back to the start: %v", err)
	}
	if _, err := v.View(-20, tensor.Float32, tensor.Shape{1}); err == nil {
		t.Error("relative view before the storage accepted")
	}
	if _, err := tensor.View(nil, 0, tensor.Float32, tensor.Shape{1}); err == nil {
		t.Error("view of nil storage accepted")
	}
	// Int8 views may start anywhere.
	if _, err := tensor.View(st, 63, tensor.Int8, tensor.Shape{1}); err != nil {
		t.Errorf("int8 view at 63: %v", err)
	}
}

func TestReshape(t *testing.T) {
	x := tensor.FromSlice([]int32{1, 2, 3, 4, 5, 6})
	y, err := x.Reshape(tensor.Shape{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if !y.Shape().Equal(tensor.Shape{2, 3}) || y.Storage() != x.Storage() || y.Offset() != x.Offset() {
		t.Errorf("Reshape: %v", y)
	}
	d, _ := tensor.Data[int32](y)
	d[5] = 60
	if xd, _ := tensor.Data[int32](x); xd[5] != 60 {
		t.Error("Reshape does not share storage")
	}
	if _, err := x.Reshape(nil); err == nil {
		t.Error("Reshape of 6 elements to a scalar succeeded")
	}
	for _, s := range []tensor.Shape{{4}, {2, 4}, {-2, -3}, {7}} {
		if _, err := x.Reshape(s); err == nil {
			t.Errorf("Reshape to %v succeeded", s)
		}
	}
	// A view keeps its offset through Reshape.
	v, _ := x.View(8, tensor.Int32, tensor.Shape{4})
	r, err := v.Reshape(tensor.Shape{2, 2})
	if err != nil || r.Offset() != 8 {
		t.Fatalf("Reshape of a view: %v offset %d", err, r.Offset())
	}
	if rd, _ := tensor.Data[int32](r); rd[0] != 3 || rd[3] != 60 {
		t.Errorf("Reshape of a view reads %v", rd)
	}
	s, err := tensor.MustNew(tensor.Float32, tensor.Shape{1, 1}).Reshape(nil)
	if err != nil || len(s.Shape()) != 0 {
		t.Errorf("Reshape to scalar: %v, %v", s, err)
	}
}

func TestClone(t *testing.T) {
	st, _ := tensor.NewHostStorage(32, "ipc_memory")
	for i := range st.Host() {
		st.Host()[i] = byte(i)
	}
	v, _ := tensor.View(st, 8, tensor.Int16, tensor.Shape{2, 2})
	c, err := v.Clone()
	if err != nil {
		t.Fatal(err)
	}
	if c.Storage() == st || c.Offset() != 0 || c.Storage().Size() != 8 || c.Scope() != "ipc_memory" || !tensor.SameLayout(c, v) {
		t.Errorf("Clone: %v offset %d storage size %d", c, c.Offset(), c.Storage().Size())
	}
	if err := tensor.Equal(c, v); err != nil {
		t.Error(err)
	}
	c.Bytes()[0] = 0xff
	if st.Host()[8] != 8 {
		t.Error("Clone aliases the original")
	}
	if _, err := deviceTensor(t, tensor.Float32, tensor.Shape{2}).Clone(); !errors.Is(err, tensor.ErrNotHost) {
		t.Errorf("Clone of a device tensor = %v", err)
	}
}

func TestData(t *testing.T) {
	x := tensor.MustNew(tensor.Float32, tensor.Shape{3})
	if _, err := tensor.Data[float64](x); err == nil || !strings.Contains(err.Error(), "float64 data requested of a float32 tensor") {
		t.Errorf("Data[float64] of float32 = %v", err)
	}
	if _, err := tensor.Data[int32](x); err == nil {
		t.Error("Data[int32] of float32 succeeded")
	}
	if _, err := tensor.Data[tensor.BF16](tensor.MustNew(tensor.Float16, tensor.Shape{1})); err == nil {
		t.Error("Data[BF16] of float16 succeeded")
	}
	if _, err := tensor.Data[uint8](tensor.MustNew(tensor.Bool, tensor.Shape{1})); err == nil {
		t.Error("Data[uint8] of bool succeeded")
	}
	if _, err := tensor.Data[float32](deviceTensor(t, tensor.Float32, tensor.Shape{2})); !errors.Is(err, tensor.ErrNotHost) {
		t.Errorf("Data of a device tensor = %v", err)
	}
	e, err := tensor.Data[int64](tensor.MustNew(tensor.Int64, tensor.Shape{0}))
	if err != nil || e == nil || len(e) != 0 {
		t.Errorf("Data of an empty tensor = %v, %v", e, err)
	}
	// Data aliases the (view's) storage.
	st, _ := tensor.NewHostStorage(16, "")
	v, _ := tensor.View(st, 8, tensor.Int32, tensor.Shape{2})
	d, _ := tensor.Data[int32](v)
	d[1] = -1
	if st.Host()[12] != 0xff || st.Host()[7] != 0 {
		t.Error("Data does not alias the view's bytes")
	}
	// DTypeOf and FromSlice for every element type.
	checks := []struct {
		got  tensor.DType
		want tensor.DType
	}{
		{tensor.DTypeOf[bool](), tensor.Bool}, {tensor.DTypeOf[int8](), tensor.Int8},
		{tensor.DTypeOf[int16](), tensor.Int16}, {tensor.DTypeOf[int32](), tensor.Int32},
		{tensor.DTypeOf[int64](), tensor.Int64}, {tensor.DTypeOf[uint8](), tensor.Uint8},
		{tensor.DTypeOf[tensor.F16](), tensor.Float16}, {tensor.DTypeOf[tensor.BF16](), tensor.BFloat16},
		{tensor.DTypeOf[float32](), tensor.Float32}, {tensor.DTypeOf[float64](), tensor.Float64},
		{tensor.FromSlice([]bool{true}).DType(), tensor.Bool},
		{tensor.FromSlice([]tensor.BF16{1}).DType(), tensor.BFloat16},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("got %v, want %v", c.got, c.want)
		}
	}
	f := tensor.FromSlice([]float64{1.5, -2})
	if got := values(t, f); !sameValues(got, []float64{1.5, -2}) || !f.Shape().Equal(tensor.Shape{2}) {
		t.Errorf("FromSlice = %v", got)
	}
	if z := tensor.FromSlice([]int8{}); z.NumElements() != 0 {
		t.Errorf("FromSlice(empty) has %d elements", z.NumElements())
	}
}

func TestDeviceTensor(t *testing.T) {
	d := deviceTensor(t, tensor.Float32, tensor.Shape{4})
	if d.IsHost() || d.Bytes() != nil || d.Device() != tensor.CUDADevice(0) || d.Storage().Buffer() == nil || d.Storage().Host() != nil {
		t.Errorf("device tensor: %v", d)
	}
	if _, err := d.HostBytes(); !errors.Is(err, tensor.ErrNotHost) || !strings.Contains(err.Error(), "cuda:0") {
		t.Errorf("HostBytes = %v", err)
	}
	st := tensor.NewDeviceStorage(tensor.CUDADevice(1), "", fakeBuffer{64})
	if st.Size() != 64 || st.Scope != tensor.ScopeGlobal {
		t.Errorf("device storage: size %d scope %q", st.Size(), st.Scope)
	}
	if _, err := tensor.View(st, 0, tensor.Float32, tensor.Shape{17}); err == nil {
		t.Error("device view past the buffer accepted")
	}
}

// The host allocator serves storages from its minimum on; a failing or
// misbehaving allocator falls back to the Go heap and is counted.
func TestSetHostAllocator(t *testing.T) {
	pool := make([]byte, 1<<16+64)
	off := int((64 - uintptr(unsafe.Pointer(&pool[0]))%64) % 64)
	aligned := pool[off:]
	var calls int
	var fail error
	restore := tensor.SetHostAllocator(1024, func(n int64) ([]byte, error) {
		calls++
		if fail != nil {
			return nil, fail
		}
		return aligned[:min(n, int64(len(aligned)))], nil
	})
	defer restore()
	before := tensor.HostAllocatorStats()
	for _, tc := range []struct {
		name      string
		count     int64
		fail      error
		fromPool  bool
		fallbacks int64
	}{
		{"below the minimum", 255, nil, false, 0},
		{"at the minimum", 256, nil, true, 0},
		{"allocator fails", 1000, errors.New("no room"), false, 1},
		{"allocator returns too little", 1 << 15, nil, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fail = tc.fail
			if tc.name == "allocator returns too little" {
				aligned = aligned[:4096]
			}
			fb := tensor.HostAllocatorStats().Fallbacks
			x, err := tensor.New(tensor.Float32, tensor.Shape{tc.count})
			if err != nil {
				t.Fatal(err)
			}
			inPool := &x.Bytes()[0] == &aligned[0]
			if inPool != tc.fromPool {
				t.Errorf("storage from the allocator: %v, want %v", inPool, tc.fromPool)
			}
			if got := tensor.HostAllocatorStats().Fallbacks - fb; got != tc.fallbacks {
				t.Errorf("%d fallbacks counted, want %d", got, tc.fallbacks)
			}
			if tc.fallbacks > 0 && tensor.HostAllocatorStats().LastError == "" {
				t.Error("fallback without its error")
			}
		})
	}
	if got := tensor.HostAllocatorStats().Allocs - before.Allocs; got != 1 {
		t.Errorf("%d allocations counted, want 1", got)
	}
	if calls != 3 {
		t.Errorf("allocator called %d times, want 3", calls)
	}
	restore()
	if x := tensor.MustNew(tensor.Float32, tensor.Shape{1000}); &x.Bytes()[0] == &aligned[0] {
		t.Error("storage from the allocator after restore")
	}
}

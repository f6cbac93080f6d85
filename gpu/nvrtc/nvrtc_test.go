package nvrtc_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/gpu/nvrtc/nvrtctest"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
)

const addOne = `
extern "C" __global__ void add_one(float* x, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) x[i] += 1.0f;
}
`

func load(t *testing.T) *nvrtc.Compiler { return nvrtctest.Load(t) }

func TestCompileErrorHasLog(t *testing.T) {
	c := load(t)
	_, err := c.Compile("broken.cu", "extern \"C\" __global__ void k() { this is not C++; }", "sm_90")
	var ce *nvrtc.CompileError
	if !errors.As(err, &ce) || !strings.Contains(ce.Log, "error") {
		t.Fatalf("compile of junk: %v", err)
	}
}

// TestPTX: the PTX of a virtual architecture names the kernel and reads
// its parameters from the parameter space; a junk source is a
// CompileError with the log, as for cubins.
func TestPTX(t *testing.T) {
	c := load(t)
	ptx, err := c.PTX("add_one.cu", addOne, "compute_90")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".entry add_one", "ld.param"} {
		if !strings.Contains(ptx, want) {
			t.Errorf("PTX lacks %q:\n%s", want, ptx)
		}
	}
	if strings.ContainsRune(ptx, 0) {
		t.Error("PTX keeps its terminating NUL")
	}
	_, err = c.PTX("broken.cu", "extern \"C\" __global__ void k() { this is not C++; }", "compute_90")
	var ce *nvrtc.CompileError
	if !errors.As(err, &ce) || !strings.Contains(ce.Log, "error") {
		t.Fatalf("PTX of junk: %v", err)
	}
}

// TestCompileLoadLaunch compiles a kernel for the device's architecture,
// caches it, loads it with the driver and runs it.
func TestCompileLoadLaunch(t *testing.T) {
	c := load(t)
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(t, "no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		gputest.Skipf(t, "cuInit: %v", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, _ := d.DeviceGet(0)
	major, _ := d.DeviceAttribute(dev, cuda.AttrComputeCapabilityMajor)
	minor, _ := d.DeviceAttribute(dev, cuda.AttrComputeCapabilityMinor)
	arch := fmt.Sprintf("sm_%d%d", major, minor)
	t.Setenv("CHORUS_KERNEL_CACHE", t.TempDir())
	cubin, hit, err := c.CompileCached("add_one.cu", addOne, arch)
	if err != nil || hit {
		t.Fatalf("first CompileCached: hit=%v err=%v", hit, err)
	}
	again, hit, err := c.CompileCached("add_one.cu", addOne, arch)
	if err != nil || !hit || string(again) != string(cubin) {
		t.Fatalf("second CompileCached: hit=%v err=%v", hit, err)
	}
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer d.PrimaryCtxRelease(dev)
	if err := d.SetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := d.ModuleLoadData(cubin)
	if err != nil {
		t.Fatal(err)
	}
	defer d.ModuleUnload(mod)
	fn, err := d.ModuleGetFunction(mod, "add_one")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(i)
	}
	bytes := unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), 4*n)
	p, err := d.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(p)
	if err := d.MemcpyHtoD(p, bytes); err != nil {
		t.Fatal(err)
	}
	arg0, arg1 := p, int32(n)
	params := []unsafe.Pointer{unsafe.Pointer(&arg0), unsafe.Pointer(&arg1)}
	if err := d.LaunchKernel(fn, [3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, 0, params); err != nil {
		t.Fatal(err)
	}
	if err := d.CtxSynchronize(); err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyDtoH(bytes, p); err != nil {
		t.Fatal(err)
	}
	for i, v := range host {
		if v != float32(i)+1 {
			t.Fatalf("x[%d] = %v, want %v", i, v, float32(i)+1)
		}
	}
	mj, mn := c.Version()
	t.Logf("NVRTC %d.%d compiled add_one for %s (%d-byte cubin), launched, correct", mj, mn, arch, len(cubin))
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }

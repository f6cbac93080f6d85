package cuda_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
)

const envIPCChild = "CHORUS_CUDA_IPC_CHILD"

func TestMain(m *testing.M) {
	if h := os.Getenv(envIPCChild); h != "" {
		os.Exit(ipcChild(h))
	}
	os.Exit(m.Run())
}

// setup loads the driver and binds device 0's primary context to this
// goroutine's OS thread, or skips the test saying why.
func setup(t *testing.T) (*cuda.Driver, cuda.Context) {
	t.Helper()
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(t, "no GPU here: %v", err)
	}
	if err := d.Init(); err != nil {
		gputest.Skipf(t, "cuInit failed: %v", err)
	}
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	dev, err := d.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.PrimaryCtxRelease(dev) })
	if err := d.SetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	return d, ctx
}

func TestLoadWithoutDriverSaysSo(t *testing.T) {
	_, err := cuda.Load()
	if err != nil && !errors.Is(err, cuda.ErrNotLoaded) {
		t.Fatalf("Load: %v, want ErrNotLoaded", err)
	}
}

func TestDeviceQueries(t *testing.T) {
	d, _ := setup(t)
	n, err := d.DeviceCount()
	if err != nil || n < 1 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	v, err := d.DriverVersion()
	if err != nil || v < 12000 {
		t.Errorf("DriverVersion = %d, %v", v, err)
	}
	for i := range n {
		dev, _ := d.DeviceGet(i)
		name, err := d.DeviceName(dev)
		if err != nil || name == "" {
			t.Errorf("DeviceName(%d) = %q, %v", i, name, err)
		}
		major, _ := d.DeviceAttribute(dev, cuda.AttrComputeCapabilityMajor)
		minor, _ := d.DeviceAttribute(dev, cuda.AttrComputeCapabilityMinor)
		sms, _ := d.DeviceAttribute(dev, cuda.AttrMultiprocessorCount)
		mem, _ := d.DeviceTotalMem(dev)
		t.Logf("device %d: %s, sm_%d%d, %d SMs, %d MiB", i, name, major, minor, sms, mem>>20)
		if major < 7 || sms < 1 || mem < 1<<30 {
			t.Errorf("implausible device %d: sm_%d%d, %d SMs, %d bytes", i, major, minor, sms, mem)
		}
	}
}

func TestMemoryRoundTrip(t *testing.T) {
	d, _ := setup(t)
	const n = 1 << 20
	a, err := d.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(a)
	b, err := d.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(b)
	if err := d.MemsetD8(a, 0x5A, n); err != nil {
		t.Fatal(err)
	}
	host := make([]byte, n)
	if err := d.MemcpyDtoH(host, a); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(host, bytes.Repeat([]byte{0x5A}, n)) {
		t.Fatal("memset pattern did not come back")
	}
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	s, err := d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer d.StreamDestroy(s)
	e0, _ := d.EventCreate(0)
	e1, _ := d.EventCreate(0)
	defer d.EventDestroy(e0)
	defer d.EventDestroy(e1)
	if err := d.EventRecord(e0, s); err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyHtoDAsync(a, src, s); err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyDtoDAsync(b, a, n, s); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, n)
	if err := d.MemcpyDtoHAsync(back, b, s); err != nil {
		t.Fatal(err)
	}
	if err := d.EventRecord(e1, s); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, src) {
		t.Fatal("HtoD -> DtoD -> DtoH did not round-trip")
	}
	if ms, err := d.EventElapsed(e0, e1); err != nil || ms <= 0 {
		t.Errorf("EventElapsed = %v, %v", ms, err)
	}
	free, total, err := d.MemGetInfo()
	if err != nil || free <= 0 || free > total {
		t.Errorf("MemGetInfo = %d, %d, %v", free, total, err)
	}
}

func TestErrorsNameTheCall(t *testing.T) {
	d, _ := setup(t)
	err := d.MemcpyDtoH(make([]byte, 16), cuda.DevicePtr(8))
	var ce *cuda.Error
	if !errors.As(err, &ce) || ce.Func != "cuMemcpyDtoH_v2" || ce.Name == "" || ce.Name == "CUDA_ERROR_UNKNOWN" {
		t.Fatalf("copy from a bogus pointer: %v", err)
	}
	t.Logf("bogus copy: %v", err)
	if _, err := d.ModuleLoadData([]byte("not a cubin\x00")); err == nil {
		t.Error("ModuleLoadData of junk succeeded")
	}
}

// TestIPCAcrossProcesses: the parent fills an allocation and sends its IPC
// handle to a child process, which maps it, checks it and writes back.
func TestIPCAcrossProcesses(t *testing.T) {
	d, _ := setup(t)
	const n = 4096
	p, err := d.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(p)
	if err := d.MemsetD8(p, 0x11, n); err != nil {
		t.Fatal(err)
	}
	h, err := d.IpcGetMemHandle(p)
	if err != nil {
		t.Fatal(err)
	}
	if h == (cuda.IpcMemHandle{}) {
		t.Fatal("IPC handle is all zeros")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envIPCChild+"="+hex.EncodeToString(h[:]))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	back := make([]byte, n)
	if err := d.MemcpyDtoH(back, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, bytes.Repeat([]byte{0x22}, n)) {
		t.Fatalf("the child's write is not visible (first bytes %x)", back[:8])
	}
}

func ipcChild(hexHandle string) int {
	fail := func(err error) int { fmt.Println("child:", err); return 1 }
	raw, err := hex.DecodeString(hexHandle)
	if err != nil || len(raw) != 64 {
		return fail(fmt.Errorf("bad handle %q", hexHandle))
	}
	var h cuda.IpcMemHandle
	copy(h[:], raw)
	runtime.LockOSThread()
	d, err := cuda.Load()
	if err != nil {
		return fail(err)
	}
	if err := d.Init(); err != nil {
		return fail(err)
	}
	dev, _ := d.DeviceGet(0)
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		return fail(err)
	}
	if err := d.SetCurrent(ctx); err != nil {
		return fail(err)
	}
	p, err := d.IpcOpenMemHandle(h, cuda.IpcLazyEnablePeerAccess)
	if err != nil {
		return fail(err)
	}
	buf := make([]byte, 4096)
	if err := d.MemcpyDtoH(buf, p); err != nil {
		return fail(err)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte{0x11}, len(buf))) {
		return fail(fmt.Errorf("mapped memory holds %x..., want 11", buf[:8]))
	}
	if err := d.MemsetD8(p, 0x22, int64(len(buf))); err != nil {
		return fail(err)
	}
	if err := d.CtxSynchronize(); err != nil {
		return fail(err)
	}
	if err := d.IpcCloseMemHandle(p); err != nil {
		return fail(err)
	}
	return 0
}

// TestGraphCapture records a memset and a copy on a non-blocking stream,
// checks that nothing ran during the capture, then replays the graph
// with a different source each time.
func TestGraphCapture(t *testing.T) {
	d, _ := setup(t)
	s, err := d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer d.StreamDestroy(s)
	const n = 1 << 16
	src, err := d.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(src)
	dst, err := d.MemAlloc(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(dst)
	if err := d.MemsetD8(dst, 0xEE, 2*n); err != nil {
		t.Fatal(err)
	}
	if st, err := d.StreamIsCapturing(s); err != nil || st != cuda.CaptureNone {
		t.Fatalf("before capture: state %d, %v", st, err)
	}
	if err := d.StreamBeginCapture(s, cuda.CaptureModeRelaxed); err != nil {
		t.Fatal(err)
	}
	if st, err := d.StreamIsCapturing(s); err != nil || st != cuda.CaptureActive {
		t.Fatalf("during capture: state %d, %v", st, err)
	}
	// dst[0:n] = src; dst[n:2n] = 7.
	if err := d.MemcpyDtoDAsync(dst, src, n, s); err != nil {
		t.Fatal(err)
	}
	if err := d.MemsetD8Async(dst+n, 7, n, s); err != nil {
		t.Fatal(err)
	}
	g, err := d.StreamEndCapture(s)
	if err != nil {
		t.Fatal(err)
	}
	defer d.GraphDestroy(g)
	got := make([]byte, 2*n)
	if err := d.MemcpyDtoH(got, dst); err != nil {
		t.Fatal(err)
	}
	if got[0] != 0xEE || got[2*n-1] != 0xEE {
		t.Fatalf("captured work ran during capture: %#x %#x", got[0], got[2*n-1])
	}
	e, err := d.GraphInstantiate(g)
	if err != nil {
		t.Fatal(err)
	}
	defer d.GraphExecDestroy(e)
	for it := range 5 {
		if err := d.MemsetD8Async(src, byte(it+1), n, s); err != nil {
			t.Fatal(err)
		}
		if err := d.GraphLaunch(e, s); err != nil {
			t.Fatal(err)
		}
		if err := d.StreamSynchronize(s); err != nil {
			t.Fatal(err)
		}
		if err := d.MemcpyDtoH(got, dst); err != nil {
			t.Fatal(err)
		}
		for i, b := range got {
			want := byte(it + 1)
			if i >= n {
				want = 7
			}
			if b != want {
				t.Fatalf("replay %d: byte %d is %d, want %d", it, i, b, want)
			}
		}
	}
	// Synchronizing a capturing stream is refused and spoils the capture.
	if err := d.StreamBeginCapture(s, cuda.CaptureModeRelaxed); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamSynchronize(s); err == nil {
		t.Error("StreamSynchronize during capture succeeded")
	}
	if _, err := d.StreamEndCapture(s); err == nil {
		t.Error("EndCapture of an invalidated capture succeeded")
	}
}

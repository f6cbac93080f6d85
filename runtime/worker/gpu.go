package worker

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/tensor"
)

// DeviceOpener opens the GPU a worker is bound to.
type DeviceOpener func(tensor.Device) (device.Device, error)

// EnvFakeGPU, set to "1" in a controller's environment or in a process
// session's ProcessOptions.Env, binds its workers to host-memory fake
// GPUs (tests and CI without a GPU): the session constructor decodes it
// into Options.FakeGPU (process workers) or Options.OpenDevice
// (threaded ones).
const EnvFakeGPU = "CHORUS_FAKE_GPU"

// OpenCUDA opens a real GPU through the CUDA driver.
func OpenCUDA(d tensor.Device) (device.Device, error) {
	drv, err := cuda.Load()
	if err != nil {
		return nil, err
	}
	if err := drv.Init(); err != nil {
		return nil, err
	}
	return device.OpenCUDA(drv, d.ID)
}

// OpenFake opens a 1 GiB fake GPU in host memory.
func OpenFake(d tensor.Device) (device.Device, error) { return device.NewFake(d.ID, 1<<30), nil }

// openDevice binds the worker's GPU, if its device is one.
func (w *Worker) openDevice(open DeviceOpener) error {
	if w.cfg.Device.Kind != tensor.CUDA {
		return nil
	}
	if open == nil {
		open = OpenCUDA
	}
	dev, err := open(w.cfg.Device)
	if err != nil {
		return fmt.Errorf("worker %d: open %v: %w", w.cfg.ID, w.cfg.Device, err)
	}
	w.dev, w.pool = dev, device.NewPool(dev)
	return nil
}

func (w *Worker) closeDevice() {
	if w.dev == nil {
		return
	}
	w.pool.Close()
	w.dev.Close()
	w.dev, w.pool = nil, nil
}

// allocDevice makes a zeroed tensor on the worker's GPU. The memory goes
// back to the worker's pool once the tensor is unreachable (registers
// dropped, views gone).
func (w *Worker) allocDevice(dt tensor.DType, shape tensor.Shape, dev tensor.Device, scope string) (*tensor.Tensor, error) {
	if w.dev == nil || dev != w.cfg.Device {
		return nil, fmt.Errorf("%w: %v (worker %d is bound to %v)", ErrNoDevice, dev, w.cfg.ID, w.cfg.Device)
	}
	if c, ok := w.dev.(device.Capturer); ok && c.Capturing() {
		// A graph keeps using the addresses it recorded; memory allocated
		// now could be recycled under it once the tensor is dropped.
		return nil, fmt.Errorf("worker %d: allocate %s%v: %w (allocate before Capture)", w.cfg.ID, dt, shape, device.ErrCapturing)
	}
	if scope == ScopeIPC {
		return w.allocIPC(dt, shape)
	}
	if scope != tensor.ScopeGlobal {
		return nil, fmt.Errorf("worker %d: no allocator for memory scope %q on %v", w.cfg.ID, scope, dev)
	}
	n, err := shape.NumElements()
	if err != nil {
		return nil, err
	}
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor: invalid dtype %v", dt)
	}
	buf, err := w.pool.Get(max(1, n*int64(dt.Size())))
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", w.cfg.ID, err)
	}
	if err := w.dev.Memset(buf, 0, 0, buf.Size()); err != nil {
		w.pool.Put(buf)
		return nil, err
	}
	st := tensor.NewDeviceStorage(dev, scope, buf)
	t, err := tensor.View(st, 0, dt, shape)
	if err != nil {
		w.pool.Put(buf)
		return nil, err
	}
	pool := w.pool
	runtime.AddCleanup(st, func(b *device.Buffer) { pool.Put(b) }, buf)
	return t, nil
}

// deviceBuffer returns the worker-owned buffer behind a GPU tensor.
func (w *Worker) deviceBuffer(t *tensor.Tensor) (*device.Buffer, error) {
	b, ok := t.Storage().Buffer().(*device.Buffer)
	if !ok || w.dev == nil || b.Ordinal() != w.dev.Ordinal() {
		return nil, fmt.Errorf("worker %d: tensor on %v is not in this worker's device memory", w.cfg.ID, t.Device())
	}
	return b, nil
}

// toHost copies a GPU tensor into a new host tensor.
func (w *Worker) toHost(t *tensor.Tensor) (*tensor.Tensor, error) {
	b, err := w.deviceBuffer(t)
	if err != nil {
		return nil, err
	}
	h, err := tensor.New(t.DType(), t.Shape())
	if err != nil {
		return nil, err
	}
	g := w.gpuBegin()
	err = w.dev.CopyOut(h.Bytes(), b, t.Offset())
	w.gpuEnd(g, "copy D2H", t.NumBytes())
	if err != nil {
		return nil, err
	}
	return h, nil
}

// fromHost copies a host tensor into a GPU tensor of the same layout.
func (w *Worker) fromHost(dst, src *tensor.Tensor) error {
	if !tensor.SameLayout(dst, src) {
		return fmt.Errorf("layout mismatch: destination %s%v, source %s%v", dst.DType(), dst.Shape(), src.DType(), src.Shape())
	}
	b, err := w.deviceBuffer(dst)
	if err != nil {
		return err
	}
	g := w.gpuBegin()
	err = w.dev.CopyIn(b, dst.Offset(), src.Bytes())
	w.gpuEnd(g, "copy H2D", src.NumBytes())
	return err
}

// Capture records the device work fn queues on this worker's GPU (copies,
// custom all-reduces, kernels) into a graph instead of running it, and
// returns the graph; Launch replays it, in order with the worker's other
// device work. Host work in fn (argument checks, the custom all-reduce's
// descriptor exchange) runs once, now, not at each replay: every worker
// must capture the same sequence and replay its graph the same number of
// times, in the same order relative to its other collectives.
//
// During fn, calls that wait for the device or read it back
// (SyncDevice, ToHost, FromHost) and allocations fail with
// device.ErrCapturing: allocate every tensor before capturing, and keep
// every tensor the graph uses alive while the graph is used (the graph
// holds addresses, not tensors). If fn fails, the capture is discarded
// and its error returned.
func (w *Worker) Capture(fn func() error) (device.Graph, error) {
	c, ok := w.dev.(device.Capturer)
	if !ok {
		return nil, fmt.Errorf("worker %d: %w: graph capture needs a GPU", w.cfg.ID, ErrNoDevice)
	}
	if err := c.BeginCapture(); err != nil {
		return nil, fmt.Errorf("worker %d: %w", w.cfg.ID, err)
	}
	ended := false
	defer func() {
		// fn panicked: end the capture, or every later sync of this
		// worker would fail with ErrCapturing.
		if !ended {
			if g, _ := c.EndCapture(); g != nil {
				g.Close()
			}
		}
	}()
	ferr := fn()
	g, err := c.EndCapture()
	ended = true
	if ferr != nil {
		if g != nil {
			g.Close()
		}
		return nil, ferr
	}
	if err != nil {
		return nil, fmt.Errorf("worker %d: end capture: %w", w.cfg.ID, err)
	}
	w.graphs.Add(1)
	st := &graphState{g: g, w: w}
	out := &capturedGraph{st}
	// A graph dropped without Close is closed when collected.
	runtime.AddCleanup(out, func(st *graphState) { st.close() }, st)
	return out, nil
}

// capturedGraph counts the worker's live graphs: InitCCL refuses to
// replace the communicators and IPC memory a live graph may use.
type capturedGraph struct{ *graphState }

type graphState struct {
	g    device.Graph
	w    *Worker
	once sync.Once
	err  error
}

func (s *graphState) Launch() error { return s.g.Launch() }
func (s *graphState) Close() error  { return s.close() }

func (s *graphState) close() error {
	s.once.Do(func() {
		s.err = s.g.Close()
		s.w.graphs.Add(-1)
	})
	return s.err
}

// graphsInUse refuses to replace the communicators while graphs captured
// on this worker are alive: they hold the addresses of IPC memory and
// communicators that would be freed under them.
func (w *Worker) graphsInUse() error {
	// Graphs dropped without Close are closed in cleanups, which run
	// after a collection, on another goroutine: give them a moment.
	for i := 0; i < 5 && w.graphs.Load() > 0; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if n := w.graphs.Load(); n > 0 {
		return fmt.Errorf("worker %d: %d captured CUDA graphs are still alive; close or release them before calling InitCCL again", w.cfg.ID, n)
	}
	return nil
}

// NewStopwatch times this worker's work call by call: on a GPU, marks
// are CUDA events on the worker's stream (device time between them); on
// a host-only worker, the host clock. marks bounds the marks between two
// Laps.
func (w *Worker) NewStopwatch(marks int) (device.Stopwatch, error) {
	if w.dev == nil {
		return device.NewHostStopwatch(marks), nil
	}
	t, ok := w.dev.(device.Timer)
	if !ok {
		return nil, fmt.Errorf("worker %d: the device %T cannot time its work", w.cfg.ID, w.dev)
	}
	return t.NewStopwatch(marks)
}

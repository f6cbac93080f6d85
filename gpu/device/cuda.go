package device

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
)

// CUDA is a Device on a real GPU. Driver calls run on whichever OS thread
// the caller is on: each call locks its goroutine to the thread and makes
// the device's primary context current first (cuCtxSetCurrent is cheap),
// so no call depends on which thread a function happens to run on, and no
// call pays a hop to a device goroutine (a cross-thread wake-up costs
// microseconds, as much as an all-reduce). Calls are serialised by a
// mutex; the device's work is ordered on one non-blocking stream.
type CUDA struct {
	d       *cuda.Driver
	ordinal int
	dev     cuda.Device
	ctx     cuda.Context
	stream  cuda.Stream
	once    sync.Once
	mu      sync.Mutex
	closed  bool
	// capturing: the stream is being recorded (guarded by mu).
	capturing bool
}

var _ Capturer = (*CUDA)(nil)

// OpenCUDA binds device ordinal: retains its primary context and creates
// the stream.
func OpenCUDA(d *cuda.Driver, ordinal int) (*CUDA, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := d.DeviceGet(ordinal)
	if err != nil {
		return nil, err
	}
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		return nil, err
	}
	if err := d.SetCurrent(ctx); err != nil {
		d.PrimaryCtxRelease(dev)
		return nil, err
	}
	s, err := d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		d.PrimaryCtxRelease(dev)
		return nil, err
	}
	return &CUDA{d: d, ordinal: ordinal, dev: dev, ctx: ctx, stream: s}, nil
}

// do runs f with the device's context current on the calling thread and
// returns its error.
func (c *CUDA) do(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := c.d.SetCurrent(c.ctx)
	if err == nil {
		err = f()
	}
	if err != nil {
		return fmt.Errorf("device %d: %w", c.ordinal, err)
	}
	return nil
}

func (c *CUDA) Ordinal() int { return c.ordinal }

// Do runs fn with the device's context current on the calling thread and
// the device's stream, for libraries that enqueue their own work (NCCL).
func (c *CUDA) Do(fn func(s cuda.Stream) error) error {
	return c.do(func() error { return fn(c.stream) })
}

func (c *CUDA) Alloc(n int64) (*Buffer, error) {
	var p cuda.DevicePtr
	err := c.do(func() (err error) {
		if n == 0 {
			return nil
		}
		p, err = c.d.MemAlloc(n)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Buffer{ptr: uint64(p), size: n, dev: c.ordinal}, nil
}

func (c *CUDA) Free(b *Buffer) error {
	if err := checkRange("Free", b, 0, 0, c.ordinal); err != nil {
		return err
	}
	return c.do(func() error {
		if b.ptr == 0 {
			return nil
		}
		return c.d.MemFree(cuda.DevicePtr(b.ptr))
	})
}

// CopyIn and CopyOut return once the copy is done (host memory is
// pageable and the caller may reuse it).
func (c *CUDA) CopyIn(b *Buffer, off int64, src []byte) error {
	if err := checkRange("CopyIn", b, off, int64(len(src)), c.ordinal); err != nil || len(src) == 0 {
		return err
	}
	return c.doSync("CopyIn", func() error {
		if err := c.d.MemcpyHtoDAsync(cuda.DevicePtr(b.ptr+uint64(off)), src, c.stream); err != nil {
			return err
		}
		return c.d.StreamSynchronize(c.stream)
	})
}

func (c *CUDA) CopyOut(dst []byte, b *Buffer, off int64) error {
	if err := checkRange("CopyOut", b, off, int64(len(dst)), c.ordinal); err != nil || len(dst) == 0 {
		return err
	}
	return c.doSync("CopyOut", func() error {
		if err := c.d.MemcpyDtoHAsync(dst, cuda.DevicePtr(b.ptr+uint64(off)), c.stream); err != nil {
			return err
		}
		return c.d.StreamSynchronize(c.stream)
	})
}

// Copy and Memset are queued on the stream; Sync waits for them.
func (c *CUDA) Copy(dst *Buffer, doff int64, src *Buffer, soff int64, n int64) error {
	if err := checkRange("Copy", dst, doff, n, c.ordinal); err != nil {
		return err
	}
	if err := checkRange("Copy", src, soff, n, c.ordinal); err != nil || n == 0 {
		return err
	}
	return c.do(func() error {
		return c.d.MemcpyDtoDAsync(cuda.DevicePtr(dst.ptr+uint64(doff)), cuda.DevicePtr(src.ptr+uint64(soff)), n, c.stream)
	})
}

func (c *CUDA) Memset(b *Buffer, off int64, v byte, n int64) error {
	if err := checkRange("Memset", b, off, n, c.ordinal); err != nil || n == 0 {
		return err
	}
	return c.do(func() error { return c.d.MemsetD8Async(cuda.DevicePtr(b.ptr+uint64(off)), v, n, c.stream) })
}

func (c *CUDA) Sync() error {
	return c.doSync("Sync", func() error { return c.d.StreamSynchronize(c.stream) })
}

// doSync runs f, which waits for the stream, unless the stream is being
// captured.
func (c *CUDA) doSync(op string, f func() error) error {
	return c.do(func() error {
		if c.capturing {
			return fmt.Errorf("%s: %w", op, ErrCapturing)
		}
		return f()
	})
}

// BeginCapture starts recording the stream (relaxed mode: the capture
// may end on another OS thread, and other devices' calls are not
// restricted).
func (c *CUDA) BeginCapture() error {
	return c.do(func() error {
		if c.capturing {
			return fmt.Errorf("BeginCapture: already capturing: %w", ErrNotCapturing)
		}
		if err := c.d.StreamBeginCapture(c.stream, cuda.CaptureModeRelaxed); err != nil {
			return err
		}
		c.capturing = true
		return nil
	})
}

func (c *CUDA) Capturing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capturing
}

// EndCapture ends the recording and instantiates it.
func (c *CUDA) EndCapture() (Graph, error) {
	var e cuda.GraphExec
	err := c.do(func() error {
		if !c.capturing {
			return fmt.Errorf("EndCapture: %w", ErrNotCapturing)
		}
		c.capturing = false
		g, err := c.d.StreamEndCapture(c.stream)
		if err != nil {
			return err
		}
		defer c.d.GraphDestroy(g)
		e, err = c.d.GraphInstantiate(g)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &cudaGraph{c: c, exec: e}, nil
}

type cudaGraph struct {
	c    *CUDA
	exec cuda.GraphExec
	once sync.Once
}

func (g *cudaGraph) Launch() error {
	return g.c.do(func() error { return g.c.d.GraphLaunch(g.exec, g.c.stream) })
}

// Close destroys the graph; replays already queued still run.
func (g *cudaGraph) Close() error {
	var err error
	g.once.Do(func() { err = g.c.do(func() error { return g.c.d.GraphExecDestroy(g.exec) }) })
	return err
}

func (c *CUDA) MemInfo() (free, total int64, err error) {
	err = c.do(func() (err error) {
		free, total, err = c.d.MemGetInfo()
		return err
	})
	return free, total, err
}

// Close waits for queued work, destroys the stream and releases the
// context. Buffers must be freed before.
func (c *CUDA) Close() error {
	var err error
	c.once.Do(func() {
		err = c.do(func() error {
			if c.capturing {
				if g, err := c.d.StreamEndCapture(c.stream); err == nil {
					c.d.GraphDestroy(g)
				}
				c.capturing = false
			}
			c.d.StreamSynchronize(c.stream)
			c.d.StreamDestroy(c.stream)
			return c.d.PrimaryCtxRelease(c.dev)
		})
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
	})
	return err
}

var _ Stager = (*CUDA)(nil)

// AllocPinned allocates page-locked host memory (cuMemHostAlloc,
// portable), so CopyInAsync runs as DMA without the driver staging it.
func (c *CUDA) AllocPinned(n int64) (*PinnedBuffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("device %d: AllocPinned: negative size %d", c.ordinal, n)
	}
	var p unsafe.Pointer
	err := c.do(func() (err error) {
		if n == 0 {
			return nil
		}
		p, err = c.d.MemHostAlloc(n, cuda.MemHostAllocPortable)
		return err
	})
	if err != nil {
		return nil, err
	}
	pb := &PinnedBuffer{dev: c.ordinal}
	if n > 0 {
		pb.b = unsafe.Slice((*byte)(p), n)
	}
	return pb, nil
}

// FreePinned waits for the stream (copies may still read p) and frees p.
func (c *CUDA) FreePinned(p *PinnedBuffer) error {
	return c.do(func() error {
		if err := checkPinned("FreePinned", p, 0, 0, c.ordinal); err != nil {
			return err
		}
		p.freed = true
		if len(p.b) == 0 {
			return nil
		}
		err := c.d.StreamSynchronize(c.stream)
		if ferr := c.d.MemFreeHost(unsafe.Pointer(unsafe.SliceData(p.b))); err == nil {
			err = ferr
		}
		p.b = nil
		return err
	})
}

// CopyInAsync queues the copy on the stream and returns.
func (c *CUDA) CopyInAsync(dst *Buffer, doff int64, src *PinnedBuffer, soff, n int64) error {
	if err := checkRange("CopyInAsync", dst, doff, n, c.ordinal); err != nil {
		return err
	}
	return c.do(func() error {
		if c.capturing {
			return fmt.Errorf("CopyInAsync: %w", ErrCapturing)
		}
		if err := checkPinned("CopyInAsync", src, soff, n, c.ordinal); err != nil || n == 0 {
			return err
		}
		return c.d.MemcpyHtoDAsync(cuda.DevicePtr(dst.ptr+uint64(doff)), src.b[soff:soff+n], c.stream)
	})
}

package device

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/chorus-rt/chorus/gpu/cuda"
)

// CUDA is a Device on a real GPU. Every driver call runs on one goroutine
// locked to its OS thread, where the device's primary context is current
// (CUDA contexts are per thread); the device's work is ordered on one
// non-blocking stream.
type CUDA struct {
	d       *cuda.Driver
	ordinal int
	dev     cuda.Device
	stream  cuda.Stream
	work    chan func()
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	closed  bool
}

var _ Device = (*CUDA)(nil)

// OpenCUDA binds device ordinal: retains its primary context on a
// dedicated OS thread and creates the stream.
func OpenCUDA(d *cuda.Driver, ordinal int) (*CUDA, error) {
	c := &CUDA{d: d, ordinal: ordinal, work: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go c.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return c, nil
}

// loop owns the OS thread; it exits when Close closes work.
func (c *CUDA) loop(ready chan<- error) {
	runtime.LockOSThread()
	defer close(c.done)
	err := func() error {
		dev, err := c.d.DeviceGet(c.ordinal)
		if err != nil {
			return err
		}
		ctx, err := c.d.PrimaryCtxRetain(dev)
		if err != nil {
			return err
		}
		if err := c.d.SetCurrent(ctx); err != nil {
			c.d.PrimaryCtxRelease(dev)
			return err
		}
		s, err := c.d.StreamCreate(cuda.StreamNonBlocking)
		if err != nil {
			c.d.PrimaryCtxRelease(dev)
			return err
		}
		c.dev, c.stream = dev, s
		return nil
	}()
	ready <- err
	if err != nil {
		runtime.UnlockOSThread()
		return
	}
	for f := range c.work {
		f()
	}
	c.d.StreamSynchronize(c.stream)
	c.d.StreamDestroy(c.stream)
	c.d.PrimaryCtxRelease(c.dev)
	// The thread had a context bound; let it die with the goroutine
	// rather than hand it back to the scheduler.
}

// do runs f on the device thread and returns its error.
func (c *CUDA) do(f func() error) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	errc := make(chan error, 1)
	c.work <- func() { errc <- f() }
	c.mu.Unlock()
	if err := <-errc; err != nil {
		return fmt.Errorf("device %d: %w", c.ordinal, err)
	}
	return nil
}

func (c *CUDA) Ordinal() int { return c.ordinal }

// Do runs fn on the device thread (context current) with the device's
// stream, for libraries that enqueue their own work (NCCL).
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
	return c.do(func() error {
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
	return c.do(func() error {
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

func (c *CUDA) Sync() error { return c.do(func() error { return c.d.StreamSynchronize(c.stream) }) }

func (c *CUDA) MemInfo() (free, total int64, err error) {
	err = c.do(func() (err error) {
		free, total, err = c.d.MemGetInfo()
		return err
	})
	return free, total, err
}

// Close waits for queued work, destroys the stream, releases the context
// and ends the device thread. Buffers must be freed before.
func (c *CUDA) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		close(c.work)
		c.mu.Unlock()
		<-c.done
	})
	return nil
}

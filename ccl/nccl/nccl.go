package nccl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	gnccl "github.com/chorus-rt/chorus/gpu/nccl"
	"github.com/chorus-rt/chorus/tensor"
)

// Options tune the backend.
type Options struct {
	// SkipChecks skips the cross-rank descriptor exchange, so that tests
	// reach NCCL's own behaviour on mismatched calls. Only test binaries
	// may set it (testing.Testing); elsewhere Join refuses it.
	SkipChecks bool
}

// Backend is the "nccl" backend.
type Backend struct{ Options Options }

func init() {
	if err := ccl.Register(&Backend{}); err != nil {
		panic(err)
	}
}

var (
	libOnce sync.Once
	lib     *gnccl.Lib
	libErr  error
	drvOnce sync.Once
	drv     *cuda.Driver
	drvErr  error
)

func loadLib() (*gnccl.Lib, error) {
	libOnce.Do(func() { lib, libErr = gnccl.Load() })
	return lib, libErr
}

func loadDriver() (*cuda.Driver, error) {
	drvOnce.Do(func() { drv, drvErr = cuda.Load() })
	return drv, drvErr
}

func (*Backend) Name() string { return "nccl" }

// NewID makes an NCCL unique id (needs libnccl where it runs).
func (*Backend) NewID() ([]byte, error) {
	l, err := loadLib()
	if err != nil {
		return nil, err
	}
	id, err := l.GetUniqueID()
	if err != nil {
		return nil, err
	}
	return id[:], nil
}

// descBytes is one rank's descriptor in the exchange.
const descBytes = 32

// Join creates this rank's NCCL communicator through its device executor.
func (b *Backend) Join(ctx context.Context, cfg ccl.Config) (ccl.Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Exec == nil || cfg.Device.Kind != tensor.CUDA {
		return nil, fmt.Errorf("%w: the nccl backend needs workers bound to GPUs (session DeviceIDs), this rank has %v", ccl.ErrBadArgs, cfg.Device)
	}
	var id gnccl.UniqueID
	if len(cfg.ID) != len(id) {
		return nil, fmt.Errorf("%w: nccl communicator id has %d bytes, want %d", ccl.ErrBadArgs, len(cfg.ID), len(id))
	}
	copy(id[:], cfg.ID)
	l, err := loadLib()
	if err != nil {
		return nil, err
	}
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	opts := b.Options
	if opts.SkipChecks && !testing.Testing() {
		return nil, fmt.Errorf("%w: ccl/nccl: rank %d: Options.SkipChecks is for tests only", ccl.ErrBadArgs, cfg.Rank)
	}
	c := newComm(l, d, cfg, opts)
	err = c.exec(func(uintptr) error {
		comm, err := l.CommInitRank(cfg.Size, id, cfg.Rank)
		if err != nil {
			return err
		}
		return c.setup(comm)
	})
	if err != nil {
		return nil, fmt.Errorf("ccl/nccl: rank %d: join: %w", cfg.Rank, err)
	}
	return c, nil
}

func newComm(l library, d driver, cfg ccl.Config, opts Options) *Comm {
	c := &Comm{lib: l, drv: d, rank: cfg.Rank, n: cfg.Size, exec: cfg.Exec, opts: opts, dev: cfg.Device, control: cfg.Control}
	if c.control != nil {
		c.mine = tensor.MustNew(tensor.Uint8, tensor.Shape{descBytes})
		c.all = tensor.MustNew(tensor.Uint8, tensor.Shape{int64(descBytes * cfg.Size)})
		c.mineB, _ = tensor.Data[uint8](c.mine)
		c.allB, _ = tensor.Data[uint8](c.all)
	}
	return c
}

// setup finishes a communicator (inside the device executor): the device buffer
// for descriptor exchanges when there is no host control communicator.
func (c *Comm) setup(comm gnccl.Comm) error {
	c.comm = comm
	if c.control != nil {
		return nil
	}
	p, err := c.drv.MemAlloc(int64(descBytes * c.n))
	if err != nil {
		c.lib.CommDestroy(comm)
		return err
	}
	c.descBuf = p
	return nil
}

// Split makes the communicator of this rank's color (ncclCommSplit);
// every rank of c must call it.
func (c *Comm) Split(ctx context.Context, color, key int, control ccl.Comm) (ccl.Comm, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if color < 0 || key < 0 {
		return nil, fmt.Errorf("%w: split color %d, key %d must be >= 0", ccl.ErrBadArgs, color, key)
	}
	var sub *Comm
	err := c.exec(func(uintptr) error {
		comm, err := c.lib.CommSplit(c.comm, color, key)
		if err != nil {
			return err
		}
		rank, err := c.lib.UserRank(comm)
		if err == nil {
			var n int
			if n, err = c.lib.Count(comm); err == nil {
				if control != nil && (control.Rank() != rank || control.Size() != n) {
					err = fmt.Errorf("%w: control communicator is rank %d of %d, the split is rank %d of %d", ccl.ErrBadArgs, control.Rank(), control.Size(), rank, n)
				}
				sub = newComm(c.lib, c.drv, ccl.Config{Rank: rank, Size: n, Exec: c.exec, Device: c.dev, Control: control}, c.opts)
			}
		}
		if err != nil {
			c.lib.CommDestroy(comm)
			return err
		}
		return sub.setup(comm)
	})
	if err != nil {
		return nil, fmt.Errorf("ccl/nccl: rank %d: split (color %d, key %d): %w", c.rank, color, key, err)
	}
	return sub, nil
}

// Comm is one rank of an NCCL communicator.
type Comm struct {
	lib     library
	drv     driver
	comm    gnccl.Comm
	rank, n int
	dev     tensor.Device
	exec    func(func(uintptr) error) error
	opts    Options
	descBuf cuda.DevicePtr // device exchange buffer (no control comm)

	control     ccl.Comm       // host exchange of descriptors, when set
	mine, all   *tensor.Tensor // host exchange buffers over mineB, allB
	mineB, allB []byte

	// mu orders Abort (any goroutine) against the owner's calls: a call
	// checks failed under mu before it touches comm.
	mu      sync.Mutex
	failed  error
	aborted bool // ncclCommAbort already ran
	closed  bool
}

var (
	_ ccl.Splitter = (*Comm)(nil)
	_ ccl.Aborter  = (*Comm)(nil)
)

var _ ccl.Comm = (*Comm)(nil)

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.n }

// Close destroys the communicator (ncclCommAbort if an earlier call
// failed, since a failed communicator may not finish a destroy).
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	failed, aborted := c.failed, c.aborted
	c.mu.Unlock()
	return c.exec(func(uintptr) error {
		if c.descBuf != 0 {
			c.drv.MemFree(c.descBuf)
		}
		switch {
		case aborted:
			return nil
		case failed != nil:
			return c.lib.CommAbort(c.comm)
		}
		return c.lib.CommDestroy(c.comm)
	})
}

// Abort ends the communicator now: NCCL kernels waiting for peers exit,
// and every later call fails with ErrFailed. It is safe from any
// goroutine, also while the owner is blocked in a call or a stream
// synchronization (ncclCommAbort is made for that).
func (c *Comm) Abort(reason error) error {
	c.mu.Lock()
	if c.aborted || c.closed {
		c.mu.Unlock()
		return nil
	}
	c.aborted = true
	if c.failed == nil {
		c.failed = fmt.Errorf("aborted: %w", reason)
	}
	c.mu.Unlock()
	if err := c.lib.CommAbort(c.comm); err != nil {
		return fmt.Errorf("ccl/nccl: rank %d: abort: %w", c.rank, err)
	}
	return nil
}

func (c *Comm) usable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ccl.ErrClosed
	}
	if c.failed != nil {
		return fmt.Errorf("%w: rank %d: %v", ccl.ErrFailed, c.rank, c.failed)
	}
	return nil
}

func (c *Comm) fail(err error) {
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.mu.Unlock()
}

// ptr returns the device address of a GPU tensor of this rank.
func (c *Comm) ptr(name string, t *tensor.Tensor) (uint64, error) {
	if t == nil {
		return 0, fmt.Errorf("%w: %s tensor is nil", ccl.ErrBadArgs, name)
	}
	if t.Device() != c.dev || t.Storage().Buffer() == nil {
		return 0, fmt.Errorf("%w: %s is on %v, this rank's GPU is %v", ccl.ErrBadArgs, name, t.Device(), c.dev)
	}
	return uint64(t.Storage().Buffer().Ptr()) + uint64(t.Offset()), nil
}

func encodeDesc(b []byte, d ccl.Desc, local error) {
	clear(b[:descBytes])
	if local != nil {
		b[0] = 1
	}
	b[1], b[2], b[3] = byte(d.Kind), byte(d.DType), byte(d.Op)
	binary.LittleEndian.PutUint32(b[4:], uint32(d.Root))
	binary.LittleEndian.PutUint64(b[8:], uint64(d.Count))
}

// check compares every rank's descriptor; all holds n of them.
func (c *Comm) check(all []byte, d ccl.Desc, local error) error {
	if local != nil {
		return local
	}
	descs := make([]ccl.Desc, c.n)
	for r := range c.n {
		b := all[r*descBytes:]
		if b[0] != 0 {
			return fmt.Errorf("%w: rank %d: %s: rank %d passed bad arguments", ccl.ErrMismatch, c.rank, d.Kind, r)
		}
		descs[r] = ccl.Desc{Kind: ccl.Kind(b[1]), DType: tensor.DType(b[2]), Op: reduce.Op(b[3]),
			Root: int32(binary.LittleEndian.Uint32(b[4:])), Count: int64(binary.LittleEndian.Uint64(b[8:]))}
	}
	if err := ccl.Compare(descs); err != nil {
		return fmt.Errorf("ccl/nccl: rank %d: %w", c.rank, err)
	}
	return nil
}

// hostExchange all-gathers descriptors over the control communicator,
// before anything is enqueued on the GPU.
func (c *Comm) hostExchange(ctx context.Context, d ccl.Desc, local error) error {
	encodeDesc(c.mineB, d, local)
	if err := c.control.AllGather(ctx, c.mine, c.all); err != nil {
		return fmt.Errorf("ccl/nccl: rank %d: %s: argument exchange: %w", c.rank, d.Kind, err)
	}
	return c.check(c.allB, d, local)
}

// exchange all-gathers descriptors through the GPU and checks them on
// every rank; on success it returns nil and the caller enqueues the
// collective.
func (c *Comm) exchange(stream uintptr, d ccl.Desc, local error) error {
	// It waits for the stream: refuse inside a graph capture rather than
	// spoil it (a communicator with a control communicator checks on the
	// host and captures fine).
	if st, err := c.drv.StreamIsCapturing(cuda.Stream(stream)); err != nil || st != cuda.CaptureNone {
		if err == nil {
			err = fmt.Errorf("%w: ccl/nccl: rank %d: the device-side argument check synchronizes; join with a control communicator (sessions do) or skip checks to capture", device.ErrCapturing, c.rank)
		}
		return err
	}
	var mine [descBytes]byte
	encodeDesc(mine[:], d, local)
	me := uint64(c.descBuf) + uint64(c.rank*descBytes)
	if err := c.drv.MemcpyHtoDAsync(cuda.DevicePtr(me), mine[:], cuda.Stream(stream)); err != nil {
		return err
	}
	if err := c.lib.AllGather(me, uint64(c.descBuf), descBytes, gnccl.Uint8, c.comm, stream); err != nil {
		return err
	}
	all := make([]byte, descBytes*c.n)
	if err := c.drv.MemcpyDtoHAsync(all, c.descBuf, cuda.Stream(stream)); err != nil {
		return err
	}
	if err := c.drv.StreamSynchronize(cuda.Stream(stream)); err != nil {
		return err
	}
	return c.check(all, d, local)
}

// run checks local arguments, exchanges descriptors and enqueues op.
func (c *Comm) run(ctx context.Context, d ccl.Desc, local error, op func(stream uintptr) error) error {
	if err := c.usable(); err != nil {
		return err
	}
	host := !c.opts.SkipChecks && c.control != nil
	if host {
		if err := c.hostExchange(ctx, d, local); err != nil {
			if local == nil && !errors.Is(err, ccl.ErrMismatch) {
				// A control failure (timeout, dead peer) leaves NCCL's
				// ranks out of step: this communicator cannot be trusted.
				c.fail(err)
			}
			return err
		}
	}
	err := c.exec(func(stream uintptr) error {
		if !host && !c.opts.SkipChecks {
			if err := c.exchange(stream, d, local); err != nil {
				return err
			}
		} else if local != nil {
			return local
		}
		return op(stream)
	})
	if err != nil {
		var ne *gnccl.Error
		if asNCCL(err, &ne) {
			c.fail(err) // an NCCL failure leaves the communicator unusable
		}
		if local != nil {
			return fmt.Errorf("ccl/nccl: rank %d: %s: %w", c.rank, d.Kind, err)
		}
		return err
	}
	return nil
}

func redOp(op reduce.Op, dt tensor.DType) (gnccl.RedOp, error) {
	if err := reduce.Supported(op, dt); err != nil {
		return 0, fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
	}
	switch op {
	case reduce.Sum:
		return gnccl.Sum, nil
	case reduce.Prod:
		return gnccl.Prod, nil
	case reduce.Min:
		return gnccl.Min, nil
	case reduce.Max:
		return gnccl.Max, nil
	case reduce.Avg:
		if !dt.IsFloat() {
			return 0, fmt.Errorf("%w: avg of %s is not offered by NCCL", ccl.ErrBadArgs, dt)
		}
		return gnccl.Avg, nil
	}
	return 0, fmt.Errorf("%w: unknown op %v", ccl.ErrBadArgs, op)
}

// args validates a send/recv pair: same dtype, NCCL type, element counts.
func (c *Comm) args(send, recv *tensor.Tensor, sendN func(s, r int64) bool) (uint64, uint64, gnccl.DataType, error) {
	sp, err := c.ptr("send", send)
	if err != nil {
		return 0, 0, 0, err
	}
	rp, err := c.ptr("recv", recv)
	if err != nil {
		return 0, 0, 0, err
	}
	if send.DType() != recv.DType() {
		return 0, 0, 0, fmt.Errorf("%w: send is %s, recv is %s", ccl.ErrBadArgs, send.DType(), recv.DType())
	}
	dt, err := gnccl.DTypeOf(send.DType())
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
	}
	if !sendN(send.NumElements(), recv.NumElements()) {
		return 0, 0, 0, fmt.Errorf("%w: send has %d elements, recv %d", ccl.ErrBadArgs, send.NumElements(), recv.NumElements())
	}
	return sp, rp, dt, nil
}

func desc(kind ccl.Kind, t *tensor.Tensor, op reduce.Op, root int) ccl.Desc {
	d := ccl.Desc{Kind: kind, Op: op, Root: int32(root)}
	if t != nil {
		d.DType, d.Count = t.DType(), t.NumElements()
	}
	return d
}

func (c *Comm) AllReduce(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	sp, rp, dt, err := c.args(send, recv, func(s, r int64) bool { return s == r })
	var o gnccl.RedOp
	if err == nil {
		o, err = redOp(op, send.DType())
	}
	return c.run(ctx, desc(ccl.KindAllReduce, send, op, 0), err, func(s uintptr) error {
		return c.lib.AllReduce(sp, rp, send.NumElements(), dt, o, c.comm, s)
	})
}

func (c *Comm) ReduceScatter(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	n := int64(c.n)
	sp, rp, dt, err := c.args(send, recv, func(s, r int64) bool { return s%n == 0 && s/n == r })
	var o gnccl.RedOp
	if err == nil {
		o, err = redOp(op, send.DType())
	}
	return c.run(ctx, desc(ccl.KindReduceScatter, send, op, 0), err, func(s uintptr) error {
		return c.lib.ReduceScatter(sp, rp, recv.NumElements(), dt, o, c.comm, s)
	})
}

func (c *Comm) AllGather(ctx context.Context, send, recv *tensor.Tensor) error {
	n := int64(c.n)
	sp, rp, dt, err := c.args(send, recv, func(s, r int64) bool { return r == s*n })
	return c.run(ctx, desc(ccl.KindAllGather, send, 0, 0), err, func(s uintptr) error {
		return c.lib.AllGather(sp, rp, send.NumElements(), dt, c.comm, s)
	})
}

func (c *Comm) Broadcast(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	var sp, rp uint64
	var dt gnccl.DataType
	var err error
	if c.rank == root {
		sp, rp, dt, err = c.args(send, recv, func(s, r int64) bool { return s == r })
	} else if rp, err = c.ptr("recv", recv); err == nil {
		dt, err = gnccl.DTypeOf(recv.DType())
		sp = rp
	}
	if root < 0 || root >= c.n {
		err = fmt.Errorf("%w: root %d out of range [0, %d)", ccl.ErrBadArgs, root, c.n)
	}
	return c.run(ctx, desc(ccl.KindBroadcast, recv, 0, root), err, func(s uintptr) error {
		return c.lib.Broadcast(sp, rp, recv.NumElements(), dt, root, c.comm, s)
	})
}

// Scatter and Gather are point-to-point calls inside one NCCL group; the
// root's own part is a device copy.
func (c *Comm) Scatter(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	return c.rooted(ctx, ccl.KindScatter, send, recv, root)
}

func (c *Comm) Gather(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	return c.rooted(ctx, ccl.KindGather, send, recv, root)
}

func (c *Comm) rooted(ctx context.Context, kind ccl.Kind, send, recv *tensor.Tensor, root int) error {
	n := int64(c.n)
	isRoot := c.rank == root
	var sp, rp uint64
	var dt gnccl.DataType
	var err error
	// part is the per-rank tensor: recv for scatter, send for gather.
	part := recv
	if kind == ccl.KindGather {
		part = send
	}
	switch {
	case root < 0 || root >= c.n:
		err = fmt.Errorf("%w: root %d out of range [0, %d)", ccl.ErrBadArgs, root, c.n)
	case isRoot && kind == ccl.KindScatter:
		sp, rp, dt, err = c.args(send, recv, func(s, r int64) bool { return s%n == 0 && s/n == r })
	case isRoot:
		sp, rp, dt, err = c.args(send, recv, func(s, r int64) bool { return r == s*n })
	default:
		var p uint64
		if p, err = c.ptr("buffer", part); err == nil {
			dt, err = gnccl.DTypeOf(part.DType())
			sp, rp = p, p
		}
	}
	return c.run(ctx, desc(kind, part, 0, root), err, func(s uintptr) error {
		cnt := part.NumElements()
		bytes := uint64(cnt) * uint64(part.DType().Size())
		if !isRoot {
			if kind == ccl.KindScatter {
				return c.lib.Recv(rp, cnt, dt, root, c.comm, s)
			}
			return c.lib.Send(sp, cnt, dt, root, c.comm, s)
		}
		if err := c.lib.GroupStart(); err != nil {
			return err
		}
		for r := range c.n {
			off := uint64(r) * bytes
			var err error
			switch {
			case r == root && kind == ccl.KindScatter:
				err = c.drv.MemcpyDtoDAsync(cuda.DevicePtr(rp), cuda.DevicePtr(sp+off), int64(bytes), cuda.Stream(s))
			case r == root:
				err = c.drv.MemcpyDtoDAsync(cuda.DevicePtr(rp+off), cuda.DevicePtr(sp), int64(bytes), cuda.Stream(s))
			case kind == ccl.KindScatter:
				err = c.lib.Send(sp+off, cnt, dt, r, c.comm, s)
			default:
				err = c.lib.Recv(rp+off, cnt, dt, r, c.comm, s)
			}
			if err != nil {
				c.lib.GroupEnd()
				return err
			}
		}
		return c.lib.GroupEnd()
	})
}

func (c *Comm) p2p(kind ccl.Kind, t *tensor.Tensor, peer int) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := ccl.CheckPeer(peer, c.rank, c.n); err != nil {
		return err
	}
	p, err := c.ptr("buffer", t)
	if err != nil {
		return err
	}
	dt, err := gnccl.DTypeOf(t.DType())
	if err != nil {
		return fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
	}
	return c.exec(func(s uintptr) error {
		if kind == ccl.KindSend {
			return c.lib.Send(p, t.NumElements(), dt, peer, c.comm, s)
		}
		return c.lib.Recv(p, t.NumElements(), dt, peer, c.comm, s)
	})
}

func (c *Comm) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.p2p(ccl.KindSend, t, peer)
}

func (c *Comm) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	return c.p2p(ccl.KindRecv, t, peer)
}

// Barrier is an exchange of descriptors with nothing after it.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, ccl.Desc{Kind: ccl.KindBarrier}, nil, func(s uintptr) error {
		return c.drv.StreamSynchronize(cuda.Stream(s))
	})
}

func asNCCL(err error, target **gnccl.Error) bool {
	for err != nil {
		if e, ok := err.(*gnccl.Error); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

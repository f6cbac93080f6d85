package nccl

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	gnccl "github.com/chorus-rt/chorus/gpu/nccl"
	"github.com/chorus-rt/chorus/tensor"
)

// Options tune the backend.
type Options struct {
	// SkipChecks skips the cross-rank descriptor exchange.
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

// Join creates this rank's NCCL communicator on its device thread.
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
	if os.Getenv("CHORUS_NCCL_SKIP_CHECKS") == "1" {
		// For measurements: NCCL's own behaviour on mismatched calls.
		opts.SkipChecks = true
	}
	c := &Comm{lib: l, drv: d, rank: cfg.Rank, n: cfg.Size, exec: cfg.Exec, opts: opts, dev: cfg.Device}
	err = c.exec(func(uintptr) error {
		comm, err := l.CommInitRank(cfg.Size, id, cfg.Rank)
		if err != nil {
			return err
		}
		c.comm = comm
		p, err := d.MemAlloc(int64(descBytes * cfg.Size))
		if err != nil {
			l.CommDestroy(comm)
			return err
		}
		c.descBuf = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ccl/nccl: rank %d: join: %w", cfg.Rank, err)
	}
	return c, nil
}

// Comm is one rank of an NCCL communicator.
type Comm struct {
	lib     *gnccl.Lib
	drv     *cuda.Driver
	comm    gnccl.Comm
	rank, n int
	dev     tensor.Device
	exec    func(func(uintptr) error) error
	opts    Options
	descBuf cuda.DevicePtr
	failed  error
	closed  bool
}

var _ ccl.Comm = (*Comm)(nil)

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.n }

// Close destroys the communicator (Abort if an earlier call failed).
func (c *Comm) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.exec(func(uintptr) error {
		c.drv.MemFree(c.descBuf)
		if c.failed != nil {
			return c.lib.CommAbort(c.comm)
		}
		return c.lib.CommDestroy(c.comm)
	})
}

func (c *Comm) usable() error {
	if c.closed {
		return ccl.ErrClosed
	}
	if c.failed != nil {
		return fmt.Errorf("%w: rank %d: %v", ccl.ErrFailed, c.rank, c.failed)
	}
	return nil
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

// exchange all-gathers descriptors and checks them on every rank; on
// success it returns nil and the caller enqueues the collective.
func (c *Comm) exchange(stream uintptr, d ccl.Desc, local error) error {
	if c.opts.SkipChecks {
		return local
	}
	var mine [descBytes]byte
	if local != nil {
		mine[0] = 1
	}
	mine[1], mine[2], mine[3] = byte(d.Kind), byte(d.DType), byte(d.Op)
	binary.LittleEndian.PutUint32(mine[4:], uint32(d.Root))
	binary.LittleEndian.PutUint64(mine[8:], uint64(d.Count))
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

// run checks local arguments, exchanges descriptors and enqueues op.
func (c *Comm) run(d ccl.Desc, local error, op func(stream uintptr) error) error {
	if err := c.usable(); err != nil {
		return err
	}
	err := c.exec(func(stream uintptr) error {
		if err := c.exchange(stream, d, local); err != nil {
			return err
		}
		return op(stream)
	})
	if err != nil {
		var ne *gnccl.Error
		if asNCCL(err, &ne) {
			c.failed = err // an NCCL failure leaves the communicator unusable
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
	return c.run(desc(ccl.KindAllReduce, send, op, 0), err, func(s uintptr) error {
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
	return c.run(desc(ccl.KindReduceScatter, send, op, 0), err, func(s uintptr) error {
		return c.lib.ReduceScatter(sp, rp, recv.NumElements(), dt, o, c.comm, s)
	})
}

func (c *Comm) AllGather(ctx context.Context, send, recv *tensor.Tensor) error {
	n := int64(c.n)
	sp, rp, dt, err := c.args(send, recv, func(s, r int64) bool { return r == s*n })
	return c.run(desc(ccl.KindAllGather, send, 0, 0), err, func(s uintptr) error {
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
	return c.run(desc(ccl.KindBroadcast, recv, 0, root), err, func(s uintptr) error {
		return c.lib.Broadcast(sp, rp, recv.NumElements(), dt, root, c.comm, s)
	})
}

// Scatter and Gather are point-to-point calls inside one NCCL group; the
// root's own part is a device copy.
func (c *Comm) Scatter(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	return c.rooted(ccl.KindScatter, send, recv, root)
}

func (c *Comm) Gather(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	return c.rooted(ccl.KindGather, send, recv, root)
}

func (c *Comm) rooted(kind ccl.Kind, send, recv *tensor.Tensor, root int) error {
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
	return c.run(desc(kind, part, 0, root), err, func(s uintptr) error {
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
	return c.run(ccl.Desc{Kind: ccl.KindBarrier}, nil, func(s uintptr) error {
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

package ipc

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// Backend "ipc" sets workers up for IPC memory and the custom all-reduce
// only, without NCCL: several workers may then share one GPU (NCCL
// refuses two ranks on one device), which is how more ranks than GPUs are
// tested. Its communicator offers no other collective; each returns
// ccl.ErrBadArgs saying so, and custom_allreduce's nccl strategy is
// unavailable.
type Backend struct{}

func init() {
	if err := ccl.Register(Backend{}); err != nil {
		panic(err)
	}
}

func (Backend) Name() string { return "ipc" }

func (Backend) NewID() ([]byte, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return id, nil
}

// Join returns the placeholder communicator; the worker joins the host
// control communicator that IPC memory uses.
func (Backend) Join(ctx context.Context, cfg ccl.Config) (ccl.Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Device.Kind != tensor.CUDA {
		return nil, fmt.Errorf("%w: the ipc backend needs workers bound to GPUs (session DeviceIDs)", ccl.ErrBadArgs)
	}
	if cfg.Size > MaxRanks {
		return nil, fmt.Errorf("%w: the ipc backend supports up to %d ranks, got %d", ccl.ErrBadArgs, MaxRanks, cfg.Size)
	}
	return &onlyCustom{rank: cfg.Rank, size: cfg.Size, control: cfg.Control}, nil
}

type onlyCustom struct {
	rank, size int
	control    ccl.Comm
}

func (c *onlyCustom) Rank() int { return c.rank }
func (c *onlyCustom) Size() int { return c.size }

func (c *onlyCustom) no(what string) error {
	return fmt.Errorf("%w: the ipc backend offers only custom_allreduce (oneshot, twoshot, auto), not %s; use InitCCL \"nccl\"", ccl.ErrBadArgs, what)
}

func (c *onlyCustom) AllReduce(context.Context, *tensor.Tensor, *tensor.Tensor, reduce.Op) error {
	return c.no("allreduce")
}
func (c *onlyCustom) AllGather(context.Context, *tensor.Tensor, *tensor.Tensor) error {
	return c.no("allgather")
}
func (c *onlyCustom) ReduceScatter(context.Context, *tensor.Tensor, *tensor.Tensor, reduce.Op) error {
	return c.no("reduce_scatter")
}
func (c *onlyCustom) Broadcast(context.Context, *tensor.Tensor, *tensor.Tensor, int) error {
	return c.no("broadcast")
}
func (c *onlyCustom) Scatter(context.Context, *tensor.Tensor, *tensor.Tensor, int) error {
	return c.no("scatter")
}
func (c *onlyCustom) Gather(context.Context, *tensor.Tensor, *tensor.Tensor, int) error {
	return c.no("gather")
}
func (c *onlyCustom) Send(context.Context, *tensor.Tensor, int) error { return c.no("send") }
func (c *onlyCustom) Recv(context.Context, *tensor.Tensor, int) error { return c.no("recv") }

// Barrier is the host control communicator's barrier.
func (c *onlyCustom) Barrier(ctx context.Context) error {
	if c.control == nil {
		return c.no("barrier")
	}
	return c.control.Barrier(ctx)
}

func (c *onlyCustom) Close() error { return nil }

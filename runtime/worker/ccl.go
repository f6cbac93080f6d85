package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	_ "github.com/chorus-rt/chorus/ccl/cpu"  // every worker offers the cpu backend
	_ "github.com/chorus-rt/chorus/ccl/nccl" // and the nccl backend (needs GPUs)
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// ErrNoCCL: a collective was called before InitCCL (the sentinel of the
// registry's Comms capability).
var ErrNoCCL = registry.ErrNoCCL

// Comm returns the communicator a function running on this worker should
// use: the group's when inGroup is set (and there are groups), else the
// global one.
func (w *Worker) Comm(inGroup bool) (ccl.Comm, error) {
	// Only this worker's goroutine writes comms, so it reads without
	// commMu (Abort, on other goroutines, takes it to read).
	if w.comms.global == nil {
		return nil, fmt.Errorf("worker %d: %w", w.cfg.ID, ErrNoCCL)
	}
	if inGroup && w.tcomms.group != nil {
		return w.tcomms.group, nil
	}
	return w.tcomms.global, nil
}

// initCCL joins the global communicator and, with several groups, this
// worker's group communicator (in that order on every worker).
func (w *Worker) initCCL(backend string, id []byte, devices tensor.Shape, timeoutMs int64) error {
	b, err := w.backend(backend)
	if err != nil {
		return err
	}
	if err := w.graphsInUse(); err != nil {
		return err
	}
	if err := w.ipcInUse(); err != nil {
		return err
	}
	w.closeCCL()
	// The cpu backend works on host memory; GPU backends use the device
	// the worker was bound to at start (session Options.DeviceIDs).
	dev := tensor.CPUDevice
	if backend != "cpu" {
		dev = w.cfg.Device
		if len(devices) > 0 {
			if want := tensor.CUDADevice(int(devices[w.cfg.ID%len(devices)])); want != dev {
				return fmt.Errorf("worker %d is bound to %v, InitCCL asked for %v (bind devices with the session's DeviceIDs)", w.cfg.ID, dev, want)
			}
		}
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	ctx := w.ctx
	var exec func(func(uintptr) error) error
	if cd, ok := w.dev.(*device.CUDA); ok {
		exec = func(fn func(uintptr) error) error {
			return cd.Do(func(s cuda.Stream) error { return fn(uintptr(s)) })
		}
	}
	id, ctlID := splitID(backend, id)
	cfg := ccl.Config{ID: id, Rank: w.cfg.ID, Size: w.cfg.NumWorkers, Device: dev, Timeout: timeout, Exec: exec}
	var cs commSet
	defer func() { cs.close() }() // unless handed to w below
	if backend != "cpu" {
		// GPU backends check arguments across ranks on the host, through
		// a cpu communicator over the same workers.
		ccfg := cfg
		ccfg.ID = ctlID
		if cs.control, err = w.joinControl(ctx, ccfg, "control"); err != nil {
			return err
		}
		cfg.Control = cs.control
	}
	if cs.global, err = b.Join(ctx, cfg); err != nil {
		return fmt.Errorf("join %s communicator: %w", backend, err)
	}
	if w.cfg.NumGroups > 1 {
		gcfg := cfg
		gcfg.ID, gcfg.Rank, gcfg.Size = ccl.SubID(id, fmt.Sprintf("group/%d", w.GroupID())), w.WorkerRank(), w.groupN
		if cfg.Control != nil {
			gccfg := gcfg
			gccfg.ID = ccl.SubID(ctlID, fmt.Sprintf("group/%d", w.GroupID()))
			if cs.groupControl, err = w.joinControl(ctx, gccfg, "control"); err != nil {
				return err
			}
			gcfg.Control = cs.groupControl
		}
		if sp, ok := cs.global.(ccl.Splitter); ok {
			// NCCL ids come only from ncclGetUniqueId: groups are split
			// from the global communicator instead of joined by id.
			cs.group, err = sp.Split(ctx, w.GroupID(), w.WorkerRank(), gcfg.Control)
		} else {
			cs.group, err = b.Join(ctx, gcfg)
		}
		if err != nil {
			return fmt.Errorf("join %s group communicator: %w", backend, err)
		}
	}
	w.tcomms.global = newTracedComm(cs.global, w, "global", backend)
	w.tcomms.group = newTracedComm(cs.group, w, fmt.Sprintf("group %d", w.GroupID()), backend)
	w.commMu.Lock()
	w.comms, cs = cs, commSet{}
	w.commMu.Unlock()
	return nil
}

// joinControl joins the host communicator that shadows cfg's ranks.
func (w *Worker) joinControl(ctx context.Context, cfg ccl.Config, tag string) (ccl.Comm, error) {
	cb, err := w.backend(controlBackend(cfg.ID))
	if err != nil {
		return nil, err
	}
	cfg.ID, cfg.Device, cfg.Exec, cfg.Control = ccl.SubID(cfg.ID, tag), tensor.CPUDevice, nil, nil
	c, err := cb.Join(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("join host control communicator: %w", err)
	}
	return c, nil
}

// commSet is a worker's communicators: the global one, its group's, and
// the host control communicators of GPU backends.
type commSet struct {
	global, group, control, groupControl ccl.Comm
}

// close closes the communicators before the controls they use.
func (cs *commSet) close() {
	for _, c := range []ccl.Comm{cs.group, cs.global, cs.groupControl, cs.control} {
		if c != nil {
			c.Close()
		}
	}
	*cs = commSet{}
}

func (w *Worker) closeCCL() {
	w.closeIPC()
	w.tcomms.global, w.tcomms.group = nil, nil
	w.commMu.Lock()
	cs := w.comms
	w.comms = commSet{}
	w.commMu.Unlock()
	cs.close()
}

// Abort ends this worker's communicators and its custom all-reducer now,
// so a collective (or a device synchronization) that waits for a lost
// peer returns with ccl.ErrFailed, and cancels the context worker
// functions see. Safe from
// any goroutine; the session calls it on a fault or a stuck Shutdown.
func (w *Worker) Abort(reason error) {
	// The communicators first, so that a collective the cancel ends
	// reports the reason (ccl.ErrFailed), not just "context canceled".
	w.commMu.Lock()
	defer w.commMu.Unlock()
	for _, c := range []ccl.Comm{w.comms.group, w.comms.global} {
		if a, ok := c.(ccl.Aborter); ok {
			a.Abort(reason)
		}
	}
	w.cancel()
	// Custom all-reduce kernels spinning on a lost peer stop waiting.
	if w.ipc.ar != nil {
		w.ipc.ar.Abort()
	}
	for _, h := range w.ipc.hooks {
		h.Abort()
	}
}

// optTensor accepts a tensor or nil (for arguments only the root reads).
func optTensor(v any, name string) (*tensor.Tensor, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case *tensor.Tensor:
		return t, nil
	}
	return nil, fmt.Errorf("%w: %s must be a tensor or nil, got %T", registry.ErrBadArgs, name, v)
}

func init() {
	must := func(name string, fn any) {
		if err := Builtins.RegisterTyped(name, fn); err != nil {
			panic(err)
		}
	}
	must("chorus.init_ccl", func(env registry.Env, backend string, id []byte, devices tensor.Shape, timeoutMs int64) error {
		w, ok := env.(*Worker)
		if !ok {
			return fmt.Errorf("chorus.init_ccl needs a chorus worker, got %T", env)
		}
		return w.initCCL(backend, id, devices, timeoutMs)
	})
	ctx := func(env registry.Env) context.Context { return env.Context() }
	must("chorus.allreduce", func(env registry.Env, send *tensor.Tensor, op string, inGroup bool, recv *tensor.Tensor) error {
		o, err := reduce.ParseOp(op)
		if err != nil {
			return fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
		}
		c, err := registry.Comm(env, inGroup)
		if err != nil {
			return err
		}
		return c.AllReduce(ctx(env), send, recv, o)
	})
	must("chorus.reduce_scatter", func(env registry.Env, send *tensor.Tensor, op string, inGroup bool, recv *tensor.Tensor) error {
		o, err := reduce.ParseOp(op)
		if err != nil {
			return fmt.Errorf("%w: %v", registry.ErrBadArgs, err)
		}
		c, err := registry.Comm(env, inGroup)
		if err != nil {
			return err
		}
		return c.ReduceScatter(ctx(env), send, recv, o)
	})
	must("chorus.allgather", func(env registry.Env, send *tensor.Tensor, inGroup bool, recv *tensor.Tensor) error {
		c, err := registry.Comm(env, inGroup)
		if err != nil {
			return err
		}
		return c.AllGather(ctx(env), send, recv)
	})
	rooted := func(kind ccl.Kind) func(env registry.Env, send any, inGroup bool, recv any) error {
		return func(env registry.Env, send any, inGroup bool, recv any) error {
			s, err := optTensor(send, "send")
			if err != nil {
				return err
			}
			r, err := optTensor(recv, "recv")
			if err != nil {
				return err
			}
			c, err := registry.Comm(env, inGroup)
			if err != nil {
				return err
			}
			switch kind {
			case ccl.KindBroadcast:
				return c.Broadcast(ctx(env), s, r, 0)
			case ccl.KindScatter:
				return c.Scatter(ctx(env), s, r, 0)
			default:
				return c.Gather(ctx(env), s, r, 0)
			}
		}
	}
	must("chorus.broadcast_from_worker0", rooted(ccl.KindBroadcast))
	must("chorus.scatter_from_worker0", rooted(ccl.KindScatter))
	must("chorus.gather_to_worker0", rooted(ccl.KindGather))
	must("chorus.send_to_worker", func(env registry.Env, send *tensor.Tensor, dst int) error {
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		return c.Send(ctx(env), send, dst)
	})
	must("chorus.recv_from_worker", func(env registry.Env, recv *tensor.Tensor, src int) error {
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		return c.Recv(ctx(env), recv, src)
	})
	must("chorus.recv_from_worker0", func(env registry.Env, recv *tensor.Tensor) error {
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		return c.Recv(ctx(env), recv, 0)
	})
	must("chorus.send_to_next_group", func(env registry.Env, send *tensor.Tensor) error {
		peer := env.WorkerID() + env.GroupSize()
		if peer >= env.NumWorkers() {
			return fmt.Errorf("%w: worker %d is in the last group; there is no next group", registry.ErrBadArgs, env.WorkerID())
		}
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		return c.Send(ctx(env), send, peer)
	})
	must("chorus.recv_from_prev_group", func(env registry.Env, recv *tensor.Tensor) error {
		peer := env.WorkerID() - env.GroupSize()
		if peer < 0 {
			return fmt.Errorf("%w: worker %d is in the first group; there is no previous group", registry.ErrBadArgs, env.WorkerID())
		}
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		return c.Recv(ctx(env), recv, peer)
	})
	must("chorus.barrier", func(env registry.Env, inGroup bool) error {
		c, err := registry.Comm(env, inGroup)
		if err != nil {
			return err
		}
		return c.Barrier(ctx(env))
	})
}

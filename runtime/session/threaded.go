package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

// Options configure a session.
type Options struct {
	NumWorkers int
	// NumGroups divides NumWorkers into contiguous groups; 0 means 1.
	NumGroups int
	// Registry holds the functions of a threaded session's workers; nil
	// means registry.Global. Process workers always use the registry of
	// the program they run.
	Registry *registry.Registry
	// ShutdownGrace bounds how long Shutdown waits for workers before
	// forcing them (default 5 s).
	ShutdownGrace time.Duration
	// DeviceIDs binds worker i to GPU cuda:DeviceIDs[i % len(DeviceIDs)];
	// empty means every worker works on the host (cpu).
	DeviceIDs []int
	// OpenDevice opens the GPUs of a threaded session's workers; nil means
	// the real CUDA devices (worker.OpenFake gives host-memory fakes), or
	// fakes when CHORUS_FAKE_GPU=1. Process workers use CUDA, or fakes
	// (ProcessOptions.Worker.FakeGPU).
	OpenDevice worker.DeviceOpener
	// Worker are the workers' settings; a process session sends them in
	// each worker's spec (workers read no environment of their own).
	// Fields left zero come from the controller's environment (and a
	// process session's Env over it): FakeGPU from CHORUS_FAKE_GPU,
	// CPUProfile from CHORUS_CPUPROFILE, IPCAutoTable from
	// CHORUS_IPC_AUTO_TABLE (docs/configuration.md). Threaded workers use
	// FakeGPU (unless OpenDevice is set), IPCAutoTable, SkipChecks and
	// CPU.
	Worker worker.Options
	// Wait is a threaded session's wait policy: "auto", "busy", "yield"
	// or "park" (docs/performance.md); "" means CHORUS_SESSION_WAIT, or
	// auto.
	Wait string

	// Trace writes a trace of the session (Trace Event Format) to this
	// file at Shutdown; "" means the CHORUS_TRACE environment variable,
	// or no trace (docs/observability.md).
	Trace string
	// HangReport: when a blocking call (Sync, GetGlobalFunc, a fetch) has
	// waited this long, the controller reports which workers have not
	// answered and what each was last doing, again after twice as long,
	// and so on. 0 means CHORUS_HANG_REPORT or 10 s; negative: never.
	HangReport time.Duration
	// HangOutput receives hang reports; nil means os.Stderr.
	HangOutput io.Writer
	// WorkerDeadline: when the workers a blocking call awaits have
	// neither answered nor made progress (their flight recorders did not
	// move) for this long, the workers holding them up count as lost (a
	// LostError; a process worker is killed and the others' collectives
	// aborted): peers that have not reached the collective the awaited
	// workers wait in, or whose process is not running, else the awaited
	// workers. 0 means CHORUS_WORKER_DEADLINE, or never; negative: never.
	WorkerDeadline time.Duration
}

func (o Options) checkDevices() error {
	for _, d := range o.DeviceIDs {
		if d < 0 {
			return fmt.Errorf("session: negative device id %d", d)
		}
	}
	return nil
}

// deviceOf is worker i's device.
func (o Options) deviceOf(i int) tensor.Device {
	if len(o.DeviceIDs) == 0 {
		return tensor.CPUDevice
	}
	return tensor.CUDADevice(o.DeviceIDs[i%len(o.DeviceIDs)])
}

func (o Options) grace() time.Duration {
	if o.ShutdownGrace > 0 {
		return o.ShutdownGrace
	}
	return 5 * time.Second
}

// cmdSlot is a command as the command log holds it: padded so that an
// entry is two cache lines (128 bytes; blocks are page aligned, see
// logBlockLen), the first of which holds the sequence number and every
// field a command is read for (wire.Command's field order;
// TestCmdSlotLayout).
type cmdSlot struct {
	wire.Command
	_ [128 - 16 - unsafe.Sizeof(wire.Command{})]byte
}

// threaded runs each worker as a goroutine. Commands travel as Go values
// through one log that every worker reads (a broadcast is one append),
// replies through one log per worker. A worker drains everything
// published before it waits again, and a producer wakes a consumer only
// when it is parked, so a burst of commands costs at most one wake-up.
// How consumers wait (poll, then park) is the session's waitPolicy.
type threaded struct {
	n       int
	pol     waitPolicy
	cmds    *mlog[cmdSlot]
	replies []*mlog[wire.Reply]
	ackr    []wire.Reply  // the reply each worker's last acknowledgement stands for
	done    chan struct{} // closed by stop: unblocks everyone
	exited  []chan struct{}
	ws      []*worker.Worker // for Abort from stop; otherwise owned by run
	wg      sync.WaitGroup
	lostErr atomic.Pointer[LostError]
	onLost  func(*LostError)
	endOnce sync.Once
}

// fail marks worker le.Worker lost (it did not answer by the session's
// WorkerDeadline): the session fails, every worker's communicators are
// aborted (a collective waiting for it ends), and every wait returns.
// The goroutine of a worker stuck inside a function cannot be stopped;
// Shutdown reports it.
func (t *threaded) fail(le *LostError) {
	if !t.lostErr.CompareAndSwap(nil, le) {
		return
	}
	if t.onLost != nil {
		t.onLost(le)
	}
	for _, w := range t.ws {
		w.Abort(le)
	}
	t.end()
}

// end closes done once and wakes every parked waiter.
func (t *threaded) end() {
	t.endOnce.Do(func() {
		close(t.done)
		// Futex-parked waiters do not select on done: wake them.
		t.cmds.wakeAll()
		for _, l := range t.replies {
			l.wakeAll()
		}
	})
}

// NewThreaded starts a session whose workers are goroutines.
func NewThreaded(opts Options) (*Session, error) {
	groups, err := validateCounts(opts.NumWorkers, opts.NumGroups)
	if err != nil {
		return nil, err
	}
	if err := checkMax("threaded", opts.NumWorkers); err != nil {
		return nil, err
	}
	if err := opts.checkDevices(); err != nil {
		return nil, err
	}
	n := opts.NumWorkers
	pol, err := sessionWaitPolicy(n, opts.Wait)
	if err != nil {
		return nil, err
	}
	wo, err := opts.workerOptions(nil)
	if err != nil {
		return nil, err
	}
	if opts.OpenDevice == nil && wo.FakeGPU {
		opts.OpenDevice = worker.OpenFake
	}
	obs, err := newObserver(opts, n)
	if err != nil {
		return nil, err
	}
	t := &threaded{n: n, pol: pol, cmds: newLog[cmdSlot](n, pol), done: make(chan struct{})}
	ws := make([]*worker.Worker, n)
	for i := range n {
		ring := trace.NewHeapRing(trace.DefaultRingSlots, i)
		rec := trace.NewRecorder(trace.ProcWorker(i), ring, obs.path != "")
		obs.rings[i] = ring
		obs.workerRecs = append(obs.workerRecs, rec)
		w, err := worker.New(worker.Config{ID: i, NumWorkers: n, NumGroups: groups, Device: opts.deviceOf(i), Registry: opts.Registry, OpenDevice: opts.OpenDevice, Trace: rec,
			IPCAutoTable: wo.IPCAutoTable, SkipChecks: wo.SkipChecks, CPU: wo.CPU})
		if err != nil {
			for _, o := range ws[:i] {
				o.Close()
			}
			return nil, err
		}
		ws[i] = w
		t.replies = append(t.replies, newLog[wire.Reply](1, pol))
		t.exited = append(t.exited, make(chan struct{}))
	}
	t.ws = ws
	t.ackr = make([]wire.Reply, n)
	for i, w := range ws {
		t.wg.Add(1)
		go t.run(i, w)
	}
	obs.kill = func(w int, why string) { t.fail(&LostError{Worker: w, Status: why}) }
	t.onLost = func(le *LostError) { obs.fault("worker lost", le.Error()) }
	return newSession("threaded", n, groups, t, opts.grace(), obs), nil
}

// run is worker i's goroutine; it exits on Shutdown or when stop gives up.
func (t *threaded) run(i int, w *worker.Worker) {
	defer t.wg.Done()
	defer close(t.exited[i])
	defer w.Close()
	cur := t.cmds.cons[i]
	for {
		if err := t.cmds.wait(cur, t.pol, t.pol.workerYields, nil, t.done); err != nil {
			return
		}
		for t.cmds.ready(cur) {
			slot, e := t.cmds.pop(cur)
			if slot == nil {
				continue // addressed to another worker
			}
			c := &slot.Command
			reply, notice, stop := w.Handle(c)
			rl := t.replies[i]
			if notice != nil {
				rl.put(*notice)
			}
			switch {
			case reply == nil:
			case reply.Plain():
				// The answer to nearly every Sync: a word the controller
				// loads along with every other worker's, instead of an
				// entry and a Reply it would fetch one after another.
				rl.ackTo(rl.cons[0], reply.Seq)
			default:
				rl.put(*reply)
			}
			w.FinishCommand()
			if c.Worker != wire.AllWorkers {
				done(e) // after the reply: off its critical path
			}
			if stop {
				return
			}
		}
	}
}

func (t *threaded) send(c *wire.Command) error {
	select {
	case <-t.done:
		return ErrShutdown
	default:
	}
	t.cmds.putTo(cmdSlot{Command: *c}, c.Worker)
	return nil
}

func (t *threaded) recv(ctx context.Context, w int) (*wire.Reply, error) {
	l := t.replies[w]
	cur := l.cons[0]
	if err := l.wait(cur, t.pol, t.pol.controllerYields, ctx, t.done); err != nil {
		return nil, err
	}
	return t.take(w), nil
}

// take returns worker w's next message, or nil: a reply or notice from
// its log, or the reply an acknowledgement stands for.
func (t *threaded) take(w int) *wire.Reply {
	l := t.replies[w]
	r, e, ack := l.take(l.cons[0])
	switch {
	case e != nil:
		// Copied out: the entry is cleared (a reply may hold a tensor,
		// which the log must not keep alive).
		out := new(wire.Reply)
		*out = *r
		done(e)
		return out
	case ack != 0:
		// Reused: a reply is read by the call that took it (collect,
		// await, absorb) and not kept after the next take of the worker.
		a := &t.ackr[w]
		*a = wire.Reply{Action: wire.ActReply, Seq: ack, Worker: int32(w)}
		return a
	}
	return nil
}

func (t *threaded) cheapPoll() bool { return true }

func (t *threaded) poll(w int) (*wire.Reply, error) { return t.take(w), nil }

func (t *threaded) lost() error {
	if le := t.lostErr.Load(); le != nil {
		return le
	}
	return nil
}

func (t *threaded) quiesce() {}

func (t *threaded) stop(grace time.Duration) error {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	expired := false
	var stuck []error
	for i, ex := range t.exited {
		if !expired {
			select {
			case <-ex:
				continue
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-ex:
		default:
			// A worker blocked on a device (a collective whose peers
			// never came) is released by aborting its communicators.
			t.ws[i].Abort(ErrShutdown)
			select {
			case <-ex:
				stuck = append(stuck, fmt.Errorf("worker %d did not stop within %v; its communicators were aborted", i, grace))
			case <-time.After(grace):
				stuck = append(stuck, fmt.Errorf("worker %d did not stop within %v (a function is still running)", i, grace))
			}
		}
	}
	t.end()
	if len(stuck) > 0 {
		return fmt.Errorf("session: Shutdown: %w", errors.Join(stuck...))
	}
	t.wg.Wait()
	return nil
}

func (t *threaded) close() {}

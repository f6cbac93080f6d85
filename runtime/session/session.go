package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/tensor"
)

// driver moves commands and replies for one kind of session. Calls are
// serialized by the Session, except shutdown.
type driver interface {
	// send delivers c to c.Worker, or to every worker for AllWorkers.
	send(c *wire.Command) error
	// recv returns worker w's next message.
	recv(ctx context.Context, w int) (*wire.Reply, error)
	// poll returns worker w's next message if one is ready, else nil.
	poll(w int) (*wire.Reply, error)
	// cheapPoll reports whether poll costs no more than a few loads (no
	// system call), so that collect may scan every worker for replies.
	cheapPoll() bool
	// lost returns the error that failed the session, if any.
	lost() error
	// quiesce announces that workers are about to be told to exit, so
	// that their exits are not taken for failures.
	quiesce()
	// stop ends the workers: the caller has sent the Shutdown command when
	// it could; stop waits up to grace, then forces, and finally aborts the
	// connections so that any call still waiting returns.
	stop(grace time.Duration) error
	// close frees the connections; no call is in flight.
	close()
}

var sessionIDs atomic.Uint64

// Session is the controller of a set of workers. Its methods are safe for
// concurrent use; commands are issued in the order the calls take the
// session's lock.
type Session struct {
	id      uint64
	n       int
	groups  int
	kind    string
	drv     driver
	grace   time.Duration
	lock    chan struct{} // a mutex that Shutdown can wait on with a timeout
	regs    *regAlloc
	seq     uint64
	stash   []error // failures learned but not yet returned
	notice  []noticeState
	all     []int         // 0..n-1, the workers a Sync awaits
	got     []*wire.Reply // collect's scratch (the lock's holder owns it)
	closed  atomic.Bool
	stopped sync.Once
	stopErr error
	obs     *observer
}

type noticeState struct {
	err      *wire.WorkerError
	reported bool
}

func newSession(kind string, n, groups int, drv driver, grace time.Duration, obs *observer) *Session {
	s := &Session{
		id: sessionIDs.Add(1), n: n, groups: groups, kind: kind, drv: drv, grace: grace,
		lock: make(chan struct{}, 1), regs: newRegAlloc(), notice: make([]noticeState, n), obs: obs,
		all: allWorkers(n), got: make([]*wire.Reply, n),
	}
	obs.start()
	return s
}

func validateCounts(n, groups int) (int, error) {
	if groups == 0 {
		groups = 1
	}
	if n < 1 {
		return 0, fmt.Errorf("session: num_workers %d < 1", n)
	}
	if groups < 1 || n%groups != 0 {
		return 0, fmt.Errorf("session: num_groups %d does not divide num_workers %d", groups, n)
	}
	return groups, nil
}

// NumWorkers is the number of workers.
func (s *Session) NumWorkers() int { return s.n }

// NumGroups is the number of worker groups.
func (s *Session) NumGroups() int { return s.groups }

// GroupSize is NumWorkers / NumGroups.
func (s *Session) GroupSize() int { return s.n / s.groups }

// Kind is "threaded" or "process".
func (s *Session) Kind() string { return s.kind }

// LiveRegisters counts registers in use (for leak checks).
func (s *Session) LiveRegisters() int {
	s.acquire()
	defer s.release()
	return s.regs.inUse()
}

func (s *Session) acquire() { s.lock <- struct{}{} }
func (s *Session) release() { <-s.lock }

// usable returns why no command can be sent, if so. Caller holds the lock.
func (s *Session) usable() error {
	if s.closed.Load() {
		return ErrShutdown
	}
	return s.drv.lost()
}

// DRef names the object in one register on every worker.
type DRef struct {
	s    *Session
	reg  int64
	gen  uint64
	name string // the function's, for a DRef made by GetGlobalFunc (traces)
}

// Reg is the register id.
func (d *DRef) Reg() int64 { return d.reg }

func (d *DRef) String() string { return fmt.Sprintf("DRef(%d)", d.reg) }

// Release frees the register on every worker (KillReg) so its id can be
// reused. Releasing twice is ErrReleased.
func (d *DRef) Release() error {
	if d == nil || d.s == nil {
		return errors.New("session: Release of a nil DRef")
	}
	s := d.s
	s.acquire()
	defer s.release()
	if err := s.checkRef(d, "Release"); err != nil {
		return err
	}
	s.regs.release(d.reg, d.gen)
	if err := s.usable(); err != nil {
		// Nothing to free on dead or stopped workers.
		return nil
	}
	return s.sendLocked(&wire.Command{Action: wire.ActKillReg, Worker: wire.AllWorkers, Reg: d.reg})
}

// checkRef verifies d is a live register of s. Caller holds the lock.
func (s *Session) checkRef(d *DRef, what string) error {
	if d == nil {
		return fmt.Errorf("session: %s: nil DRef", what)
	}
	if d.s != s {
		return fmt.Errorf("session: %s: %v: %w", what, d, ErrForeignRef)
	}
	if !s.regs.valid(d.reg, d.gen) {
		return fmt.Errorf("session: %s: %v: %w", what, d, ErrReleased)
	}
	return nil
}

func (s *Session) checkWorker(w int, what string) error {
	if w < 0 || w >= s.n {
		return fmt.Errorf("session: %s: worker %d: %w (have %d workers)", what, w, ErrBadWorker, s.n)
	}
	return nil
}

func (s *Session) sendLocked(c *wire.Command) error { return s.sendNamedLocked(c, "") }

// sendNamedLocked sends c; fn names the function of a CallPacked (for
// the trace).
func (s *Session) sendNamedLocked(c *wire.Command, fn string) error {
	s.seq++
	c.Seq = s.seq
	var t0 int64
	if s.obs.rec.Timeline() {
		t0 = trace.Now()
	}
	err := s.drv.send(c)
	if t0 != 0 {
		name := c.Action.String()
		if fn != "" {
			name += " " + fn
		}
		e := trace.Event{Track: s.obs.rec.Track(trace.ThreadCommands), Name: name, Cat: trace.CatCommand, Phase: trace.Complete,
			TS: t0, Dur: trace.Now() - t0, Args: trace.Args{Op: c.Action.String(), Seq: c.Seq}}
		if c.Action == wire.ActGetGlobalFunc {
			e.Name += " " + c.Name
		}
		if err != nil {
			e.Args.Error = err.Error()
		}
		s.obs.rec.Record(&e)
	}
	if err != nil {
		return s.wrapErr(c.Action.String(), err)
	}
	return nil
}

// wrapErr prefers the session's lost-worker error over the transport's
// view of it.
func (s *Session) wrapErr(op string, err error) error {
	if lost := s.drv.lost(); lost != nil && !errors.Is(err, ErrWorkerLost) {
		return fmt.Errorf("session: %s: %w", op, lost)
	}
	return fmt.Errorf("session: %s: %w", op, err)
}

func (s *Session) newRef() *DRef {
	id, gen := s.regs.alloc()
	return &DRef{s: s, reg: id, gen: gen}
}

// GetGlobalFunc looks name up on every worker and returns a DRef to the
// function. It waits for all workers, so an unknown name is an error here
// (wrapping ErrUnknownFunction), not at the first call.
func (s *Session) GetGlobalFunc(ctx context.Context, name string) (*DRef, error) {
	s.acquire()
	defer s.release()
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("session: GetGlobalFunc %q: %w", name, err)
	}
	ref := s.newRef()
	ref.name = name
	c := &wire.Command{Action: wire.ActGetGlobalFunc, Worker: wire.AllWorkers, Reg: ref.reg, Name: name}
	if err := s.sendLocked(c); err != nil {
		s.regs.release(ref.reg, ref.gen)
		return nil, err
	}
	own, err := s.collect(ctx, c, s.all)
	if err == nil && len(own) > 0 {
		err = joinErrors(own)
	}
	if err != nil {
		s.regs.release(ref.reg, ref.gen)
		if s.usable() == nil {
			_ = s.sendLocked(&wire.Command{Action: wire.ActKillReg, Worker: wire.AllWorkers, Reg: ref.reg})
		}
		return nil, fmt.Errorf("session: GetGlobalFunc %q: %w", name, err)
	}
	return ref, nil
}

// CallPacked calls the function in f on every worker with args and returns
// a DRef to the results. Arguments may be ints, floats, bools, strings,
// []byte, dtypes, devices, shapes, nil, or *DRef (replaced on each worker by
// that worker's register value). Host tensors cannot be passed here: put
// them in a register with DebugSetRegister or CopyToWorker0.
// The call is asynchronous; see the package comment for error reporting.
func (s *Session) CallPacked(f *DRef, args ...any) (*DRef, error) {
	s.acquire()
	defer s.release()
	return s.callLocked(f, true, args)
}

// CallPackedDiscard is CallPacked for functions whose result is not needed:
// the result goes to register 0 and no DRef is allocated.
func (s *Session) CallPackedDiscard(f *DRef, args ...any) error {
	s.acquire()
	defer s.release()
	_, err := s.callLocked(f, false, args)
	return err
}

func (s *Session) callLocked(f *DRef, keep bool, args []any) (*DRef, error) {
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("session: CallPacked: %w", err)
	}
	if err := s.checkRef(f, "CallPacked function"); err != nil {
		return nil, err
	}
	wargs := make([]any, len(args))
	for i, a := range args {
		switch x := a.(type) {
		case *DRef:
			if err := s.checkRef(x, fmt.Sprintf("CallPacked argument %d", i)); err != nil {
				return nil, err
			}
			wargs[i] = value.Ref(x.reg)
		case DRef:
			return nil, fmt.Errorf("session: CallPacked argument %d: pass *DRef, not DRef", i)
		case *tensor.Tensor:
			return nil, fmt.Errorf("session: CallPacked argument %d: host tensors are not call arguments (put them in a register with DebugSetRegister or CopyToWorker0)", i)
		case value.Ref:
			return nil, fmt.Errorf("session: CallPacked argument %d: raw register ids are not accepted; pass the *DRef", i)
		default:
			v, err := value.Normalize(a)
			if err != nil {
				return nil, fmt.Errorf("session: CallPacked argument %d: %w", i, err)
			}
			wargs[i] = v
		}
	}
	var ref *DRef
	var reg int64
	if keep {
		ref = s.newRef()
		reg = ref.reg
	}
	if err := s.sendNamedLocked(&wire.Command{Action: wire.ActCallPacked, Worker: wire.AllWorkers, Reg: reg, Func: f.reg, Args: wargs}, f.name); err != nil {
		if ref != nil {
			s.regs.release(ref.reg, ref.gen)
		}
		return nil, err
	}
	return ref, nil
}

// SyncWorker waits until worker w has executed every command issued before
// it, and returns the failures it reported since its previous reply, plus
// failures other workers have already announced.
func (s *Session) SyncWorker(ctx context.Context, w int) error {
	if err := s.checkWorker(w, "SyncWorker"); err != nil {
		return err
	}
	s.acquire()
	defer s.release()
	return s.syncLocked(ctx, []int{w}, int32(w))
}

// Sync waits for every worker (one broadcast command, every worker
// replies) and returns every failure reported since the previous sync.
func (s *Session) Sync(ctx context.Context) error {
	s.acquire()
	defer s.release()
	return s.syncLocked(ctx, s.all, wire.AllWorkers)
}

func (s *Session) syncLocked(ctx context.Context, ws []int, target int32) error {
	if err := s.usable(); err != nil {
		return fmt.Errorf("session: SyncWorker: %w", err)
	}
	c := &wire.Command{Action: wire.ActSyncWorker, Worker: target}
	if err := s.sendLocked(c); err != nil {
		return err
	}
	own, err := s.collect(ctx, c, ws)
	if err != nil {
		return fmt.Errorf("session: SyncWorker: %w", err)
	}
	return s.takeErrors(own)
}

// takeErrors joins own with everything stashed and clears the stash.
// Caller holds the lock.
func (s *Session) takeErrors(own []error) error {
	s.gatherNotices()
	all := append(s.stash, own...)
	s.stash = nil
	if s.obs.rec.Timeline() {
		for _, e := range all {
			s.obs.fault("worker error", e.Error())
		}
	}
	return joinErrors(all)
}

// gatherNotices moves announced-but-unreported failures of every worker
// into the stash, polling the transports for notices not yet read.
func (s *Session) gatherNotices() {
	for w := range s.n {
		for {
			r, err := s.drv.poll(w)
			if err != nil || r == nil {
				break
			}
			s.absorb(r)
		}
		if ns := &s.notice[w]; ns.err != nil && !ns.reported {
			ns.reported = true
			s.stash = append(s.stash, ns.err)
		}
	}
}

// absorb files a message that is not the awaited reply: a failure notice,
// or a late reply to a command whose wait was abandoned.
func (s *Session) absorb(r *wire.Reply) {
	w := int(r.Worker)
	if w < 0 || w >= s.n {
		return
	}
	switch r.Action {
	case wire.ActFailure:
		if len(r.Errors) > 0 && s.notice[w].err == nil {
			s.notice[w] = noticeState{err: r.Errors[0]}
		}
	case wire.ActReply:
		s.stash = append(s.stash, s.replyErrors(r)...)
	}
}

// replyErrors returns a reply's failures, minus the one a notice already
// delivered, and resets the worker's notice state.
func (s *Session) replyErrors(r *wire.Reply) []error {
	w := int(r.Worker)
	errs := r.Errors
	if ns := s.notice[w]; ns.err != nil && ns.reported && len(errs) > 0 {
		errs = errs[1:]
	}
	s.notice[w] = noticeState{}
	if len(errs) == 0 && r.Dropped == 0 {
		return nil // the common case allocates nothing
	}
	out := make([]error, 0, len(errs)+1)
	for _, e := range errs {
		out = append(out, e)
	}
	if r.Dropped > 0 {
		out = append(out, fmt.Errorf("worker %d: %d more failures not listed", w, r.Dropped))
	}
	return out
}

// collect waits for the reply to c from each worker in ws and returns the
// failures those replies carry: all of them for a sync, only those of c
// itself otherwise (the rest are stashed for the next sync). Other messages
// are absorbed.
//
// Replies are taken in the order they arrive: every reply already there
// is read before the controller waits for the first one missing. Reading
// them in worker order meant that when worker 0 answered last, the reads
// and decodes of the N-1 others (two cache misses and a decode each, for
// process sessions) all came after it. Their failures are still reported
// in worker order.
func (s *Session) collect(ctx context.Context, c *wire.Command, ws []int) ([]error, error) {
	one := int32(wire.AllWorkers)
	if len(ws) == 1 && s.n > 1 {
		one = int32(ws[0])
	}
	on := s.beginWait(c, one)
	defer s.endWait(c, on)
	got := s.got[:len(ws)]
	defer clear(got) // keep no reply alive
	left := len(ws)
	finish := func() []error {
		var own []error
		for _, r := range got {
			if r != nil {
				own = append(own, s.ownErrors(c, s.replyErrors(r))...)
			}
		}
		return own
	}
	first := 0 // got[:first] are all in
	scan := s.drv.cheapPoll()
	for left > 0 {
		if !scan {
			r, err := s.await(ctx, c, ws[first])
			if err != nil {
				return finish(), err
			}
			got[first] = r
			s.obs.answer(ws[first], c.Seq)
			first++
			left--
			continue
		}
		for i := first; i < len(ws); i++ {
			if got[i] != nil {
				continue
			}
			r, err := s.ready(c, ws[i])
			if err != nil {
				return finish(), err
			}
			if r != nil {
				got[i] = r
				left--
				s.obs.answer(ws[i], c.Seq)
			}
		}
		for first < len(ws) && got[first] != nil {
			first++
		}
		if left == 0 {
			break
		}
		r, err := s.await(ctx, c, ws[first])
		if err != nil {
			return finish(), err
		}
		got[first] = r
		s.obs.answer(ws[first], c.Seq)
		left--
	}
	// A worker declared lost while we waited (WorkerDeadline) fails the
	// call even if its reply came after all.
	if lost := s.drv.lost(); lost != nil {
		return finish(), lost
	}
	return finish(), nil
}

// ready returns worker w's reply to c if it has arrived, absorbing the
// other messages that came before it, or nil.
func (s *Session) ready(c *wire.Command, w int) (*wire.Reply, error) {
	for {
		r, err := s.drv.poll(w)
		if err != nil || r == nil {
			return nil, err
		}
		if r.Action == wire.ActReply && r.Seq == c.Seq {
			if int(r.Worker) != w {
				return nil, fmt.Errorf("worker %d answered on worker %d's connection", r.Worker, w)
			}
			return r, nil
		}
		s.absorb(r)
	}
}

// ownErrors keeps the failures of command c and stashes the rest.
func (s *Session) ownErrors(c *wire.Command, errs []error) []error {
	if c.Action == wire.ActSyncWorker {
		return errs
	}
	var own []error
	for _, e := range errs {
		var we *wire.WorkerError
		if errors.As(e, &we) && we.Op == c.Action && we.Reg == c.Reg {
			own = append(own, e)
		} else {
			s.stash = append(s.stash, e)
		}
	}
	return own
}

// await returns worker w's reply to c.
func (s *Session) await(ctx context.Context, c *wire.Command, w int) (*wire.Reply, error) {
	for {
		r, err := s.drv.recv(ctx, w)
		if err != nil {
			if ctx.Err() != nil {
				err := fmt.Errorf("waiting for worker %d: %w", w, ctx.Err())
				s.obs.fault("wait ended", err.Error())
				return nil, err
			}
			if lost := s.drv.lost(); lost != nil {
				return nil, lost
			}
			return nil, fmt.Errorf("waiting for worker %d: %w", w, err)
		}
		if r.Action == wire.ActReply && r.Seq == c.Seq {
			if int(r.Worker) != w {
				return nil, fmt.Errorf("worker %d answered on worker %d's connection", r.Worker, w)
			}
			return r, nil
		}
		s.absorb(r)
	}
}

// fetch sends a targeted command that returns a value and waits for it.
func (s *Session) fetch(ctx context.Context, op string, c *wire.Command, w int) (any, error) {
	if err := s.sendLocked(c); err != nil {
		return nil, err
	}
	on := s.beginWait(c, int32(w))
	r, err := s.await(ctx, c, w)
	if err == nil {
		s.obs.answer(w, c.Seq)
	}
	s.endWait(c, on)
	if err != nil {
		return nil, fmt.Errorf("session: %s: %w", op, err)
	}
	own := s.ownErrors(c, s.replyErrors(r))
	if len(own) > 0 {
		return nil, fmt.Errorf("session: %s: %w", op, joinErrors(own))
	}
	return r.Value, nil
}

// DebugGetFromRemote returns the value of register d on worker w. Tensors
// come back by value (a host copy).
func (s *Session) DebugGetFromRemote(ctx context.Context, d *DRef, w int) (any, error) {
	if err := s.checkWorker(w, "DebugGetFromRemote"); err != nil {
		return nil, err
	}
	s.acquire()
	defer s.release()
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("session: DebugGetFromRemote: %w", err)
	}
	if err := s.checkRef(d, "DebugGetFromRemote"); err != nil {
		return nil, err
	}
	v, err := s.fetch(ctx, "DebugGetFromRemote", &wire.Command{Action: wire.ActDebugGet, Worker: int32(w), Reg: d.reg}, w)
	if err != nil {
		return nil, err
	}
	return s.detach(v)
}

// detach makes sure a value handed to the caller shares no memory with a
// worker (threaded sessions pass pointers).
func (s *Session) detach(v any) (any, error) {
	if t, ok := v.(*tensor.Tensor); ok && s.kind == "threaded" {
		return t.Clone()
	}
	if b, ok := v.([]byte); ok && s.kind == "threaded" {
		return append([]byte(nil), b...), nil
	}
	return v, nil
}

// DebugSetRegister stores v in register d on worker w (tensors by value).
// Asynchronous.
func (s *Session) DebugSetRegister(d *DRef, v any, w int) error {
	if err := s.checkWorker(w, "DebugSetRegister"); err != nil {
		return err
	}
	nv, err := s.ownedValue(v, "DebugSetRegister")
	if err != nil {
		return err
	}
	s.acquire()
	defer s.release()
	if err := s.usable(); err != nil {
		return fmt.Errorf("session: DebugSetRegister: %w", err)
	}
	if err := s.checkRef(d, "DebugSetRegister"); err != nil {
		return err
	}
	return s.sendLocked(&wire.Command{Action: wire.ActDebugSet, Worker: int32(w), Reg: d.reg, Args: []any{nv}})
}

// ownedValue normalizes v and, for threaded sessions, copies tensors and
// bytes so that the worker never aliases the caller's memory.
func (s *Session) ownedValue(v any, op string) (any, error) {
	if _, ok := v.(*DRef); ok {
		return nil, fmt.Errorf("session: %s: a DRef is not a value", op)
	}
	nv, err := value.Normalize(v)
	if err != nil {
		return nil, fmt.Errorf("session: %s: %w", op, err)
	}
	if t, ok := nv.(*tensor.Tensor); ok {
		if !t.IsHost() {
			return nil, fmt.Errorf("session: %s: %w", op, tensor.ErrNotHost)
		}
	}
	if s.kind == "threaded" {
		return s.detach(nv)
	}
	return nv, nil
}

// NewRegister allocates an empty register, for DebugSetRegister.
func (s *Session) NewRegister() (*DRef, error) {
	s.acquire()
	defer s.release()
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("session: NewRegister: %w", err)
	}
	return s.newRef(), nil
}

// CopyToWorker0 copies host into the tensor in register d of worker 0;
// dtype and shape must match (checked on the worker: a mismatch is reported
// at the next sync). Asynchronous; host may be reused at once.
func (s *Session) CopyToWorker0(host *tensor.Tensor, d *DRef) error {
	if host == nil {
		return errors.New("session: CopyToWorker0: nil host tensor")
	}
	nv, err := s.ownedValue(host, "CopyToWorker0")
	if err != nil {
		return err
	}
	s.acquire()
	defer s.release()
	if err := s.usable(); err != nil {
		return fmt.Errorf("session: CopyToWorker0: %w", err)
	}
	if err := s.checkRef(d, "CopyToWorker0"); err != nil {
		return err
	}
	return s.sendLocked(&wire.Command{Action: wire.ActCopyToWorker0, Worker: 0, Reg: d.reg, Args: []any{nv}})
}

// CopyFromWorker0 copies the tensor in register d of worker 0 into host,
// which must have the same dtype and shape.
func (s *Session) CopyFromWorker0(ctx context.Context, host *tensor.Tensor, d *DRef) error {
	if host == nil {
		return errors.New("session: CopyFromWorker0: nil host tensor")
	}
	dst, err := host.HostBytes()
	if err != nil {
		return fmt.Errorf("session: CopyFromWorker0: %w", err)
	}
	s.acquire()
	defer s.release()
	if err := s.usable(); err != nil {
		return fmt.Errorf("session: CopyFromWorker0: %w", err)
	}
	if err := s.checkRef(d, "CopyFromWorker0"); err != nil {
		return err
	}
	v, err := s.fetch(ctx, "CopyFromWorker0", &wire.Command{Action: wire.ActCopyFromWorker0, Worker: 0, Reg: d.reg}, 0)
	if err != nil {
		return err
	}
	t, ok := v.(*tensor.Tensor)
	if !ok {
		return fmt.Errorf("session: CopyFromWorker0: worker 0 sent a %s", value.Describe(v))
	}
	if !tensor.SameLayout(t, host) {
		return fmt.Errorf("session: CopyFromWorker0: %w: worker 0 holds %s%v, host tensor is %s%v", ErrLayout, t.DType(), t.Shape(), host.DType(), host.Shape())
	}
	copy(dst, t.Bytes())
	return nil
}

// Shutdown stops every worker and releases the session's resources. It is
// idempotent, and returns even when workers hang or died: after the grace
// period, worker processes are killed. For threaded sessions a worker stuck
// inside a function cannot be stopped; Shutdown then reports it.
func (s *Session) Shutdown() error {
	s.stopped.Do(func() {
		locked := false
		select {
		case s.lock <- struct{}{}:
			locked = true
		case <-time.After(s.grace):
			// Another call is stuck waiting on a worker; stop anyway.
		}
		s.closed.Store(true)
		s.drv.quiesce()
		if locked && s.drv.lost() == nil {
			s.seq++
			_ = s.drv.send(&wire.Command{Action: wire.ActShutdown, Seq: s.seq, Worker: wire.AllWorkers})
		}
		s.obs.close()
		s.stopErr = s.drv.stop(s.grace)
		if err := s.obs.writeTrace(); err != nil {
			s.stopErr = errors.Join(s.stopErr, fmt.Errorf("session: trace %s: %w", s.obs.path, err))
		}
		if !locked {
			// The stuck call returns now that its connection is aborted.
			s.acquire()
		}
		s.drv.close()
		s.release()
	})
	return s.stopErr
}

// waitOps names blocking calls in hang reports.
var waitOps = map[wire.Action]*string{}

func init() {
	for _, a := range []wire.Action{wire.ActGetGlobalFunc, wire.ActSyncWorker, wire.ActCopyFromWorker0, wire.ActDebugGet, wire.ActPing} {
		name := a.String()
		waitOps[a] = &name
	}
}

// beginWait marks the start of a blocking wait for the hang watch and
// the trace; endWait (with what beginWait returned) marks its end.
func (s *Session) beginWait(c *wire.Command, one int32) (traced bool) {
	op := waitOps[c.Action]
	if op == nil {
		name := c.Action.String()
		op = &name
	}
	s.obs.beginWait(c, one, op)
	if !s.obs.rec.Timeline() {
		return false
	}
	s.obs.rec.Record(&trace.Event{Track: s.obs.rec.Track(trace.ThreadCommands), Name: "wait " + *op, Cat: trace.CatCommand, Phase: trace.Begin, Args: trace.Args{Seq: c.Seq}})
	return true
}

// sendBlocked is called when sending command seq (act) must wait for
// worker w (a process session's command log or w's ring, what, is full:
// w is that far behind): the wait is then one the hang report shows and
// the WorkerDeadline applies to, like a wait for w's reply. The returned
// func ends it.
func (s *Session) sendBlocked(seq uint64, act wire.Action, w int, what string) (end func()) {
	op := fmt.Sprintf("room in the command %s for %v", what, act)
	s.obs.beginWait(&wire.Command{Seq: seq, Action: act}, int32(w), &op)
	return s.obs.endWait
}

func (s *Session) endWait(c *wire.Command, traced bool) {
	s.obs.endWait()
	if traced {
		s.obs.rec.Record(&trace.Event{Track: s.obs.rec.Track(trace.ThreadCommands), Name: "wait " + *s.obs.waitOp.Load(), Cat: trace.CatCommand, Phase: trace.End, Args: trace.Args{Seq: c.Seq}})
	}
}

func allWorkers(n int) []int {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = i
	}
	return ws
}

// pingAll is the start-up handshake: a Ping every worker answers within
// timeout (0: 30 s).
func (s *Session) pingAll(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s.acquire()
	defer s.release()
	c := &wire.Command{Action: wire.ActPing, Worker: wire.AllWorkers}
	if err := s.sendLocked(c); err != nil {
		return err
	}
	own, err := s.collect(hctx, c, s.all)
	if err != nil {
		return err
	}
	return joinErrors(own)
}

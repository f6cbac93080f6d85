package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/internal/sys/shmem"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/transport"
	"github.com/chorus-rt/chorus/runtime/transport/shm"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/runtime/worker"
)

// procWorker is one child process and its connection.
type procWorker struct {
	id     int
	cmd    *exec.Cmd
	conn   transport.Conn
	exited chan struct{}
	status string // how the process ended, set before exited is closed
	clean  bool   // it exited with status 0
	ring   *trace.Ring
	ringM  []byte // the flight recorder's mapping
}

// process runs each worker as a child process.
type process struct {
	ws       []*procWorker
	base     int      // global id of local worker 0 (node agents of multi-host sessions)
	lifeline *os.File // write end; closing it tells workers to exit
	lostErr  atomic.Pointer[LostError]
	stopping atomic.Bool
	frame    []byte      // encode buffer, used under the session lock
	shmConns []*shm.Conn // every connection, when all are shared memory
	// log carries every command to every worker (shm, unless a test
	// set testNoLog); frames larger than an entry are redirects to
	// the workers' connections. Nil: commands go through the connections.
	log *shm.LogWriter
	// cur is the command being sent; blocked (set by NewProcess) puts a
	// send that waits for a worker behind by a whole log, or by a whole
	// ring (where the command log is off, and for frames larger than a
	// log entry), under the hang watch, which declares it lost after the
	// WorkerDeadline.
	curSeq  uint64 // 0: nothing sent yet
	curAct  wire.Action
	blocked func(seq uint64, act wire.Action, w int, what string) (end func())
	// acked[i] is the last acknowledgement of worker i turned into a
	// reply (shm: a worker acknowledges a reply without payload instead
	// of sending a frame, see worker.Serve).
	acked    []uint64
	ackr     []wire.Reply // the reply each worker's last acknowledgement stands for
	watchers sync.WaitGroup
	lifeOnce sync.Once
	onLost   atomic.Pointer[func(*LostError)] // set after the watchers start
}

// NewProcess starts a session whose workers are child processes, waits
// until every worker answered a ping (bounded by ctx and
// opts.StartTimeout), and returns it.
func NewProcess(ctx context.Context, opts ProcessOptions) (*Session, error) {
	if err := refuseInsideWorker(); err != nil {
		return nil, err
	}
	groups, err := validateCounts(opts.NumWorkers, opts.NumGroups)
	if err != nil {
		return nil, err
	}
	if err := checkMax("process", opts.NumWorkers); err != nil {
		return nil, err
	}
	if err := opts.checkDevices(); err != nil {
		return nil, err
	}
	if opts.Transport == "" {
		opts.Transport = "shm"
	}
	if opts.Transport != "shm" && opts.Transport != "stream" {
		return nil, fmt.Errorf("session: unknown transport %q (want shm or stream)", opts.Transport)
	}
	prog := opts.Program
	if prog == "" {
		if prog, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("session: cannot find this program to start workers: %w", err)
		}
	}
	stderr := opts.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	n := opts.NumWorkers
	obs, err := newObserver(opts.Options, n)
	if err != nil {
		return nil, err
	}
	tracePath := "" // the prefix of the workers' part files
	if obs.path != "" {
		tracePath = fmt.Sprintf("%s.%d", obs.path, partTags.Add(1))
	}
	p, err := startProcesses(opts, prog, stderr, 0, n, n, groups, tracePath)
	if err != nil {
		return nil, err
	}
	for i, w := range p.ws {
		obs.rings[i], obs.pids[i] = w.ring, w.cmd.Process.Pid
		if tracePath != "" {
			obs.parts = append(obs.parts, partPath(tracePath, w.id))
		}
	}
	obs.kill = p.kill
	onLost := func(le *LostError) { obs.fault("worker lost", le.Error()) }
	p.onLost.Store(&onLost)
	s := newSession("process", n, groups, p, opts.grace(), obs)
	p.blocked = s.sendBlocked
	if err := s.pingAll(ctx, opts.StartTimeout); err != nil {
		_ = s.Shutdown()
		if errors.Is(err, ErrWorkerLost) {
			// A worker that exits before its first answer is most often
			// a program whose main does not begin with worker.Main.
			return nil, fmt.Errorf("session: workers did not start (program %s; it must call worker.Main() first in main, and its stderr above may say more): %w", prog, err)
		}
		return nil, fmt.Errorf("session: workers did not start (program %s): %w", prog, err)
	}
	return s, nil
}

// startProcesses starts count worker processes with global ids base,
// base+1, ... of a session of total workers.
func startProcesses(opts ProcessOptions, prog string, stderr io.Writer, base, count, total, groups int, tracePath string) (*process, error) {
	wo, err := opts.workerOptions(opts.Env)
	if err != nil {
		return nil, err
	}
	opts.Worker = wo
	p := &process{base: base}
	lr, lw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("session: lifeline pipe: %w", err)
	}
	p.lifeline = lw
	defer lr.Close()
	var logFile *os.File
	if opts.Transport == "shm" {
		if !testNoLog.Load() {
			lg, f, err := shm.CreateLog(count, shm.Options{SpinDuration: opts.Spin, Yield: yieldFor(count)})
			if err != nil {
				lw.Close()
				return nil, fmt.Errorf("session: broadcast log: %w", err)
			}
			p.log, logFile = lg, f
			defer logFile.Close()
			lg.OnWait(func(i int) func() { return p.sendWaits(i, "log") })
		}
	}
	var startErr error
	for i := range count {
		pw, err := p.start(i, count, total, groups, prog, opts, lr, logFile, stderr, tracePath)
		if err != nil {
			startErr = fmt.Errorf("session: start worker %d: %w", base+i, err)
			break
		}
		p.ws = append(p.ws, pw)
	}
	if opts.Transport == "shm" && startErr == nil {
		for i, pw := range p.ws {
			c := pw.conn.(*shm.Conn)
			c.OnWait(func() func() { return p.sendWaits(i, "ring") })
			p.shmConns = append(p.shmConns, c)
		}
		p.acked = make([]uint64, len(p.ws))
		p.ackr = make([]wire.Reply, len(p.ws))
	}
	if opts.Transport == "stream" && startErr == nil {
		for i, pw := range p.ws {
			// A write that waited streamProbe for the worker to read.
			err := pw.conn.(*transport.Stream).OnWait(streamProbe, func() func() { return p.sendWaits(i, "stream") })
			if err != nil {
				startErr = fmt.Errorf("session: worker %d's stream: %w", base+i, err)
				break
			}
		}
	}
	// Watchers start only once p.ws is final: they read it.
	for _, pw := range p.ws {
		p.watchers.Add(1)
		go p.watch(pw)
	}
	if startErr != nil {
		p.abortAll(startErr)
		_ = p.stop(0)
		p.close()
		return nil, startErr
	}
	return p, nil
}

// sendWaits is the OnWait hook of worker i's log consumer, ring or
// stream (what): the send in progress waits for that worker.
func (p *process) sendWaits(i int, what string) (end func()) {
	if p.blocked == nil || p.curSeq == 0 {
		return nil
	}
	return p.blocked(p.curSeq, p.curAct, p.base+i, what)
}

// testNoLog (tests only, export_test.go) sends a process session's
// commands through each worker's ring instead of the broadcast log, so
// that both stay tested; the log made 8 workers 1.5x and 12 workers 1.8x
// faster (docs/performance.md), so programs always use it.
var testNoLog atomic.Bool

// yieldFor decides whether shared-memory waiters should yield their CPU
// while polling: yes when the controller and n workers outnumber the CPUs,
// since a busy poller would then delay the very process it waits for
// (docs/performance.md, "Polling").
func yieldFor(n int) bool {
	return n+1 > runtime.NumCPU()
}

// partPath is where worker id writes its trace events: prefix is the
// trace file's name and a number that keeps sessions of one process
// apart (partTags).
func partPath(prefix string, id int) string {
	return fmt.Sprintf("%s.worker-%d.part", prefix, id)
}

var partTags atomic.Uint64

// newFlight makes worker id's flight recorder in a memfd that the worker
// maps too, so that the controller can read it whatever the worker's
// state.
func newFlight(id int) (*trace.Ring, []byte, *os.File, error) {
	fd, err := shmem.MemfdCreate(fmt.Sprintf("chorus-flight-%d", id))
	if err != nil {
		return nil, nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "chorus-flight")
	size := trace.RingSize(trace.DefaultRingSlots)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("flight recorder: %w", err)
	}
	mem, err := shmem.Map(fd, size)
	if err != nil {
		f.Close()
		return nil, nil, nil, fmt.Errorf("flight recorder: %w", err)
	}
	r, err := trace.NewRing(mem, trace.DefaultRingSlots, id)
	if err != nil {
		shmem.Unmap(mem)
		f.Close()
		return nil, nil, nil, err
	}
	return r, mem, f, nil
}

// streamProbe is how long a write to a worker's stream waits before the
// wait is put under the hang watch (each write sets a deadline for it).
const streamProbe = 10 * time.Millisecond

func (p *process) start(i, n, total, groups int, prog string, opts ProcessOptions, lifeline, logFile *os.File, stderr io.Writer, tracePath string) (*procWorker, error) {
	var conn transport.Conn
	var child *os.File
	switch opts.Transport {
	case "shm":
		c, memfd, err := shm.Create(shm.Options{RingSize: opts.RingSize, SpinDuration: opts.Spin, Yield: yieldFor(n)})
		if err != nil {
			return nil, err
		}
		conn, child = c, memfd
	case "stream":
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("socketpair: %w", err)
		}
		// Our end is non-blocking so reads can honour deadlines through
		// the runtime poller; the worker's end stays blocking.
		if err := syscall.SetNonblock(fds[0], true); err != nil {
			syscall.Close(fds[0])
			syscall.Close(fds[1])
			return nil, fmt.Errorf("socketpair: %w", err)
		}
		conn = transport.NewStream(os.NewFile(uintptr(fds[0]), fmt.Sprintf("chorus-worker-%d", i)), 0)
		child = os.NewFile(uintptr(fds[1]), "chorus-transport")
	}
	ring, ringM, flight, err := newFlight(p.base + i)
	if err != nil {
		child.Close()
		conn.Close()
		return nil, err
	}
	defer flight.Close()
	spec := worker.Spec{ID: p.base + i, NumWorkers: total, NumGroups: groups, Transport: opts.Transport, Device: opts.deviceOf(i), Log: -1,
		Flight: true, Options: opts.Worker}
	if logFile != nil {
		spec.Log = i
	}
	if tracePath != "" {
		spec.TraceFile = partPath(tracePath, p.base+i)
	}
	cmd := exec.Command(prog, opts.Args...)
	cmd.Env = append(append(config.Inherited(), opts.Env...), worker.EnvSpec+"="+spec.String())
	cmd.ExtraFiles = []*os.File{lifeline, child, flight} // fds 3, 4 and 5
	if logFile != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, logFile) // fd 6
	}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	err = cmd.Start()
	child.Close()
	if err != nil {
		conn.Close()
		shmem.Unmap(ringM)
		return nil, err
	}
	return &procWorker{id: p.base + i, cmd: cmd, conn: conn, exited: make(chan struct{}), ring: ring, ringM: ringM}, nil
}

// watch owns the wait on one child. A child that exits while the session
// is not stopping fails the session: every pending and later call returns
// a LostError naming it.
func (p *process) watch(pw *procWorker) {
	defer p.watchers.Done()
	err := pw.cmd.Wait()
	status := "exited"
	if st := pw.cmd.ProcessState; st != nil {
		status = st.String()
	} else if err != nil {
		status = err.Error()
	}
	pw.status = status
	pw.clean = err == nil && pw.cmd.ProcessState != nil && pw.cmd.ProcessState.Success()
	close(pw.exited)
	if p.stopping.Load() {
		return
	}
	p.fail(&LostError{Worker: pw.id, PID: pw.cmd.Process.Pid, Status: status})
}

// fail records the session's first LostError, fails every connection, and
// asks the surviving workers to abort their communicators: they may be
// waiting in a collective for the worker that is gone.
func (p *process) fail(le *LostError) {
	if !p.lostErr.CompareAndSwap(nil, le) {
		return
	}
	if f := p.onLost.Load(); f != nil {
		(*f)(le)
	}
	p.abortAll(le)
	for _, o := range p.ws {
		if o.id == le.Worker {
			continue
		}
		select {
		case <-o.exited:
		default:
			_ = o.cmd.Process.Signal(worker.SignalAbort)
		}
	}
}

// kill ends worker w (a global id) that did not answer by the session's
// WorkerDeadline: the session fails with a LostError naming it, the other
// workers abort their collectives, and the process is killed (also when
// it is stopped).
func (p *process) kill(w int, why string) {
	i := w - p.base
	if i < 0 || i >= len(p.ws) {
		return
	}
	pw := p.ws[i]
	p.fail(&LostError{Worker: w, PID: pw.cmd.Process.Pid, Status: why})
	_ = pw.cmd.Process.Kill()
}

func (p *process) abortAll(err error) {
	if p.log != nil {
		p.log.Abort(err)
	}
	for _, w := range p.ws {
		w.conn.Abort(err)
	}
}

func (p *process) quiesce() { p.stopping.Store(true) }

func (p *process) lost() error {
	if le := p.lostErr.Load(); le != nil {
		return le
	}
	return nil
}

// markLost fails the session because worker w's connection broke.
func (p *process) markLost(w int, err error) error {
	p.fail(&LostError{Worker: p.base + w, PID: p.ws[w].cmd.Process.Pid, Status: err.Error()})
	return p.lost()
}

func (p *process) send(c *wire.Command) error {
	var err error
	p.frame, err = wire.AppendCommand(p.frame[:0], c)
	if err != nil {
		return err
	}
	p.curSeq, p.curAct = c.Seq, c.Action
	if p.log != nil {
		to := shm.LogAll
		if c.Worker != wire.AllWorkers {
			to = int(c.Worker) - p.base
		}
		if len(p.frame) <= shm.LogMaxInline {
			if i, err := p.log.Put(to, p.frame); err != nil {
				return p.logErr(i, err)
			}
			return nil
		}
		// The entry first, then the frame: a worker reads a frame larger
		// than its ring while it is written.
		if i, err := p.log.PutRedirect(to); err != nil {
			return p.logErr(i, err)
		}
	}
	if c.Worker != wire.AllWorkers {
		return p.sendTo(int(c.Worker)-p.base, true)
	}
	if p.shmConns != nil {
		// One entry and one publication for all rings (see shm.SendAll).
		if i, err := shm.SendAll(p.shmConns, p.frame); err != nil {
			return p.ioErr(i, err)
		}
		return nil
	}
	for i := range p.ws {
		if err := p.sendTo(i, false); err != nil {
			return err
		}
	}
	for i, w := range p.ws {
		if err := w.conn.Flush(); err != nil {
			return p.ioErr(i, err)
		}
	}
	return nil
}

func (p *process) sendTo(i int, flush bool) error {
	w := p.ws[i]
	if err := w.conn.Send(p.frame); err != nil {
		return p.ioErr(i, err)
	}
	if flush {
		if err := w.conn.Flush(); err != nil {
			return p.ioErr(i, err)
		}
	}
	return nil
}

// logErr is ioErr for the broadcast log: worker w (-1: none in
// particular) caused err.
func (p *process) logErr(w int, err error) error {
	if w >= 0 {
		return p.ioErr(w, err)
	}
	if lost := p.lost(); lost != nil {
		return lost
	}
	return fmt.Errorf("session: broadcast log: %w", err)
}

// ioErr turns a transport failure on worker w's connection into the
// session's LostError: a connection that failed cannot be trusted again.
func (p *process) ioErr(w int, err error) error {
	if lost := p.lost(); lost != nil {
		return lost
	}
	// The watcher will report the exit status if the worker died; give it
	// a moment so the error says how.
	select {
	case <-p.ws[w].exited:
	case <-time.After(500 * time.Millisecond):
	}
	if lost := p.lost(); lost != nil {
		return lost
	}
	return p.markLost(w, err)
}

func (p *process) recv(ctx context.Context, w int) (*wire.Reply, error) {
	var frame []byte
	var err error
	if p.shmConns != nil {
		var ack uint64
		frame, ack, err = p.shmConns[w].RecvOrAck(ctx, p.acked[w]+1)
		if err == nil && frame == nil {
			return p.ackReply(w, ack), nil
		}
	} else {
		frame, err = p.ws[w].conn.Recv(ctx)
	}
	if err != nil {
		// The transport's deadline may fire a moment before ctx's own
		// timer, so test the error, not only ctx.
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, p.ioErr(w, err)
	}
	r, err := wire.DecodeReply(frame)
	if err != nil {
		// A corrupt stream cannot be resynchronised.
		return nil, p.markLost(w, fmt.Errorf("corrupt reply: %w", err))
	}
	return r, nil
}

// cheapPoll: a shared-memory ring is polled with a load; a stream needs
// a ppoll system call.
func (p *process) cheapPoll() bool { return p.shmConns != nil }

// poll reads a message from worker w if the transport can tell that one
// has arrived (shared memory by looking at the ring, a stream with a
// zero-timeout ppoll).
func (p *process) poll(w int) (*wire.Reply, error) {
	if p.shmConns != nil {
		c := p.shmConns[w]
		// The acknowledgement first: frames sent before it are then
		// Pending, and are read first.
		ack := c.Acked()
		if p.lost() != nil {
			return nil, nil
		}
		if !c.Pending() {
			if ack > p.acked[w] {
				return p.ackReply(w, ack), nil
			}
			return nil, nil
		}
		return p.recv(context.Background(), w)
	}
	pc, ok := p.ws[w].conn.(transport.Poller)
	if !ok || p.lost() != nil || !pc.Pending() {
		return nil, nil
	}
	return p.recv(context.Background(), w)
}

// ackReply is the reply that worker w's acknowledgement ack stands for:
// the reply to command ack, with no value and no failures.
//
// Reused: a reply is read by the call that took it (collect, await,
// absorb) and not kept after the next message of the worker.
func (p *process) ackReply(w int, ack uint64) *wire.Reply {
	p.acked[w] = ack
	a := &p.ackr[w]
	*a = wire.Reply{Action: wire.ActReply, Seq: ack, Worker: int32(p.base + w)}
	return a
}

// stop ends the children: wait for a clean exit after the Shutdown command,
// then close the lifeline (workers exit by themselves), then SIGKILL.
func (p *process) stop(grace time.Duration) error {
	p.stopping.Store(true)
	wait := func(d time.Duration) bool {
		timer := time.NewTimer(d)
		defer timer.Stop()
		for _, w := range p.ws {
			select {
			case <-w.exited:
			case <-timer.C:
				return false
			}
		}
		return true
	}
	var errs []error
	wasLost := p.lost() != nil
	if wasLost || !wait(grace) {
		if !wasLost {
			for _, w := range p.ws {
				select {
				case <-w.exited:
				default:
					errs = append(errs, fmt.Errorf("worker %d (pid %d) still busy %v after Shutdown; forced to exit", w.id, w.cmd.Process.Pid, grace))
				}
			}
		}
		p.closeLifeline()
		if !wait(grace) {
			for _, w := range p.ws {
				select {
				case <-w.exited:
				default:
					errs = append(errs, fmt.Errorf("worker %d (pid %d) ignored its lifeline; killed", w.id, w.cmd.Process.Pid))
					_ = w.cmd.Process.Kill()
				}
			}
		}
	}
	p.watchers.Wait()
	if !wasLost && len(errs) == 0 {
		// Every worker exited on its own; each must have done so cleanly.
		for _, w := range p.ws {
			if !w.clean {
				errs = append(errs, fmt.Errorf("worker %d (pid %d) ended badly during Shutdown: %s", w.id, w.cmd.Process.Pid, w.status))
			}
		}
	}
	p.closeLifeline()
	p.abortAll(ErrShutdown)
	if len(errs) > 0 {
		return fmt.Errorf("session: Shutdown: %w", errors.Join(errs...))
	}
	return nil
}

func (p *process) closeLifeline() {
	p.lifeOnce.Do(func() { p.lifeline.Close() })
}

func (p *process) close() {
	if p.log != nil {
		p.log.Close()
	}
	for _, w := range p.ws {
		w.conn.Close()
		if w.ringM != nil {
			w.ring = nil
			shmem.Unmap(w.ringM)
			w.ringM = nil
		}
	}
	p.closeLifeline()
}

// PIDs returns the worker process ids (nil for threaded sessions).
func (s *Session) PIDs() []int {
	p, ok := s.drv.(*process)
	if !ok {
		return nil
	}
	out := make([]int, len(p.ws))
	for i, w := range p.ws {
		out[i] = w.cmd.Process.Pid
	}
	return out
}

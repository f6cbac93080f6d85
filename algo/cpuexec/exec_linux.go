package cpuexec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/sys/shmem"
	"github.com/chorus-rt/chorus/tensor"
)

// Executor is one rank's handle on a plan loaded by every rank of a
// communicator. Run is called by one goroutine at a time.
type Executor struct {
	p       *plan.Plan
	pr      *program
	id      []byte
	rank, n int
	timeout time.Duration
	spin    time.Duration
	yield   bool

	seg *ctlSegment

	data   []byte // current data segment mapping (all ranks' buffers)
	gen    int    // its generation
	stride int64  // bytes per rank in it

	epoch uint64 // barriers this rank arrived at
	seq   uint64 // calls made

	expect []uint64 // wait counters per channel of this rank (atomic)
	sems   []atomic.Int64
	bars   []barrierState
	tbs    []*tbRun

	// workers[w] are the thread blocks worker w runs as coroutines;
	// worker 0 is Run's goroutine, the others (wk[w-1]) are goroutines
	// started by Join and stopped by Close.
	workers [][]*tbRun
	wk      []*workerG
	wg      sync.WaitGroup
	// sp take pieces of the rank's large copies and reduces where the
	// rank has more cores than workers (spare_linux.go); nil: none.
	sp *spares

	// synced: the plan orders every remote access before the owner's
	// last op (selfSynced), so calls end without a barrier.
	synced bool
	// inPrologue: calls have no start barrier; ranks check each other's
	// call descriptors once their thread blocks' prologues (signals and
	// waits that reach every peer) are done, before any other op
	// (checkInPrologue). pro: the prologue length of each thread block.
	inPrologue bool
	pro        []int
	// aliasIn, aliasOut: no other rank touches this rank's input (output)
	// buffer and (input) no op writes it, so the plan runs on the caller's
	// tensor itself.
	aliasIn, aliasOut bool
	use               [4]bufferUse // this rank's buffers, from every op
	lw                *localWorld  // registered at Join, left at Close
	world             *localWorld  // lw when every rank is in this process

	sizes map[sizeKey]*sizing // layouts by call sizes
	// What cleanScratch knows of this rank's region of the data segment
	// of generation cleanGen (packet plans): dirty are the byte ranges
	// that may hold plain data (inputs and outputs) since they were
	// zeroed; maxEnd is the end of the furthest scratch a call used;
	// scratchKey the sizes of the last call (scratchOK: set).
	// plainScratch: some op of the plan keeps plain data in a scratch.
	cleanGen     int
	dirty        []span
	maxEnd       int64
	scratchKey   sizeKey
	scratchOK    bool
	plainScratch bool
	c            call // the call in flight, reused
	descs        []desc

	closed bool
}

// sizeKey and sizing cache what a call's sizes imply.
type sizeKey struct {
	dt      tensor.DType
	in, out int64
}

type sizing struct {
	lays []plan.Layout
	regs []regions
	need int64
	err  error
}

// workerG is a worker goroutine's mailbox: one call in, its error out.
type workerG struct {
	start chan *call
	done  chan error
}

// workersOverride, when positive, fixes the number of workers per rank
// (tests use it to run the multi-worker path on small machines).
var workersOverride atomic.Int32

// noDirect, when set, keeps goroutine ranks on the data segment as if
// they were processes (tests use it to exercise staging).
var noDirect atomic.Bool

type barrierState struct {
	count atomic.Int64
	gen   atomic.Uint64
}

// Join compiles rank cfg.Rank's part of p, maps the executor's shared
// segment (named after cfg.ID) and waits until every rank of cfg.Size has
// joined with the same plan. Every rank must call Join with the same id and
// plan; a rank missing after cfg.Timeout (default 60 s) fails the others.
func Join(ctx context.Context, cfg ccl.Config, p *plan.Plan) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cpuexec: %w", err)
	}
	if p == nil {
		return nil, fmt.Errorf("cpuexec: %w: nil plan", ccl.ErrBadArgs)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("cpuexec: plan %q: %w", p.Name, err)
	}
	if p.NumRanks() != cfg.Size {
		return nil, fmt.Errorf("cpuexec: %w: plan %q has %d ranks, the communicator %d", ccl.ErrBadArgs, p.Name, p.NumRanks(), cfg.Size)
	}
	pr, err := compile(p, cfg.Rank)
	if err != nil {
		return nil, err
	}
	seg, err := openControl(ctx, cfg, pr)
	if err != nil {
		return nil, err
	}
	if cfg.Rank == 0 {
		// Rank 0 removes the name once every rank mapped it (the join
		// barrier below) and on every error, so a failed join leaves
		// nothing in /dev/shm.
		defer os.Remove(segmentPath(cfg.ID))
	}
	x := &Executor{p: p, pr: pr, id: append([]byte(nil), cfg.ID...), rank: cfg.Rank, n: cfg.Size,
		timeout: cfg.TimeoutOrDefault(), spin: 50 * time.Microsecond, seg: seg,
		expect: make([]uint64, pr.nexpect), sems: make([]atomic.Int64, len(pr.semInit)),
		bars: make([]barrierState, len(pr.barriers)), sizes: map[sizeKey]*sizing{},
		descs: make([]desc, cfg.Size)}
	x.c.bufs = make([][4][]byte, cfg.Size)
	if err := x.analyse(); err != nil {
		seg.close()
		return nil, err
	}
	for i := range pr.tbs {
		x.tbs = append(x.tbs, &tbRun{x: x, tb: i})
	}
	nw := x.workerCount()
	x.workers = make([][]*tbRun, nw)
	for i, t := range x.tbs {
		x.workers[i%nw] = append(x.workers[i%nw], t)
	}
	x.yield = x.n*nw > runtime.NumCPU()
	x.lw = x.register()
	atomic.AddUint32(seg.u32(offJoined), 1)
	if err := x.barrier(ctx, phaseJoin); err != nil {
		x.leave(x.lw)
		seg.close()
		return nil, err
	}
	if x.lw.local(x.n) && !x.p.InPlace && !noDirect.Load() {
		// Peers may read and write this rank's tensors directly.
		x.world = x.lw
		in, out := x.use[plan.Input], x.use[plan.Output]
		x.aliasIn = !in.written && !in.packet
		x.aliasOut = !out.packet
	}
	x.startWorkers()
	x.sp = startSpares(spareCount(x.n, nw))
	return x, nil
}

// analyse decides, from every rank's ops, whether calls need their end
// barrier and which of this rank's buffers can be the caller's tensors.
func (x *Executor) analyse() error {
	progs := make([]*program, x.n)
	for g := range x.n {
		if g == x.rank {
			progs[g] = x.pr
			continue
		}
		pg, err := compileRank(x.p, g, x.pr.hash)
		if err != nil {
			return err
		}
		progs[g] = pg
	}
	x.synced = selfSynced(x.p, progs)
	x.plainScratch = plainInScratch(x.p)
	x.inPrologue = checkInPrologue(progs, x.synced)
	x.pro = prologue(x.pr)
	if x.p.InPlace {
		return nil
	}
	use, err := bufferUses(x.p, x.rank)
	if err != nil {
		return err
	}
	x.use = use
	in, out := use[plan.Input], use[plan.Output]
	x.aliasIn = !in.remote && !in.written && !in.packet
	x.aliasOut = !out.remote && !out.packet
	return nil
}

// workerCount: as many workers per rank as the machine has cores per
// rank, at most one per thread block; with one, the rank's blocks run as
// coroutines on Run's goroutine (no goroutine switch per call).
func (x *Executor) workerCount() int {
	nw := runtime.NumCPU() / x.n
	if o := int(workersOverride.Load()); o > 0 {
		nw = o
	}
	return max(1, min(nw, len(x.tbs)))
}

// startWorkers starts the goroutines of workers 1.. (Close stops them).
func (x *Executor) startWorkers() {
	for w := 1; w < len(x.workers); w++ {
		g := &workerG{start: make(chan *call, 1), done: make(chan error, 1)}
		x.wk = append(x.wk, g)
		tbs := x.workers[w]
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			for {
				c, ok := recvSpin(g.start, x.spin)
				if !ok {
					return
				}
				g.done <- x.work(tbs, c)
			}
		}()
	}
}

// recvSpin receives from ch, polling for up to spin before it blocks.
func recvSpin[T any](ch chan T, spin time.Duration) (T, bool) {
	select {
	case v, ok := <-ch:
		return v, ok
	default:
	}
	start := time.Now()
	for i := 0; ; i++ {
		select {
		case v, ok := <-ch:
			return v, ok
		default:
		}
		if i&63 == 63 && time.Since(start) > spin {
			break
		}
		runtime.Gosched()
	}
	v, ok := <-ch
	return v, ok
}

// Rank and Size describe the communicator.
func (x *Executor) Rank() int        { return x.rank }
func (x *Executor) Size() int        { return x.n }
func (x *Executor) Plan() *plan.Plan { return x.p }

// Close unmaps the segments. No Run may be in flight.
func (x *Executor) Close() error {
	if x.closed {
		return nil
	}
	x.closed = true
	for _, g := range x.wk {
		close(g.start)
	}
	x.wg.Wait()
	x.wk = nil
	x.sp.close()
	x.sp = nil
	if x.lw != nil {
		x.leave(x.lw)
		x.lw, x.world = nil, nil
	}
	var errs []error
	if x.data != nil {
		errs = append(errs, shmem.Unmap(x.data))
		x.data = nil
	}
	errs = append(errs, x.seg.close())
	return errors.Join(errs...)
}

func (x *Executor) usable() error {
	if x.closed {
		return fmt.Errorf("cpuexec: rank %d: %w", x.rank, ccl.ErrClosed)
	}
	if x.seg.failed() {
		return fmt.Errorf("%w: cpuexec: rank %d: an earlier call failed on rank %d (timeout, bad plan or a lost rank); join a new executor", ccl.ErrFailed, x.rank, x.seg.failedBy())
	}
	return nil
}

// WaitError says that a wait of one rank never completed: a barrier of
// the executor (TB -1) or an op of a thread block.
type WaitError struct {
	Rank  int
	TB    int    // -1 for the executor's own barriers
	Where string // "tb 1 op 4 (wait)" or "start barrier"
	What  string // what it waited for
	Peers []int  // ranks it waited for (may be empty for local waits)
	After time.Duration
	Seq   uint64 // the call
}

func (e *WaitError) Error() string {
	s := fmt.Sprintf("cpuexec: rank %d call #%d %s: %s never came within %v", e.Rank, e.Seq, e.Where, e.What, e.After)
	if len(e.Peers) > 0 {
		s += fmt.Sprintf(" (waiting for ranks %v)", e.Peers)
	}
	return s
}

func (e *WaitError) Is(target error) bool { return target == ccl.ErrTimeout || target == ccl.ErrFailed }

var errAborted = errors.New("cpuexec: aborted: another thread block of this rank failed")

// waitInfo describes, lazily (only for an error), what a wait waits for:
// the thread block (-1 for the executor's own barriers), where ("tb 1 op
// 4 (wait)" or "call #3 start barrier"), what, and the peers awaited.
type waitInfo func() (tb int, where, what string, peers []int)

// await polls cond, then sleeps on this rank's bell, until cond holds, the
// executor fails, ctx ends, abort is set or the timeout passes.
func (x *Executor) await(ctx context.Context, abort *atomic.Bool, timeout time.Duration, cond func() bool, info waitInfo) error {
	if cond() {
		return nil
	}
	for range 128 {
		if cond() {
			return nil
		}
	}
	start := time.Now()
	for time.Since(start) < x.spin {
		if cond() {
			return nil
		}
		runtime.Gosched()
		if x.yield {
			shmem.Yield()
		}
	}
	bell, sleepers := x.seg.bell(x.rank), x.seg.sleepers(x.rank)
	deadline := start.Add(timeout)
	for {
		v := atomic.LoadUint32(bell)
		if cond() {
			return nil
		}
		if x.seg.failed() {
			return x.usable()
		}
		if abort != nil && abort.Load() {
			return errAborted
		}
		if err := ctx.Err(); err != nil {
			x.seg.fail(x.rank)
			_, where, _, _ := info()
			return fmt.Errorf("cpuexec: rank %d call #%d %s: %w", x.rank, x.seq, where, err)
		}
		now := time.Now()
		if now.After(deadline) {
			x.seg.fail(x.rank)
			tb, where, what, peers := info()
			return &WaitError{Rank: x.rank, TB: tb, Where: where, What: what, Peers: peers, After: timeout, Seq: x.seq}
		}
		atomic.AddUint32(sleepers, 1)
		if !cond() {
			shmem.FutexWait(bell, v, min(20*time.Millisecond, deadline.Sub(now)+time.Millisecond))
		}
		atomic.AddUint32(sleepers, ^uint32(0))
	}
}

// Phases of the executor's own barriers, for errors.
const (
	phaseJoin   = "join"
	phaseStart  = "start"
	phaseStaged = "staged"
	phaseData   = "data segment"
	phaseEnd    = "end"
)

// barrier: arrive, then wait until every rank arrived as often. Barriers
// inside a call wait twice the timeout, so that a rank stuck in an op
// reports that op before its peers give up on it at a barrier.
func (x *Executor) barrier(ctx context.Context, phase string) error {
	timeout := x.timeout
	if x.seq > 0 {
		timeout *= 2
	}
	x.epoch++
	if x.world != nil {
		x.world.hb.Add(1)
		defer x.world.hb.Load()
	}
	atomic.StoreUint64(x.seg.arrive(x.rank), x.epoch)
	for r := range x.n {
		x.seg.ring(r)
	}
	target := x.epoch
	next := 0
	return x.await(ctx, nil, timeout, func() bool {
		for ; next < x.n; next++ {
			if atomic.LoadUint64(x.seg.arrive(next)) < target {
				return false
			}
		}
		return true
	}, func() (int, string, string, []int) {
		where := phase + " barrier"
		if phase != phaseJoin {
			where = fmt.Sprintf("call #%d %s", x.seq, where)
		}
		var m []int
		for r := range x.n {
			if atomic.LoadUint64(x.seg.arrive(r)) < target {
				m = append(m, r)
			}
		}
		return -1, where, "every rank's arrival", m
	})
}

// desc is what a rank says about a call; all ranks compare them.
type desc struct {
	seq     uint64 // the call
	bad     bool
	dtype   tensor.DType
	op      reduce.Op
	in, out int64
	hasOp   bool
}

func (d desc) String() string {
	s := fmt.Sprintf("%s input %d bytes, output %d bytes", d.dtype, d.in, d.out)
	if d.hasOp {
		s += ", " + d.op.String()
	}
	return s
}

func putDesc(b []byte, d desc) {
	var st uint32
	if d.bad {
		st = 1
	}
	binary.LittleEndian.PutUint32(b[0:], st)
	b[4], b[5] = byte(d.dtype), byte(d.op)
	b[6] = 0
	if d.hasOp {
		b[6] = 1
	}
	binary.LittleEndian.PutUint64(b[8:], uint64(d.in))
	binary.LittleEndian.PutUint64(b[16:], uint64(d.out))
	binary.LittleEndian.PutUint64(b[24:], d.seq)
}

func getDesc(b []byte) desc {
	return desc{bad: binary.LittleEndian.Uint32(b[0:]) != 0, dtype: tensor.DType(b[4]), op: reduce.Op(b[5]), hasOp: b[6] != 0,
		in: int64(binary.LittleEndian.Uint64(b[8:])), out: int64(binary.LittleEndian.Uint64(b[16:])),
		seq: binary.LittleEndian.Uint64(b[24:])}
}

// regions is where one rank's buffers live inside its part of the data
// segment for one call, and how large they are.
type regions struct {
	off   [4]int64 // by plan.BufferType
	size  [4]int64
	total int64
}

const pageSize = 4096

func roundUp(v, a int64) int64 { return (v + a - 1) / a * a }

// regionsFor lays out rank g's input, output and scratch for a call with
// in and out bytes; in-place plans alias input and output as the
// collective says (allgather: the input is the rank's block of the
// output; reducescatter: the output is the rank's block of the input).
func (x *Executor) regionsFor(g int, lay plan.Layout) regions {
	var r regions
	in, out := lay.InputBytes, lay.OutputBytes
	r.size[plan.Input], r.size[plan.Output], r.size[plan.Scratch] = in, out, lay.ScratchBytes
	switch {
	case !x.p.InPlace:
		r.off[plan.Input] = 0
		r.off[plan.Output] = roundUp(in, pageSize)
		r.off[plan.Scratch] = r.off[plan.Output] + roundUp(out, pageSize)
	case x.p.Collective == plan.AllGather && out >= in*int64(x.n):
		r.off[plan.Output] = 0
		r.off[plan.Input] = int64(g) * in
		r.off[plan.Scratch] = roundUp(out, pageSize)
	case x.p.Collective == plan.ReduceScatter && in >= out*int64(x.n):
		r.off[plan.Input] = 0
		r.off[plan.Output] = int64(g) * out
		r.off[plan.Scratch] = roundUp(in, pageSize)
	default:
		r.off[plan.Input], r.off[plan.Output] = 0, 0
		r.off[plan.Scratch] = roundUp(max(in, out), pageSize)
	}
	r.total = r.off[plan.Scratch] + roundUp(lay.ScratchBytes, pageSize)
	return r
}

// call is the state of one Run shared by this rank's thread blocks.
type call struct {
	ctx   context.Context
	seq   uint64
	flag  uint32
	dt    tensor.DType
	es    int
	op    reduce.Op
	lay   plan.Layout // this rank's
	bufs  [][4][]byte // per rank, by buffer type
	ll    bool
	phase int // phaseWhole, phasePrologue or phaseBody
	abort atomic.Bool
}

// Phases of a call's thread blocks: all ops, or the prologues (signals
// and waits before any other op) and then the rest.
const (
	phaseWhole = iota
	phasePrologue
	phaseBody
)

// Run executes the plan once: in is this rank's input, out its output
// (host tensors of one dtype; allreduce: out has in's size, allgather: out
// is Size() times in, reducescatter: in is Size() times out; other
// collectives: any sizes the plan's layout accepts). op is the reduction
// of reduce ops whose plan op has no reduce_op; an explicit reduce_op must
// equal it (see WithReduceOp). in and out may be the same tensor.
//
// Every rank must call Run with the same sizes, dtype and op; a mismatch,
// or arguments that are bad on any rank, fail every rank with an error
// (ccl.ErrMismatch or ccl.ErrBadArgs) before any op runs, and the executor
// stays usable. A wait that does not complete within the timeout fails
// with a *WaitError naming rank, thread block and op, and marks the
// executor failed on every rank (later calls fail with ccl.ErrFailed).
func (x *Executor) Run(ctx context.Context, in, out *tensor.Tensor, op reduce.Op) error {
	if err := x.usable(); err != nil {
		return err
	}
	x.seq++
	parity := int(x.seq & 1)
	d, inB, outB, local := x.check(in, out, op)
	var sz *sizing
	if local == nil {
		sz = x.sizing(d)
		local = sz.err
	}
	// Which buffers are the caller's tensors this call: not the input when
	// it shares bytes with an output the plan writes in place of it.
	aliasIn := x.aliasIn && !(x.aliasOut && overlaps(inB, outB))
	aliasOut := x.aliasOut
	fits := local == nil && sz.need <= x.stride
	if fits {
		x.stage(sz.regs[x.rank], inB, outB, aliasIn, aliasOut)
		x.cleanScratch(sizeKey{d.dtype, d.in, d.out}, sz.regs[x.rank])
	}
	d.bad, d.seq = local != nil, x.seq
	putDesc(x.seg.desc(x.rank, parity), d)
	if x.world != nil {
		pub := &x.world.pubs[x.rank]
		pub.in[parity], pub.out[parity] = nil, nil
		if aliasIn {
			pub.in[parity] = inB[:len(inB):len(inB)]
		}
		if aliasOut {
			pub.out[parity] = outB[:len(outB):len(outB)]
		}
	}
	c := &x.c
	c.ctx, c.seq, c.flag, c.dt, c.es, c.op = ctx, x.seq, uint32((x.seq-1)%0xFFFFFFFF)+1, d.dtype, max(1, d.dtype.Size()), op
	c.ll, c.phase = x.p.Protocol == plan.LL, phaseWhole
	c.abort.Store(false)
	if x.inPrologue {
		// The prologues reach every peer: once they are done, every
		// peer has published its descriptor and buffers for this call.
		// They touch no buffer, so a call that stops here wrote nothing.
		c.phase = phasePrologue
		err := x.runTBs(c)
		c.ctx = nil
		if err != nil {
			x.seg.fail(x.rank)
			return err
		}
		c.ctx, c.phase = ctx, phaseBody
	} else if err := x.barrier(ctx, phaseStart); err != nil {
		return err
	}
	if local != nil {
		c.ctx = nil
		return fmt.Errorf("cpuexec: rank %d: %w", x.rank, local)
	}
	if err := x.compare(d, parity); err != nil {
		c.ctx = nil
		return err
	}
	if !fits {
		if err := x.grow(ctx, sz.need); err != nil {
			x.seg.fail(x.rank)
			c.ctx = nil
			return err
		}
		x.stage(sz.regs[x.rank], inB, outB, aliasIn, aliasOut)
		x.cleanScratch(sizeKey{d.dtype, d.in, d.out}, sz.regs[x.rank])
		if err := x.barrier(ctx, phaseStaged); err != nil {
			c.ctx = nil
			return err
		}
	}
	c.lay = sz.lays[x.rank]
	for g := range x.n {
		base := int64(g) * x.stride
		for _, b := range [...]plan.BufferType{plan.Input, plan.Output, plan.Scratch} {
			off, size := base+sz.regs[g].off[b], sz.regs[g].size[b]
			if b == plan.Scratch && x.p.UseDoubleScratchBuffer {
				size /= 2
				off += int64(parity) * size
			}
			c.bufs[g][b] = x.data[off : off+size : off+size]
		}
	}
	if x.world != nil {
		for g := range x.n {
			pub := &x.world.pubs[g]
			if b := pub.in[parity]; b != nil {
				c.bufs[g][plan.Input] = b
			}
			if b := pub.out[parity]; b != nil {
				c.bufs[g][plan.Output] = b
			}
		}
	} else {
		if aliasIn {
			c.bufs[x.rank][plan.Input] = inB[:len(inB):len(inB)]
		}
		if aliasOut {
			c.bufs[x.rank][plan.Output] = outB[:len(outB):len(outB)]
		}
	}
	err := x.runTBs(c)
	c.ctx = nil
	for g := range c.bufs {
		c.bufs[g] = [4][]byte{}
	}
	if err != nil {
		x.seg.fail(x.rank)
		return err
	}
	if !x.synced {
		if err := x.barrier(ctx, phaseEnd); err != nil {
			return err
		}
	}
	if !aliasOut {
		x.copySpare(outB, x.data[int64(x.rank)*x.stride+sz.regs[x.rank].off[plan.Output]:][:len(outB)])
	}
	return nil
}

// compare checks every rank's descriptor of this call against d: every
// rank compares the same descriptors, so all reach the same verdict.
func (x *Executor) compare(d desc, parity int) error {
	for r := range x.n {
		x.descs[r] = getDesc(x.seg.desc(r, parity))
	}
	for r, dr := range x.descs {
		if dr.bad {
			return fmt.Errorf("%w: cpuexec: rank %d: rank %d passed bad arguments to plan %q", ccl.ErrMismatch, x.rank, r, x.p.Name)
		}
		if dr != d {
			return fmt.Errorf("%w: cpuexec: plan %q: rank %d called with %v, rank %d with %v", ccl.ErrMismatch, x.p.Name, x.rank, d, r, dr)
		}
	}
	return nil
}

// sizing returns (cached) every rank's layout and regions for a call of
// d's sizes, the bytes per rank the data segment needs, or why the sizes
// are bad.
func (x *Executor) sizing(d desc) *sizing {
	k := sizeKey{d.dtype, d.in, d.out}
	if sz := x.sizes[k]; sz != nil {
		return sz
	}
	if len(x.sizes) >= 64 {
		clear(x.sizes)
	}
	sz := &sizing{}
	sz.lays, sz.regs, sz.need, sz.err = x.layouts(d)
	x.sizes[k] = sz
	return sz
}

// check validates this rank's arguments; d describes the call even when
// they are bad (as far as it can).
func (x *Executor) check(in, out *tensor.Tensor, op reduce.Op) (d desc, inB, outB []byte, err error) {
	d.hasOp = x.pr.reduces
	if d.hasOp {
		d.op = op
	}
	if in == nil || out == nil {
		return d, nil, nil, fmt.Errorf("%w: nil tensor", ccl.ErrBadArgs)
	}
	d.dtype, d.in, d.out = in.DType(), in.NumBytes(), out.NumBytes()
	if inB, err = in.HostBytes(); err != nil {
		return d, nil, nil, fmt.Errorf("%w: input: %v", ccl.ErrBadArgs, err)
	}
	if outB, err = out.HostBytes(); err != nil {
		return d, nil, nil, fmt.Errorf("%w: output: %v", ccl.ErrBadArgs, err)
	}
	if in.DType() != out.DType() {
		return d, nil, nil, fmt.Errorf("%w: input is %s, output %s", ccl.ErrBadArgs, in.DType(), out.DType())
	}
	if overlapNotSame(inB, outB) {
		return d, nil, nil, fmt.Errorf("%w: input and output partially overlap", ccl.ErrBadArgs)
	}
	n := int64(x.n)
	switch x.p.Collective {
	case plan.AllReduce:
		if d.out != d.in {
			return d, nil, nil, fmt.Errorf("%w: allreduce output has %d bytes, input %d", ccl.ErrBadArgs, d.out, d.in)
		}
	case plan.AllGather:
		if d.out != n*d.in {
			return d, nil, nil, fmt.Errorf("%w: allgather output has %d bytes, want %d x %d", ccl.ErrBadArgs, d.out, n, d.in)
		}
	case plan.ReduceScatter:
		if d.in != n*d.out {
			return d, nil, nil, fmt.Errorf("%w: reducescatter input has %d bytes, want %d x %d", ccl.ErrBadArgs, d.in, n, d.out)
		}
	}
	if d.hasOp {
		if err := reduce.Supported(op, d.dtype); err != nil {
			return d, nil, nil, fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
		}
		if op == reduce.Avg {
			return d, nil, nil, fmt.Errorf("%w: plans cannot average (partial reductions would divide more than once): reduce with sum and divide", ccl.ErrBadArgs)
		}
		for _, e := range x.pr.explicit {
			if reduceOp(e) != op {
				return d, nil, nil, fmt.Errorf("%w: plan %q reduces with %v (%s), the call asked for %v (cpuexec.WithReduceOp makes a %v plan)", ccl.ErrBadArgs, x.p.Name, e, x.pr.explWhere, op, op)
			}
		}
	}
	return d, inB, outB, nil
}

// layouts computes every rank's layout and regions for the call, and the
// bytes per rank the data segment needs.
func (x *Executor) layouts(d desc) ([]plan.Layout, []regions, int64, error) {
	lays := make([]plan.Layout, x.n)
	regs := make([]regions, x.n)
	var need int64
	es := int64(max(1, d.dtype.Size()))
	for g := range x.n {
		lay, err := x.p.Layout(g, d.in, d.out)
		if err != nil {
			if g == x.rank {
				return nil, nil, 0, fmt.Errorf("%w: plan %q: %v", ccl.ErrBadArgs, x.p.Name, err)
			}
			return nil, nil, 0, fmt.Errorf("%w: plan %q: rank %d: %v", ccl.ErrBadArgs, x.p.Name, g, err)
		}
		lays[g] = lay
		regs[g] = x.regionsFor(g, lay)
		need = max(need, regs[g].total)
	}
	lay := lays[x.rank]
	unit := es
	if x.p.Protocol == plan.LL && x.pr.packets {
		unit = max(unit, 4) // a packet carries 4 data bytes
	}
	if lay.ChunkBytes%unit != 0 {
		return nil, nil, 0, fmt.Errorf("%w: plan %q: chunks of %d bytes do not hold whole %d-byte units (%s)", ccl.ErrBadArgs, x.p.Name, lay.ChunkBytes, unit, d.dtype)
	}
	if x.pr.tbg && lay.Alignment%unit != 0 {
		return nil, nil, 0, fmt.Errorf("%w: plan %q splits ops over thread blocks in %d-byte units, which do not hold whole %d-byte units (%s)", ccl.ErrBadArgs, x.p.Name, lay.Alignment, unit, d.dtype)
	}
	for _, u := range x.pr.units {
		if u%unit != 0 {
			return nil, nil, 0, fmt.Errorf("%w: plan %q pipelines %d-byte units, which do not hold whole %d-byte units (%s)", ccl.ErrBadArgs, x.p.Name, u, unit, d.dtype)
		}
	}
	return lays, regs, need, nil
}

// cleanScratch zeroes what of this rank's scratch region may hold words
// that pass for this call's packets, before a call of a packet plan: a
// reader takes a word whose flag is the call's. Two sources: (1) the
// regions move with the call's sizes (regionsFor: inputs and outputs
// from offset 0, the scratch after them), so a scratch may lie where an
// earlier call of other sizes staged its input or output (an int32
// element equal to the flag is a packet), and plans that keep plain data
// in a scratch (plainScratch) leave it where another chunk size puts
// packets; (2) the flag repeats every 2^32-1 calls, so a packet left
// where no call wrote since passes, a cycle later, for one of the call
// with its flag. So: from the scratch's start to maxEnd at the first
// call of every flag cycle, and at a change of sizes of a plainScratch
// plan; else the bytes of the scratch that earlier inputs and outputs
// left dirty. The segment of a new generation is zero. It runs before
// the call's start barrier or prologue, when no peer touches this rank's
// buffers: the previous call's remote accesses ended before this rank's
// last op of it (by the plan's own ops where it is self-synced, else at
// the end barrier), and this call's wait for this rank.
func (x *Executor) cleanScratch(k sizeKey, r regions) {
	if !x.pr.packets {
		return
	}
	if x.cleanGen != x.gen {
		x.cleanGen, x.dirty, x.maxEnd, x.scratchOK = x.gen, x.dirty[:0], 0, false
	}
	off, end := r.off[plan.Scratch], r.off[plan.Scratch]+r.size[plan.Scratch]
	base := int64(x.rank) * x.stride
	if cycle := x.seq > 1 && (x.seq-1)%0xFFFFFFFF == 0; cycle || (x.plainScratch && x.scratchOK && x.scratchKey != k) {
		hi := max(end, x.maxEnd)
		clear(x.data[base+off : base+hi])
		x.dirty = cut(x.dirty, off, hi)
	} else {
		for _, d := range x.dirty {
			if lo, hi := max(d.lo, off), min(d.hi, end); lo < hi {
				clear(x.data[base+lo : base+hi])
			}
		}
		x.dirty = cut(x.dirty, off, end)
	}
	x.dirty = addSpan(x.dirty, span{0, off}) // this call's inputs and outputs
	x.maxEnd = max(x.maxEnd, end)
	x.scratchKey, x.scratchOK = k, true
}

// span is a byte range [lo, hi).
type span struct{ lo, hi int64 }

// cut removes [lo, hi) from the sorted, disjoint spans s.
func cut(s []span, lo, hi int64) []span {
	out := s[:0:0]
	for _, d := range s {
		if d.hi <= lo || d.lo >= hi {
			out = append(out, d)
			continue
		}
		if d.lo < lo {
			out = append(out, span{d.lo, lo})
		}
		if d.hi > hi {
			out = append(out, span{hi, d.hi})
		}
	}
	return out
}

// addSpan adds n to the sorted, disjoint spans s, merging what touches.
func addSpan(s []span, n span) []span {
	if n.hi <= n.lo {
		return s
	}
	out := make([]span, 0, len(s)+1)
	for _, d := range s {
		switch {
		case d.hi < n.lo:
			out = append(out, d)
		case d.lo > n.hi:
			out = append(out, n)
			n = d
		default:
			n = span{min(n.lo, d.lo), max(n.hi, d.hi)}
		}
	}
	return append(out, n)
}

// plainInScratch reports whether an op of p (any rank) reads or writes
// plain data, not packets, in a scratch (true where p's accesses cannot
// be resolved: zero at every change of sizes).
func plainInScratch(p *plan.Plan) bool {
	_, plain, err := p.ScratchUse()
	return plain || err != nil
}

// stage copies this rank's input into its input region and, when the plan
// may leave parts of the output unwritten, the caller's output into the
// output region (so those bytes keep the caller's values, as they would
// on a GPU, where the plan writes the caller's buffer).
func (x *Executor) stage(r regions, inB, outB []byte, aliasIn, aliasOut bool) {
	base := int64(x.rank) * x.stride
	if !x.pr.outCovered && !aliasOut {
		x.copySpare(x.data[base+r.off[plan.Output]:][:len(outB)], outB)
	}
	if !aliasIn {
		x.copySpare(x.data[base+r.off[plan.Input]:][:len(inB)], inB)
	}
}

// grow replaces the data segment with one of at least need bytes per rank.
// Every rank calls it in the same call (they agreed on the sizes).
func (x *Executor) grow(ctx context.Context, need int64) error {
	stride := int64(1 << 16)
	for stride < need {
		stride *= 2
	}
	gen := x.gen + 1
	path := dataPath(x.id, gen)
	size := int(stride) * x.n
	var f *os.File
	var err error
	if x.rank == 0 {
		f, err = createFile(path, size, nil)
	} else {
		f, err = awaitFile(ctx, path, time.Now().Add(x.timeout), "the data segment")
	}
	if err != nil {
		return fmt.Errorf("cpuexec: rank %d: %w", x.rank, err)
	}
	mem, err := mapFile(f, size)
	f.Close()
	if err != nil {
		if x.rank == 0 {
			os.Remove(path)
		}
		return fmt.Errorf("cpuexec: rank %d: map data segment: %w", x.rank, err)
	}
	err = x.barrier(ctx, phaseData)
	if x.rank == 0 {
		os.Remove(path)
	}
	if err != nil {
		shmem.Unmap(mem)
		return err
	}
	if x.data != nil {
		shmem.Unmap(x.data)
	}
	x.data, x.gen, x.stride = mem, gen, stride
	return nil
}

// runTBs runs this rank's thread blocks: worker 0 on the caller's
// goroutine, the others on their goroutines; it returns the first failure.
func (x *Executor) runTBs(c *call) error {
	for i := range x.sems {
		x.sems[i].Store(int64(x.pr.semInit[i]))
	}
	for i := range x.bars {
		x.bars[i].count.Store(0)
	}
	if len(x.tbs) == 0 {
		return nil
	}
	for _, g := range x.wk {
		g.start <- c
	}
	err := x.work(x.workers[0], c)
	if len(x.wk) == 0 {
		return err
	}
	errs := make([]error, 0, len(x.workers))
	errs = append(errs, err)
	for _, g := range x.wk {
		e, _ := recvSpin(g.done, x.spin)
		errs = append(errs, e)
	}
	// The root cause first: a worker that gave up because another one
	// failed says so.
	for _, err := range errs {
		if err != nil && !errors.Is(err, errAborted) {
			return err
		}
	}
	return errors.Join(errs...)
}

// work runs thread blocks tbs as coroutines until all are done: each runs
// until it has to wait; when none can move, the worker waits (spinning,
// then on the rank's bell) until one can.
func (x *Executor) work(tbs []*tbRun, c *call) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cpuexec: rank %d: panic in a thread block: %v\n%s", x.rank, p, debug.Stack())
		}
		if err != nil {
			c.abort.Store(true)
			atomic.AddUint32(x.seg.bell(x.rank), 1)
			shmem.FutexWake(x.seg.bell(x.rank))
		}
		for _, t := range tbs {
			t.c = nil
		}
	}()
	for _, t := range tbs {
		t.begin(c)
	}
	// step advances every unfinished block once; it reports whether any
	// moved, and whether all are done.
	var stepErr error
	step := func() (moved, done bool) {
		done = true
		for _, t := range tbs {
			if t.done() {
				continue
			}
			p, err := t.advance()
			if err != nil {
				stepErr = err
				return true, true
			}
			moved = moved || p
			done = done && t.done()
		}
		return moved, done
	}
	for {
		moved, done := step()
		if stepErr != nil {
			return stepErr
		}
		if done {
			return nil
		}
		if moved {
			continue
		}
		err := x.await(c.ctx, &c.abort, x.timeout, func() bool {
			moved, done := step()
			return moved || done
		}, func() (int, string, string, []int) {
			for _, t := range tbs {
				if !t.done() {
					where, what, peers := t.blockedOn()
					return t.tb, where, what, peers
				}
			}
			return -1, "", "", nil
		})
		if stepErr != nil {
			return stepErr
		}
		if err != nil {
			return err
		}
	}
}

func overlapNotSame(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := &a[0], &b[0]
	if pa == pb && len(a) == len(b) {
		return false
	}
	return overlaps(a, b)
}

// copyPiece is the largest piece copyCached hands to copy: the runtime's
// memmove switches to non-temporal stores from 1 MiB on (amd64), which
// leave the copy in memory rather than in cache, where the peer (or this
// rank's next op) reads it moments later. cachedMax: larger copies keep
// the non-temporal stores (a message that large does not stay in cache
// anyway; measured on a 32 MiB-L3 machine: chunked copies win at 1-4 MiB
// by 1.4-1.6x and lose at 16-64 MiB by 1.2x).
const (
	copyPiece = 512 << 10
	cachedMax = 4 << 20
)

// copyCached copies src to dst (same length, no overlap), up to cachedMax
// bytes in pieces that the runtime copies through the cache.
func copyCached(dst, src []byte) {
	if len(src) > cachedMax {
		copy(dst, src)
		return
	}
	for len(src) > copyPiece {
		copy(dst[:copyPiece], src[:copyPiece])
		dst, src = dst[copyPiece:], src[copyPiece:]
	}
	copy(dst, src)
}

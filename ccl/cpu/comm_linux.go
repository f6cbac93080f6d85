package cpu

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/sys/shmarena"
	"github.com/chorus-rt/chorus/internal/sys/shmem"
	"github.com/chorus-rt/chorus/tensor"
)

// Options tune the backend; zero values mean the defaults.
type Options struct {
	// SlotBytes is each rank's staging slot (two per rank). Larger slots
	// mean fewer barriers per large message.
	SlotBytes int
	// MailboxBytes is the buffer of each ordered pair for send/recv.
	MailboxBytes int
	// OneShotMax: allreduces of at most this many bytes use the one-shot
	// algorithm whatever the rank count (0: oneShotMaxFor the rank count).
	OneShotMax int
	// Spin bounds how long a waiter polls before it sleeps.
	Spin time.Duration
	// NoDirect disables direct reads of other ranks' buffers when all
	// ranks share this process (tests use it to exercise staging).
	NoDirect bool
	// NoCMA disables single-copy reads of other processes' buffers
	// (process_vm_readv) for large allreduces, leaving the staging path.
	// Every rank must agree.
	NoCMA bool
	// Threads is the most threads (goroutines) one rank uses for a large
	// direct or single-copy reduction; 0 picks by the cores per rank
	// (see threadsFor).
	Threads int
	// ThreadMinBytes is the least work per thread worth starting one
	// for (default 256 KiB).
	ThreadMinBytes int
	// CMAChunk is the piece of each peer's input a single-copy
	// reduction reads per system call (0: cmaChunk's choice). A rank's
	// own choice: ranks need not agree.
	CMAChunk int
}

// oneShotMaxFor is the default one-shot limit for n ranks: 256 KiB at 2
// ranks, shrinking with n squared, since every rank reads all n inputs
// (n*n*S bytes in all, against about 2*n*S for the two-step algorithm).
// Measured on a 16-core host (docs/performance.md): with 8
// processes a 32 KiB limit made 64 KiB and 256 KiB allreduces 1.4x and
// 2.1x faster than the 256 KiB limit did.
func oneShotMaxFor(n int) int {
	return max(16<<10, (256<<10)*4/max(n*n, 4))
}

// withDefaults fills unset options with the measured defaults
// (docs/performance.md: slots of 1 MiB made 1 MB allreduces 1.6x slower
// than 256 KiB ones; the one-shot limit by rank count; threads by cores
// per rank).
func (o Options) withDefaults(n int) (Options, error) {
	if o.CMAChunk < 0 {
		o.CMAChunk = 0
	}
	if o.SlotBytes <= 0 {
		o.SlotBytes = 256 << 10
	}
	o.SlotBytes = (o.SlotBytes + 127) &^ 127
	if o.MailboxBytes <= 0 {
		o.MailboxBytes = 256 << 10
	}
	o.MailboxBytes = (o.MailboxBytes + 127) &^ 127
	if o.OneShotMax <= 0 {
		o.OneShotMax = oneShotMaxFor(n)
	}
	if o.Spin == 0 {
		o.Spin = 50 * time.Microsecond
	}
	if o.Threads < 0 {
		o.Threads = 0
	}
	if o.ThreadMinBytes <= 0 {
		o.ThreadMinBytes = 256 << 10
	}
	return o, nil
}

// Backend is the "cpu" backend.
type Backend struct{ Options Options }

func init() {
	if err := ccl.Register(&Backend{}); err != nil {
		panic(err)
	}
}

func (*Backend) Name() string { return "cpu" }

// NewID returns 16 random bytes.
func (*Backend) NewID() ([]byte, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return id, nil
}

// Join maps the communicator's segment and waits for every rank.
func (b *Backend) Join(ctx context.Context, cfg ccl.Config) (ccl.Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Device != (tensor.Device{}) && cfg.Device.Kind != tensor.CPU {
		return nil, fmt.Errorf("%w: the cpu backend works on host memory, not %v", ccl.ErrBadArgs, cfg.Device)
	}
	opts, err := b.Options.withDefaults(cfg.Size)
	if err != nil {
		return nil, fmt.Errorf("%w: ccl/cpu: %w", ccl.ErrBadArgs, err)
	}
	seg, err := openSegment(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	c := &Comm{seg: seg, rank: cfg.Rank, n: cfg.Size, timeout: cfg.TimeoutOrDefault(), opts: opts,
		yield: cfg.Size > runtime.NumCPU(), sent: make([]uint64, cfg.Size), recvd: make([]uint64, cfg.Size),
		chunksOut: make([]uint64, cfg.Size), chunksIn: make([]uint64, cfg.Size),
		ins: make([][]byte, cfg.Size), peerSends: make([][]byte, cfg.Size), peerRecvs: make([][]byte, cfg.Size), descs: make([]ccl.Desc, cfg.Size), parts: make([]int, cfg.Size+1)}
	if !opts.NoDirect {
		if err := c.joinLocal(ctx, segmentPath(cfg.ID)); err != nil {
			c.seg.close()
			return nil, err
		}
	}
	here := 1
	if c.peers != nil {
		here = c.n
	}
	c.pauses = shmem.RelaxPauses(here)
	if c.peers == nil {
		if err := c.joinCMA(ctx); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.joinShm(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Comm is one rank of a cpu communicator.
type Comm struct {
	seg     *segment
	rank, n int
	timeout time.Duration
	opts    Options
	yield   bool   // more ranks than CPUs: give the CPU away while polling
	pauses  uint32 // shmem.Relax between polls

	epoch  uint64 // syncs arrived at
	unrung bool   // an arrival was published without fenceRing since
	fence  uint64 // fenceRing's word: the locked add on it is the fence
	parity int    // slot parity of the next staging round
	seq    uint64 // collectives issued, for errors

	peers    []*Comm                 // all ranks, when all live in this process
	pub      atomic.Pointer[buffers] // buffers published for direct collectives
	localKey string
	hb       *atomic.Int64 // see localWorld.hb

	cma     bool     // peers' buffers are readable with process_vm_readv
	cmaWhy  string   // why not, when cma is false
	pids    []int    // every rank's pid (cma)
	scratch [][]byte // per thread: n chunks of peers' data (cma)

	arena                *shmarena.Arena  // this process's shared tensor arena, or nil
	shmPeers             []*shmarena.Peer // peers' arenas, mapped (nil: not mapped)
	shmAll               bool             // every rank mapped every peer's arena
	anyArena             bool             // some rank has an arena
	shmWhy               string           // why not shmAll
	peerSends, peerRecvs [][]byte         // scratch: peers' buffers through their mappings
	lastPath             string           // how the last large allreduce moved (PathFor)

	ins   [][]byte   // scratch: one input per rank
	parts []int      // scratch: part boundaries, n+1 entries
	descs []ccl.Desc // scratch: one descriptor per rank

	sent, recvd         []uint64 // point-to-point messages per peer
	chunksOut, chunksIn []uint64 // point-to-point chunks per peer
	closed              bool
}

var _ ccl.Comm = (*Comm)(nil)

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.n }

// Close unmaps the segment.
func (c *Comm) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	if c.localKey != "" {
		c.leaveLocal()
	}
	c.closeShm()
	return c.seg.close()
}

func (c *Comm) usable() error {
	if c.closed {
		return ccl.ErrClosed
	}
	if c.seg.failed() {
		if cause := c.seg.cause(); cause != "" {
			return fmt.Errorf("%w: rank %d: an earlier collective failed (%s); create a new communicator", ccl.ErrFailed, c.rank, cause)
		}
		return fmt.Errorf("%w: rank %d: an earlier collective failed (timeout or a lost rank); create a new communicator", ccl.ErrFailed, c.rank)
	}
	return nil
}

// fenceRing completes a publish: a full fence (a locked add on a word of
// this rank's own), then ring. Either this rank then sees a sleeper's
// announcement and wakes it, or the sleeper's check after its
// announcement sees the arrival, as when the arrival was an atomic store.
// It does nothing when every publish was rung already.
func (c *Comm) fenceRing() {
	if !c.unrung {
		return
	}
	c.unrung = false
	atomic.AddUint64(&c.fence, 1)
	c.seg.ring()
}

// waitFor polls cond, then sleeps on the bell, until cond holds, the
// communicator fails, ctx ends or the timeout passes; missing names the
// ranks still awaited, for the error.
func (c *Comm) waitFor(ctx context.Context, kind ccl.Kind, cond func() bool, missing func() []int) error {
	// 256 polls first, without the clock: most waits of a small
	// collective end within them, and time.Now (wall and monotonic clock)
	// was about 4% of a 1 KiB allreduce's worker time.
	for i := 0; i < 256; i++ {
		if cond() {
			return nil
		}
	}
	start := time.Now()
	for i := 0; i&15 != 0 || time.Since(start) < c.opts.Spin; i++ {
		if cond() {
			return nil
		}
		shmem.Relax(c.pauses)
		if c.yield {
			shmem.Yield()
		}
	}
	c.fenceRing() // before this rank may sleep
	bell, sleepers := c.seg.u32(offBell), c.seg.u32(offSleepers)
	deadline := start.Add(c.timeout)
	for {
		v := atomic.LoadUint32(bell)
		if cond() {
			return nil
		}
		if c.seg.failed() {
			// Another rank gave up first; if we are still waiting for
			// someone, say whom, as that rank did.
			if m := missing(); len(m) > 0 {
				return &ccl.TimeoutError{Kind: kind, Seq: c.seq, Rank: c.rank, Missing: m, After: time.Since(start)}
			}
			return c.usable()
		}
		if err := ctx.Err(); err != nil {
			// Others may be waiting for us: the communicator cannot
			// continue consistently.
			c.seg.failWith(c.rank, kind, c.seq, causeCanceled, nil)
			return fmt.Errorf("ccl/cpu: rank %d: %s #%d: %w", c.rank, kind, c.seq, err)
		}
		now := time.Now()
		if now.After(deadline) {
			m := missing()
			c.seg.failWith(c.rank, kind, c.seq, causeTimeout, m)
			return &ccl.TimeoutError{Kind: kind, Seq: c.seq, Rank: c.rank, Missing: m, After: c.timeout}
		}
		atomic.AddUint32(sleepers, 1)
		if !cond() {
			shmem.FutexWait(bell, v, min(50*time.Millisecond, deadline.Sub(now)+time.Millisecond))
		}
		atomic.AddUint32(sleepers, ^uint32(0))
	}
}

// barrier: arrive, then wait until every rank arrived as often. The
// arrival is published without a fence (publish); fenceRing, when the
// wait ends or before it sleeps, wakes any rank that fell asleep waiting
// for it.
func (c *Comm) barrier(ctx context.Context, kind ccl.Kind) error {
	c.epoch++
	shmem.Publish(c.seg.u64(c.seg.ctrl(c.rank)+ctlArrive), c.epoch)
	c.unrung = true
	defer c.fenceRing()
	target := c.epoch
	next := 0 // ranks below next are known to have arrived
	return c.waitFor(ctx, kind, func() bool {
		for ; next < c.n; next++ {
			if atomic.LoadUint64(c.seg.u64(c.seg.ctrl(next)+ctlArrive)) < target {
				return false
			}
		}
		return true
	}, func() []int {
		var m []int
		for r := range c.n {
			if atomic.LoadUint64(c.seg.u64(c.seg.ctrl(r)+ctlArrive)) < target {
				m = append(m, r)
			}
		}
		return m
	})
}

// Descriptor encoding in a control block, 16 bytes: status u8 (0 ok, 1
// bad local arguments), kind, dtype, op u8, root i32, count i64. Both
// parities' descriptors share the 64-byte line of the arrival counter
// (ctlDesc), so the line a peer fetches to see the counter move brings
// every descriptor it checks.
const descBytes = 16

func (c *Comm) descOff(r, parity int) int { return c.seg.ctrl(r) + ctlDesc + parity*descBytes }

// packDesc is d's encoding as two little-endian words.
func packDesc(d ccl.Desc, bad bool) (w0, w1 uint64) {
	var st uint64
	if bad {
		st = 1
	}
	w0 = st | uint64(d.Kind)<<8 | uint64(d.DType)<<16 | uint64(d.Op)<<24 | uint64(uint32(d.Root))<<32
	return w0, uint64(d.Count)
}

// unpackDesc decodes packDesc's words; bad is any non-zero status.
func unpackDesc(w0, w1 uint64) (d ccl.Desc, bad bool) {
	d = ccl.Desc{Kind: ccl.Kind(w0 >> 8), DType: tensor.DType(w0 >> 16), Op: reduce.Op(w0 >> 24),
		Root: int32(uint32(w0 >> 32)), Count: int64(w1)}
	return d, uint8(w0) != 0
}

func (c *Comm) putDesc(parity int, w0, w1 uint64) {
	b := c.seg.mem[c.descOff(c.rank, parity):]
	binary.LittleEndian.PutUint64(b[0:], w0)
	binary.LittleEndian.PutUint64(b[8:], w1)
}

func (c *Comm) descWords(r, parity int) (w0, w1 uint64) {
	b := c.seg.mem[c.descOff(r, parity):]
	return binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
}

// begin runs the first staging round of a collective: stage writes this
// rank's first chunk into its slot (skipped when local arguments are bad),
// then every rank's descriptor is compared. It returns the parity used.
func (c *Comm) begin(ctx context.Context, d ccl.Desc, local error, stage func(slot []byte)) (int, error) {
	c.seq++
	if err := c.usable(); err != nil {
		return 0, err
	}
	p := c.parity
	c.parity ^= 1
	w0, w1 := packDesc(d, local != nil)
	c.putDesc(p, w0, w1)
	if local == nil && stage != nil {
		stage(c.seg.slot(p, c.rank))
	}
	if err := c.barrier(ctx, d.Kind); err != nil {
		return p, err
	}
	if local != nil {
		return p, fmt.Errorf("ccl/cpu: rank %d: %s: %w", c.rank, d.Kind, local)
	}
	// This rank's descriptor is good, so the call agrees when every
	// rank's words equal its own: two compares per peer, decoding only
	// to say what differs.
	for r := range c.n {
		if r == c.rank {
			continue
		}
		if v0, v1 := c.descWords(r, p); v0 != w0 || v1 != w1 {
			return p, c.disagreement(p, d.Kind)
		}
	}
	return p, nil
}

// disagreement is the error of a collective whose descriptors of parity p
// differ: the first rank that passed bad arguments, else the first rank
// whose call differs from rank 0's.
func (c *Comm) disagreement(p int, kind ccl.Kind) error {
	descs := c.descs
	for r := range c.n {
		dr, bad := unpackDesc(c.descWords(r, p))
		if bad {
			return fmt.Errorf("%w: rank %d: %s: rank %d passed bad arguments", ccl.ErrMismatch, c.rank, kind, r)
		}
		descs[r] = dr
	}
	if err := ccl.Compare(descs); err != nil {
		// An allreduce's Root is AllReducePiped's group count, which
		// Desc.String does not show.
		for r := 1; r < c.n && kind == ccl.KindAllReduce; r++ {
			d0, dr := descs[0], descs[r]
			if d0.Root != dr.Root {
				d0.Root = dr.Root
				if d0 == dr {
					return fmt.Errorf("%w: ccl/cpu: rank %d: %v: rank 0 cuts it into %d groups, rank %d into %d (their AllReducePiped groups differ)",
						ccl.ErrMismatch, c.rank, dr, max(1, descs[0].Root), r, max(1, dr.Root))
				}
			}
		}
		return fmt.Errorf("ccl/cpu: rank %d: %w", c.rank, err)
	}
	// Unreachable: the words differ, so the decoded descriptors do.
	return fmt.Errorf("%w: rank %d: %s: descriptors differ", ccl.ErrMismatch, c.rank, kind)
}

// next starts a later staging round: stage, barrier.
func (c *Comm) next(ctx context.Context, kind ccl.Kind, stage func(slot []byte)) (int, error) {
	p := c.parity
	c.parity ^= 1
	if stage != nil {
		stage(c.seg.slot(p, c.rank))
	}
	return p, c.barrier(ctx, kind)
}

// chunkSize is the largest multiple of es not above max (at least es).
func chunkSize(max, es int) int {
	if m := max - max%es; m > 0 {
		return m
	}
	return es
}

// chunkStarts yields the start of every chunk of total bytes; there is
// always at least one (possibly empty) chunk, so every collective has a
// first round.
func chunkStarts(total, max, es int) func(yield func(int, int) bool) {
	step := chunkSize(max, es)
	return func(yield func(int, int) bool) {
		for i, off := 0, 0; off < total || i == 0; i, off = i+1, off+step {
			if !yield(i, off) {
				return
			}
		}
	}
}

// chunks splits total bytes into pieces of at most max bytes, each a
// multiple of es; it always yields at least one (possibly empty) piece so
// that every collective has a first round.
func chunks(total, max, es int) [][2]int {
	max -= max % es
	if max <= 0 {
		max = es
	}
	var out [][2]int
	for off := 0; off < total || len(out) == 0; off += max {
		out = append(out, [2]int{off, min(total, off+max)})
	}
	return out
}

// AllReduce reduces send over all ranks into recv.
//
// Small messages (and one or two ranks) take the one-shot path: stage the chunk,
// one barrier, every rank reduces every slot. Larger ones split each chunk
// into one part per rank: a rank stages only the parts its peers reduce,
// reduces its own part from its own input and the peers' slots straight
// into its output, publishes that part in its slot, and after a second
// barrier copies the peers' reduced parts, which moves fewer bytes per
// rank than one-shot once there are more than two ranks.
func (c *Comm) AllReduce(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	a, local := ccl.CheckAllReduce(ccl.KindAllReduce, send, recv, op, c.n)
	if local != nil {
		a.Desc = ccl.Desc{Kind: ccl.KindAllReduce, Op: op}
		if send != nil {
			a.Desc.DType, a.Desc.Count = send.DType(), send.NumElements()
		}
	}
	if c.peers != nil && len(a.Send) > c.opts.OneShotMax {
		return c.directAllReduce(ctx, a, local, op, nil)
	}
	if c.peers == nil && (c.cma || c.shmAll) && len(a.Send) > c.opts.OneShotMax {
		err := c.singleCopyAllReduce(ctx, a, local, op, nil)
		if err != errStaged {
			return err
		}
		c.seq-- // the staged rounds below are the same collective
	}
	es := max(1, a.DType.Size())
	// With two ranks the one-shot path measured 2-2.5x faster at 1-4 MiB
	// than the split path despite moving more bytes (docs/performance.md).
	oneShot := c.n <= 2 || len(a.Send) <= c.opts.OneShotMax
	ins := c.ins
	for i, lo := range chunkStarts(len(a.Send), c.opts.SlotBytes, es) {
		hi := min(len(a.Send), lo+chunkSize(c.opts.SlotBytes, es))
		var parts []int
		var stage func(slot []byte)
		if oneShot {
			stage = func(slot []byte) { copy(slot, a.Send[lo:hi]) }
		} else {
			parts = partitionInto(c.parts, hi-lo, c.n, es)
			stage = func(slot []byte) {
				for r := range c.n {
					if r != c.rank {
						copy(slot[parts[r]:parts[r+1]], a.Send[lo+parts[r]:lo+parts[r+1]])
					}
				}
			}
		}
		var p int
		var err error
		if i == 0 {
			p, err = c.begin(ctx, a.Desc, local, stage)
		} else {
			p, err = c.next(ctx, ccl.KindAllReduce, stage)
		}
		if err != nil {
			return err
		}
		if oneShot {
			for r := range c.n {
				ins[r] = c.seg.slot(p, r)[:hi-lo]
			}
			if err := reduceInto(op, a.DType, a.Recv[lo:hi], ins, c.n); err != nil {
				return err
			}
			continue
		}
		pl, ph := parts[c.rank], parts[c.rank+1]
		for r := range c.n {
			if r == c.rank {
				ins[r] = a.Send[lo+pl : lo+ph]
			} else {
				ins[r] = c.seg.slot(p, r)[pl:ph]
			}
		}
		mine := a.Recv[lo+pl : lo+ph]
		if err := reduceInto(op, a.DType, mine, ins, c.n); err != nil {
			return err
		}
		copy(c.seg.slot(p, c.rank)[pl:ph], mine)
		if err := c.barrier(ctx, ccl.KindAllReduce); err != nil {
			return err
		}
		for r := range c.n {
			if r != c.rank {
				copy(a.Recv[lo+parts[r]:lo+parts[r+1]], c.seg.slot(p, r)[parts[r]:parts[r+1]])
			}
		}
	}
	return nil
}

// reduceInto reduces all n ranks' inputs into dst in one call (Avg
// included: ccl/reduce divides in the accumulation type, once).
func reduceInto(op reduce.Op, dt tensor.DType, dst []byte, srcs [][]byte, n int) error {
	if len(dst) == 0 {
		return nil
	}
	return reduce.Reduce(op, dt, dst, srcs[:n]...)
}

// partitionInto splits size bytes into n element-aligned parts; part r
// is [out[r], out[r+1]). out has room for n+1 entries.
func partitionInto(out []int, size, n, es int) []int {
	elems := size / es
	per := (elems + n - 1) / n
	for r := range n + 1 {
		out[r] = min(elems, r*per) * es
	}
	return out[:n+1]
}

// ReduceScatter reduces send over all ranks; rank r keeps block r.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	a, local := ccl.CheckAllReduce(ccl.KindReduceScatter, send, recv, op, c.n)
	if local != nil {
		a.Desc = ccl.Desc{Kind: ccl.KindReduceScatter, Op: op}
		if send != nil {
			a.Desc.DType, a.Desc.Count = send.DType(), send.NumElements()
		}
	}
	es := max(1, a.DType.Size())
	block := len(a.Send) / c.n
	// Each round stages the same sub-range of all n blocks.
	ins := c.ins
	for i, ch := range chunks(block, c.opts.SlotBytes/c.n, es) {
		lo, hi := ch[0], ch[1]
		w := hi - lo
		stage := func(slot []byte) {
			for b := range c.n {
				copy(slot[b*w:(b+1)*w], a.Send[b*block+lo:b*block+hi])
			}
		}
		var p int
		var err error
		if i == 0 {
			p, err = c.begin(ctx, a.Desc, local, stage)
		} else {
			p, err = c.next(ctx, ccl.KindReduceScatter, stage)
		}
		if err != nil {
			return err
		}
		for r := range c.n {
			ins[r] = c.seg.slot(p, r)[c.rank*w : (c.rank+1)*w]
		}
		if err := reduceInto(op, a.DType, a.Recv[lo:hi], ins, c.n); err != nil {
			return err
		}
	}
	return nil
}

// AllGather concatenates every rank's send into recv.
func (c *Comm) AllGather(ctx context.Context, send, recv *tensor.Tensor) error {
	a, local := ccl.CheckAllGather(send, recv, c.n)
	if local != nil {
		a.Desc = ccl.Desc{Kind: ccl.KindAllGather}
		if send != nil {
			a.Desc.DType, a.Desc.Count = send.DType(), send.NumElements()
		}
	}
	es := max(1, a.DType.Size())
	block := len(a.Send)
	for i, ch := range chunks(block, c.opts.SlotBytes, es) {
		lo, hi := ch[0], ch[1]
		stage := func(slot []byte) { copy(slot, a.Send[lo:hi]) }
		var p int
		var err error
		if i == 0 {
			p, err = c.begin(ctx, a.Desc, local, stage)
		} else {
			p, err = c.next(ctx, ccl.KindAllGather, stage)
		}
		if err != nil {
			return err
		}
		for r := range c.n {
			copy(a.Recv[r*block+lo:r*block+hi], c.seg.slot(p, r)[:hi-lo])
		}
	}
	return nil
}

// rooted runs broadcast, scatter and gather.
func (c *Comm) rooted(ctx context.Context, kind ccl.Kind, send, recv *tensor.Tensor, root int) error {
	a, local := ccl.CheckRooted(kind, send, recv, root, c.rank, c.n)
	if local != nil {
		a.Desc = ccl.Desc{Kind: kind, Root: int32(root)}
	}
	es := max(1, a.DType.Size())
	isRoot := c.rank == root
	var block int // bytes each rank receives (broadcast, scatter) or sends (gather)
	switch kind {
	case ccl.KindBroadcast, ccl.KindScatter:
		block = int(a.Count) * es
	case ccl.KindGather:
		block = len(a.Send)
	}
	per := c.opts.SlotBytes
	if kind == ccl.KindScatter {
		per /= c.n
	}
	for i, ch := range chunks(block, per, es) {
		lo, hi := ch[0], ch[1]
		w := hi - lo
		var stage func(slot []byte)
		switch {
		case kind == ccl.KindBroadcast && isRoot:
			stage = func(slot []byte) { copy(slot, a.Send[lo:hi]) }
		case kind == ccl.KindScatter && isRoot:
			stage = func(slot []byte) {
				for b := range c.n {
					copy(slot[b*w:(b+1)*w], a.Send[b*block+lo:b*block+hi])
				}
			}
		case kind == ccl.KindGather:
			stage = func(slot []byte) { copy(slot, a.Send[lo:hi]) }
		}
		var p int
		var err error
		if i == 0 {
			p, err = c.begin(ctx, a.Desc, local, stage)
		} else {
			p, err = c.next(ctx, kind, stage)
		}
		if err != nil {
			return err
		}
		rs := c.seg.slot(p, root)
		switch kind {
		case ccl.KindBroadcast:
			copy(a.Recv[lo:hi], rs[:w])
		case ccl.KindScatter:
			copy(a.Recv[lo:hi], rs[c.rank*w:(c.rank+1)*w])
		case ccl.KindGather:
			if isRoot {
				for r := range c.n {
					copy(a.Recv[r*block+lo:r*block+hi], c.seg.slot(p, r)[:w])
				}
			}
		}
	}
	return nil
}

func (c *Comm) Broadcast(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	return c.rooted(ctx, ccl.KindBroadcast, send, recv, root)
}

func (c *Comm) Scatter(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	return c.rooted(ctx, ccl.KindScatter, send, recv, root)
}

func (c *Comm) Gather(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	return c.rooted(ctx, ccl.KindGather, send, recv, root)
}

// Barrier returns once every rank has called it.
func (c *Comm) Barrier(ctx context.Context) error {
	_, err := c.begin(ctx, ccl.Desc{Kind: ccl.KindBarrier}, nil, nil)
	return err
}

// Send delivers t to peer, which must call Recv with a tensor of the same
// dtype and byte size.
func (c *Comm) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	c.seq++
	if err := c.usable(); err != nil {
		return err
	}
	if err := ccl.CheckPeer(peer, c.rank, c.n); err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("%w: send tensor is nil", ccl.ErrBadArgs)
	}
	data, err := t.HostBytes()
	if err != nil {
		return fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
	}
	mb := c.seg.mbox(c.rank, peer)
	c.sent[peer]++
	k := c.sent[peer]
	posted := c.seg.u64(mb + mbPosted)
	if err := c.waitFor(ctx, ccl.KindSend, func() bool { return atomic.LoadUint64(posted) >= k }, func() []int { return []int{peer} }); err != nil {
		return err
	}
	size := atomic.LoadUint64(c.seg.u64(mb + mbSize))
	dt := tensor.DType(atomic.LoadUint32(c.seg.u32(mb + mbDType)))
	if size != uint64(len(data)) || dt != t.DType() {
		atomic.StoreUint64(c.seg.u64(mb+mbRejected), k)
		c.seg.ring()
		return fmt.Errorf("%w: rank %d sends %s of %d bytes, rank %d expects %s of %d bytes", ccl.ErrMismatch, c.rank, t.DType(), len(data), peer, dt, size)
	}
	atomic.StoreUint64(c.seg.u64(mb+mbAccepted), k)
	c.seg.ring()
	box := c.seg.mboxData(c.rank, peer)
	ready, ack := c.seg.u64(mb+mbReady), c.seg.u64(mb+mbAck)
	for off := 0; off < len(data); off += len(box) {
		done := c.chunksOut[peer]
		if err := c.waitFor(ctx, ccl.KindSend, func() bool { return atomic.LoadUint64(ack) >= done }, func() []int { return []int{peer} }); err != nil {
			return err
		}
		copy(box, data[off:min(len(data), off+len(box))])
		c.chunksOut[peer]++
		atomic.StoreUint64(ready, c.chunksOut[peer])
		c.seg.ring()
	}
	return nil
}

// Recv receives into t from peer.
func (c *Comm) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	c.seq++
	if err := c.usable(); err != nil {
		return err
	}
	if err := ccl.CheckPeer(peer, c.rank, c.n); err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("%w: recv tensor is nil", ccl.ErrBadArgs)
	}
	data, err := t.HostBytes()
	if err != nil {
		return fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
	}
	mb := c.seg.mbox(peer, c.rank)
	c.recvd[peer]++
	k := c.recvd[peer]
	atomic.StoreUint64(c.seg.u64(mb+mbSize), uint64(len(data)))
	atomic.StoreUint32(c.seg.u32(mb+mbDType), uint32(t.DType()))
	atomic.StoreUint64(c.seg.u64(mb+mbPosted), k)
	c.seg.ring()
	accepted, rejected := c.seg.u64(mb+mbAccepted), c.seg.u64(mb+mbRejected)
	if err := c.waitFor(ctx, ccl.KindRecv, func() bool {
		return atomic.LoadUint64(accepted) >= k || atomic.LoadUint64(rejected) >= k
	}, func() []int { return []int{peer} }); err != nil {
		return err
	}
	if atomic.LoadUint64(rejected) >= k && atomic.LoadUint64(accepted) < k {
		return fmt.Errorf("%w: rank %d expected %s of %d bytes from rank %d, which sent something else", ccl.ErrMismatch, c.rank, t.DType(), len(data), peer)
	}
	box := c.seg.mboxData(peer, c.rank)
	ready, ack := c.seg.u64(mb+mbReady), c.seg.u64(mb+mbAck)
	for off := 0; off < len(data); off += len(box) {
		want := c.chunksIn[peer] + 1
		if err := c.waitFor(ctx, ccl.KindRecv, func() bool { return atomic.LoadUint64(ready) >= want }, func() []int { return []int{peer} }); err != nil {
			return err
		}
		copy(data[off:min(len(data), off+len(box))], box)
		c.chunksIn[peer] = want
		atomic.StoreUint64(ack, want)
		c.seg.ring()
	}
	return nil
}

package dsl

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/chorus-rt/chorus/algo/plan"
)

// Buffer types and reduce ops, re-exported so that programs read naturally
// (dsl.Scratch, dsl.Sum) without importing algo/plan for the common names.
const (
	Input   = plan.Input
	Output  = plan.Output
	Scratch = plan.Scratch

	Sum = plan.ReduceSum
	Min = plan.ReduceMin
	Max = plan.ReduceMax
)

// SyncType says where a synchronisation op orders the threads of its thread
// block (a __syncthreads, lowered to a "nop" op) relative to itself: before
// it, after it, both or neither. A signal usually wants SyncBefore (the data
// it announces must be complete), a wait SyncAfter (the data it waited for
// is read next).
type SyncType uint8

const (
	SyncNone   SyncType = 0
	SyncBefore SyncType = 1
	SyncAfter  SyncType = 2
	SyncBoth   SyncType = SyncBefore | SyncAfter
)

func (s SyncType) String() string {
	switch s {
	case SyncNone:
		return "none"
	case SyncBefore:
		return "before"
	case SyncAfter:
		return "after"
	case SyncBoth:
		return "both"
	}
	return fmt.Sprintf("SyncType(%d)", uint8(s))
}

// ErrInvalid is wrapped by every error a program records: a bad argument to
// a DSL call or a program-level problem found by Lower.
var ErrInvalid = errors.New("dsl: invalid program")

// Error is one problem of a program. Rank and TB are -1 when the problem is
// not about one rank or thread block; Op is the DSL operation ("put",
// "MemoryChannel", ...) or "" for program-level problems.
type Error struct {
	Rank, TB int
	Op       string
	Msg      string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("dsl:")
	if e.Rank >= 0 {
		fmt.Fprintf(&b, " rank %d", e.Rank)
	}
	if e.TB >= 0 {
		fmt.Fprintf(&b, " tb %d", e.TB)
	}
	if e.Op != "" {
		if e.Rank >= 0 || e.TB >= 0 {
			b.WriteString(":")
		}
		fmt.Fprintf(&b, " %s", e.Op)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *Error) Unwrap() error { return ErrInvalid }

// maxErrors bounds the problems a program keeps; a program with a systematic
// mistake (a wrong index in a loop) would otherwise list thousands.
const maxErrors = 50

// Config describes a program. Zero fields take the defaults noted.
type Config struct {
	Name       string          // plan name; required
	Collective plan.Collective // required
	Ranks      int             // number of ranks, >= 1
	Instances  int             // replication factor (default 1): see Lower
	Protocol   plan.Protocol   // plan.Simple (default) or plan.LL
	// ThreadsPerBlock is num_threads_per_block (default 1024).
	ThreadsPerBlock int
	// BufferAlignment in bytes (default 16).
	BufferAlignment int
	MinMessageSize  uint64 // bytes (default 0)
	MaxMessageSize  uint64 // bytes (default 0 means no limit: 2^64-1)
	DoubleScratch   bool   // use_double_scratch_buffer
	InPlace         bool   // input and output alias
	ReuseResources  bool   // reuse_resources
	// ChunkFactor scales the collective's default buffer sizes (default 1):
	// allreduce, alltoall: input = output = Ranks*ChunkFactor chunks;
	// allgather: input ChunkFactor, output Ranks*ChunkFactor;
	// reducescatter: input Ranks*ChunkFactor, output ChunkFactor;
	// broadcast, sendrecv: input = output = ChunkFactor.
	ChunkFactor int
	// InputChunks and OutputChunks override the sizes above (per rank,
	// before instance replication); required for other collectives.
	InputChunks, OutputChunks int
	// NoBuffers: the ranks have neither input nor output chunks (MSCCL++'s
	// TestCollective(n, 0, 0): programs that only synchronize or use
	// scratch). InputChunks and OutputChunks must then be 0.
	NoBuffers bool
	// UncheckedPairs skips Lower's check that every channel's signals
	// match the waits on its paired channel back. MSCCL++'s DSL does not
	// check this, and some of its test programs signal more than the peer
	// waits, or wait on a channel the peer never signals; with this set the
	// plan is emitted as written and the verifier judges it (Unmatched,
	// Deadlock).
	UncheckedPairs bool
	// NoAutoSync skips Lower's auto-sync step (MSCCL++'s auto_sync=False):
	// only the nops the program asks for (SyncType, barriers) are emitted,
	// and the program is responsible for intra-block hazards (packet reads
	// need none: they wait for the flags).
	NoAutoSync bool
}

// Program is a collective algorithm under construction. Build it with the
// methods of Program, Rank, the channels and Semaphore, then call Lower.
// Every DSL call checks its arguments; a bad call records an error (see Err)
// and adds nothing, so one mistake does not cascade into many. Nothing
// panics: a Program is not safe for concurrent use, but misuse only ever
// produces errors.
type Program struct {
	cfg     Config
	errs    []error
	dropped int

	ranks    []*Rank
	channels []*channel // memory and port channels, in creation order
	switches []*SwitchChannel
	chanIDs  map[chanKey]int // next GPU channel id per (src rank, type)
	switchID []int           // next switch channel id per rank
	loop     *loop           // the pipeline being recorded, if any
	nloops   int
}

type chanKey struct {
	rank int
	typ  plan.ChannelType
}

// NewProgram starts a program. A bad Config is recorded like any other
// error: NewProgram always returns a usable *Program, and Lower reports it.
func NewProgram(cfg Config) *Program {
	p := &Program{chanIDs: map[chanKey]int{}}
	if cfg.Instances == 0 {
		cfg.Instances = 1
	}
	if cfg.Protocol == plan.ProtocolInvalid {
		cfg.Protocol = plan.Simple
	}
	if cfg.ThreadsPerBlock == 0 {
		cfg.ThreadsPerBlock = plan.DefaultNumThreadsPerBlock
	}
	if cfg.BufferAlignment == 0 {
		cfg.BufferAlignment = plan.DefaultBufferAlignment
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = math.MaxUint64
	}
	if cfg.ChunkFactor == 0 {
		cfg.ChunkFactor = 1
	}
	p.cfg = cfg
	bad := func(format string, args ...any) { p.fail(-1, -1, "NewProgram", format, args...) }
	if cfg.Name == "" {
		bad("empty name")
	}
	if cfg.Collective == "" {
		bad("empty collective")
	}
	if cfg.Ranks < 1 {
		bad("%d ranks (want at least 1)", cfg.Ranks)
		cfg.Ranks = 0
	}
	if cfg.Instances < 1 {
		bad("%d instances (want at least 1)", cfg.Instances)
		p.cfg.Instances = 1
	}
	if cfg.Protocol != plan.Simple && cfg.Protocol != plan.LL {
		bad("invalid protocol %v", cfg.Protocol)
	}
	if cfg.ThreadsPerBlock < 1 || cfg.ThreadsPerBlock > 1024 {
		bad("%d threads per block (want 1..1024)", cfg.ThreadsPerBlock)
	}
	if cfg.BufferAlignment < 1 {
		bad("buffer alignment %d (want > 0)", cfg.BufferAlignment)
	}
	if cfg.MinMessageSize > cfg.MaxMessageSize {
		bad("min message size %d > max message size %d", cfg.MinMessageSize, cfg.MaxMessageSize)
	}
	if cfg.ChunkFactor < 1 {
		bad("chunk factor %d (want >= 1)", cfg.ChunkFactor)
		p.cfg.ChunkFactor = 1
	}
	if cfg.InputChunks < 0 || cfg.OutputChunks < 0 {
		bad("negative buffer size (input %d, output %d chunks)", cfg.InputChunks, cfg.OutputChunks)
	}
	in, out := p.defaultSizes()
	if cfg.InputChunks > 0 {
		in = cfg.InputChunks
	}
	if cfg.OutputChunks > 0 {
		out = cfg.OutputChunks
	}
	if cfg.NoBuffers {
		if cfg.InputChunks > 0 || cfg.OutputChunks > 0 {
			bad("NoBuffers with %d input and %d output chunks", cfg.InputChunks, cfg.OutputChunks)
		}
		in, out = 0, 0
	} else if in <= 0 && out <= 0 && cfg.Collective != "" {
		bad("collective %q has no default buffer sizes: set InputChunks/OutputChunks", cfg.Collective)
	}
	p.switchID = make([]int, max(cfg.Ranks, 0))
	for r := 0; r < cfg.Ranks; r++ {
		p.ranks = append(p.ranks, &Rank{p: p, id: r, in: max(in, 0), out: max(out, 0)})
	}
	return p
}

func (p *Program) defaultSizes() (in, out int) {
	n, cf := p.cfg.Ranks, p.cfg.ChunkFactor
	switch p.cfg.Collective {
	case plan.AllReduce, plan.AllToAll:
		return n * cf, n * cf
	case plan.AllGather:
		return cf, n * cf
	case plan.ReduceScatter:
		return n * cf, cf
	case plan.Broadcast, plan.SendRecv:
		return cf, cf
	}
	return 0, 0
}

// Config returns the program's configuration with defaults filled in.
func (p *Program) Config() Config { return p.cfg }

// NumRanks is the number of ranks.
func (p *Program) NumRanks() int { return len(p.ranks) }

// fail records one error.
func (p *Program) fail(rank, tb int, op, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return
	}
	p.errs = append(p.errs, &Error{Rank: rank, TB: tb, Op: op, Msg: fmt.Sprintf(format, args...)})
}

// Err returns the errors recorded so far, joined (nil if none). Every
// element is an *Error wrapping ErrInvalid.
func (p *Program) Err() error {
	errs := p.errs
	if p.dropped > 0 {
		errs = append(slices.Clip(errs), &Error{Rank: -1, TB: -1, Msg: fmt.Sprintf("and %d more problems", p.dropped)})
	}
	return errors.Join(errs...)
}

// Rank returns rank r. An out-of-range r records an error and returns a
// rank whose every operation is ignored.
func (p *Program) Rank(r int) *Rank {
	if r < 0 || r >= len(p.ranks) {
		p.fail(-1, -1, "Rank", "rank %d out of range (program has %d ranks)", r, len(p.ranks))
		return &Rank{p: p, id: r, bad: true}
	}
	return p.ranks[r]
}

func (p *Program) rankOK(r int) bool { return r >= 0 && r < len(p.ranks) }

// Rank is one rank of a program: its buffers, local operations,
// semaphores and barriers.
type Rank struct {
	p       *Program
	id      int
	bad     bool
	in, out int
	scratch int   // chunks allocated by NewScratch so far
	sems    []int // initial values
	ops     [][]*op
	barrier map[string]int
}

// ID is the rank number.
func (r *Rank) ID() int { return r.id }

// Input is the rank's input buffer.
func (r *Rank) Input() Buffer { return r.buffer(Input) }

// Output is the rank's output buffer.
func (r *Rank) Output() Buffer { return r.buffer(Output) }

func (r *Rank) buffer(t plan.BufferType) Buffer {
	if r == nil {
		return Buffer{bad: true}
	}
	n := r.in
	if t == Output {
		n = r.out
	}
	return Buffer{p: r.p, rank: r.id, typ: t, size: n, bad: r.bad}
}

// NewScratch allocates size more chunks of the rank's scratch buffer and
// returns them as a Buffer; successive allocations do not overlap.
func (r *Rank) NewScratch(size int) Buffer {
	if r == nil || r.bad {
		return Buffer{bad: true}
	}
	if size < 1 {
		r.p.fail(r.id, -1, "NewScratch", "size %d (want >= 1)", size)
		return Buffer{p: r.p, bad: true}
	}
	b := Buffer{p: r.p, rank: r.id, typ: Scratch, base: r.scratch, size: size}
	r.scratch += size
	return b
}

// Buffer is a region of a rank's buffer: a whole input or output buffer, or
// a scratch allocation.
type Buffer struct {
	p          *Program
	rank       int
	typ        plan.BufferType
	base, size int
	bad        bool
}

// Size is the buffer's length in chunks.
func (b Buffer) Size() int { return b.size }

// Chunk returns chunks [index, index+size) of the buffer (index relative to
// the buffer's start). A range outside the buffer records an error and
// returns a chunk that every operation ignores.
func (b Buffer) Chunk(index, size int) Chunk {
	if b.bad || b.p == nil {
		return Chunk{bad: true}
	}
	if index < 0 || size < 1 || index+size > b.size {
		b.p.fail(b.rank, -1, "Chunk", "%s chunk range [%d:%d) outside the buffer's %d chunks", b.typ.Short(), index, index+size, b.size)
		return Chunk{Rank: b.rank, Buffer: b.typ, Index: b.base + index, Size: size, bad: true}
	}
	return Chunk{Rank: b.rank, Buffer: b.typ, Index: b.base + index, Size: size}
}

// Chunk is a range of chunks of one rank's buffer. Index is absolute in the
// rank's buffer (scratch allocations are laid out one after another).
// Chunks are values; operations check them again, so a Chunk built by hand
// is as good as one from Buffer.Chunk.
type Chunk struct {
	Rank   int
	Buffer plan.BufferType
	Index  int
	Size   int
	bad    bool // an error was already recorded for it
}

func (c Chunk) String() string {
	return fmt.Sprintf("rank %d %s[%d:%d)", c.Rank, c.Buffer.Short(), c.Index, c.Index+c.Size)
}

// Blocks says which thread blocks run an operation: a single block (TB) or
// a thread-block group (*TBGroup) whose blocks each do a part of the data.
type Blocks interface {
	blockList() (tbs []int, group *TBGroup)
}

// TB is one thread block, by id on its rank.
type TB int

func (t TB) blockList() ([]int, *TBGroup) { return []int{int(t)}, nil }

// TBGroup is a thread-block group: an operation given a group runs on every
// block of it, each doing its share (tbg_info) of every chunk range.
type TBGroup struct {
	tbs []int
	bad bool
}

func (g *TBGroup) blockList() ([]int, *TBGroup) {
	if g == nil {
		return nil, nil
	}
	return g.tbs, g
}

// Blocks returns the group's thread block ids.
func (g *TBGroup) Blocks() []int {
	if g == nil {
		return nil
	}
	return slices.Clone(g.tbs)
}

// TBGroup makes a thread-block group of distinct, non-negative ids.
func (p *Program) TBGroup(tbs ...int) *TBGroup {
	g := &TBGroup{tbs: slices.Clone(tbs)}
	if len(tbs) == 0 {
		p.fail(-1, -1, "TBGroup", "empty thread-block group")
		g.bad = true
	}
	seen := map[int]bool{}
	for _, t := range tbs {
		if t < 0 {
			p.fail(-1, -1, "TBGroup", "thread block %d negative", t)
			g.bad = true
		}
		if seen[t] {
			p.fail(-1, -1, "TBGroup", "thread block %d listed twice", t)
			g.bad = true
		}
		seen[t] = true
	}
	return g
}

// loop is a pipeline region: the ops recorded inside Pipeline's body.
type loop struct {
	id                  int
	unitSize, numChunks int
}

// Pipeline records the operations that body adds as pipelined: on each
// thread block they become the body of one "pipeline" op that loops over
// numChunks chunks, unitSize bytes per iteration. Pipelines do not nest.
func (p *Program) Pipeline(unitSize, numChunks int, body func()) {
	if p.loop != nil {
		p.fail(-1, -1, "Pipeline", "nested pipeline (pipelines do not nest)")
		return
	}
	if unitSize < 1 || numChunks < 1 {
		p.fail(-1, -1, "Pipeline", "unit size %d, %d chunks (want both >= 1)", unitSize, numChunks)
		return
	}
	if body == nil {
		p.fail(-1, -1, "Pipeline", "nil body")
		return
	}
	p.nloops++
	p.loop = &loop{id: p.nloops, unitSize: unitSize, numChunks: numChunks}
	defer func() { p.loop = nil }()
	body()
}

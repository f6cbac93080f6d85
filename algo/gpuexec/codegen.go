package gpuexec

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cudasrc"
	"github.com/chorus-rt/chorus/tensor"
)

//go:embed runtime.cuh
var runtimeSource string

// KernelName is the entry point of every generated kernel.
const KernelName = "chorus_plan"

// MaxRanks is the most ranks a plan may have (the kernels' MAX_RANKS, as
// ccl/ipc's).
const MaxRanks = 8

// ErrUnsupported is wrapped by the errors for plans, dtypes and reduce
// ops the GPU executor does not run (switch channels, packets over port
// channels other than rppkt's, dtypes other than float32/float16/bfloat16,
// ...).
var ErrUnsupported = errors.New("gpuexec: not supported by the GPU executor")

// Kernel is the generated CUDA C of one rank of a plan for one dtype and
// reduce op, with what the host needs to run it.
type Kernel struct {
	Rank    int
	DType   tensor.DType
	Op      reduce.Op
	Source  string // CUDA C, self-contained (NVRTC, no headers)
	Blocks  int    // grid size: the rank's thread blocks (at least 1)
	Threads int    // threads per block
	Res     Resources
	// PeerGPU: the kernel meets its peers with GPU-scope accesses
	// (Target.OneGPU and no port channel in the plan).
	PeerGPU bool
}

// Resources are the device words a rank's kernel uses, sized by the plan.
type Resources struct {
	Slots    int   // inbound signal counters per rank (numbered across the plan)
	Tickets  int   // this rank's wait ticket counters (one per channel)
	Barriers int   // intra-rank barrier ids
	SemInit  []int // semaphores and their init values
	Port     bool  // some op uses a port channel: the rank needs the proxy
	Packets  bool  // some op reads or writes LL packets
	// Grouped: each plan thread block may run on a group of CUDA blocks
	// (Groupable: the same on every rank of the plan).
	Grouped bool
	// MaxChunks is the largest access of an op, in chunks (a block
	// group's size follows the bytes one op moves).
	MaxChunks int
	// Sync is how the kernel meets its peers at the call's start and
	// end (CallSync).
	Sync Sync
}

// DTypeCode and OpCode are the kernels' DT and OP values.
func DTypeCode(dt tensor.DType) (int, error) {
	switch dt {
	case tensor.Float32:
		return 0, nil
	case tensor.Float16:
		return 1, nil
	case tensor.BFloat16:
		return 2, nil
	}
	return 0, fmt.Errorf("%w: dtype %s (float32, float16, bfloat16 only)", ErrUnsupported, dt)
}

func OpCode(op reduce.Op) (int, error) {
	switch op {
	case reduce.Sum:
		return 0, nil
	case reduce.Min:
		return 1, nil
	case reduce.Max:
		return 2, nil
	}
	return 0, fmt.Errorf("%w: reduce op %s (sum, min, max only)", ErrUnsupported, op)
}

// slotKey is a directed channel instance (plan.ChannelSlot).
type slotKey = plan.ChannelSlot

type gen struct {
	p          *plan.Plan
	rank       int
	slots      map[slotKey]int
	ticketBase map[plan.ChannelType]int
	res        Resources
	w          strings.Builder
	first      bool // no op but memory signals yet in this thread block
	// quiet: this rank writes nothing in a call that another rank reads
	// (QuietRank), so none of its memory signals has anything to publish.
	quiet bool
	// meet: per top-level op of the thread block being generated, whether
	// a nop there makes the group's CUDA blocks meet (NopMeetings).
	meet []bool
	// sent: per channel slot, the signals generated so far in the thread
	// block (top level).
	sent map[int]int
	// inline: the thread blocks' functions are inlined into the kernel
	// (small plans, inlineOps).
	inline bool
	// closing: slot -> this rank's signals on it in a call, for the
	// slots whose last signal may be relaxed (closingSlots).
	closing map[int]int
}

// Generate writes the kernel of rank `rank` of p for dtype dt and reduce
// op op. p must be valid (plan.Validate); Generate does not verify it.
// Every op of every thread block becomes straight-line code in a function
// of its own; the kernel switches on blockIdx.x. A switch-channel op
// (NVLink multicast), a read over a port channel or a packet op over one
// other than rppkt from this rank's scratch to one peer (the proxy copies
// packets that are complete) is an error wrapping ErrUnsupported that
// names the op.
func Generate(p *plan.Plan, rank int, dt tensor.DType, op reduce.Op) (*Kernel, error) {
	return GenerateFor(p, rank, dt, op, Target{})
}

// Target is where a generated kernel's peers run.
type Target struct {
	// OneGPU: every rank of the plan runs on the same GPU (ranks sharing
	// it under MPS). The kernel then meets its peers with GPU-scope
	// signals, waits and fences instead of system-scope ones, unless
	// some rank uses a port channel (its proxy is a host thread).
	OneGPU bool
}

// GenerateFor is Generate for kernels whose peers run where t says.
func GenerateFor(p *plan.Plan, rank int, dt tensor.DType, op reduce.Op, t Target) (*Kernel, error) {
	if p == nil || rank < 0 || rank >= p.NumRanks() {
		return nil, fmt.Errorf("gpuexec: no rank %d in the plan", rank)
	}
	if p.NumRanks() > MaxRanks {
		return nil, fmt.Errorf("%w: plan %q has %d ranks (at most %d)", ErrUnsupported, p.Name, p.NumRanks(), MaxRanks)
	}
	dc, err := DTypeCode(dt)
	if err != nil {
		return nil, err
	}
	oc, err := OpCode(op)
	if err != nil {
		return nil, err
	}
	g := &gen{p: p, rank: rank, slots: p.ChannelSlots(), ticketBase: map[plan.ChannelType]int{}, quiet: QuietRank(p, rank), sent: map[int]int{}}
	g.closing = closingSlots(p, g.slots, rank)
	gp := &p.GPUs[rank]
	ops := 0
	for _, tb := range gp.ThreadBlocks {
		ops += len(tb.Ops)
	}
	g.inline = ops <= inlineOps
	for _, t := range []plan.ChannelType{plan.ChannelMemory, plan.ChannelPort} {
		g.ticketBase[t] = g.res.Tickets
		g.res.Tickets += len(gp.ChannelPeers(t))
	}
	g.res.Slots = len(g.slots)
	g.res.Grouped = Groupable(p)
	g.res.Sync = CallSync(p)
	for _, s := range gp.Semaphores {
		g.res.SemInit = append(g.res.SemInit, s.InitValue)
	}
	threads := p.NumThreadsPerBlock
	if threads <= 0 {
		threads = plan.DefaultNumThreadsPerBlock
	}
	var body strings.Builder
	for ti := range gp.ThreadBlocks {
		g.w.Reset()
		if err := g.block(ti); err != nil {
			return nil, err
		}
		body.WriteString(g.w.String())
	}
	var src strings.Builder
	ll := 0
	if p.Protocol == plan.LL {
		ll = 1
	}
	fmt.Fprintf(&src, "// Generated by chorus (algo/gpuexec) from plan %q: rank %d of %d, %s, %s. Do not edit.\n",
		p.Name, rank, p.NumRanks(), dt, op)
	fmt.Fprintf(&src, "#define RANK %d\n#define NRANKS %d\n#define DT %d\n#define OP %d\n#define LL %d\n#define NTHREADS %d\n#define NSEMS %d\n#define PORT %d\n#define GROUPED %d\n#define START %d\n",
		rank, p.NumRanks(), dc, oc, ll, threads, len(g.res.SemInit), b2i(g.res.Port), b2i(g.res.Grouped), b2i(g.res.Sync == SyncBarriers))
	packets := g.res.Sync == SyncPackets || g.res.Sync == SyncFlags
	mono := g.res.Sync == SyncSignals
	peerGPU := t.OneGPU && !usesPortChannels(p)
	fmt.Fprintf(&src, "#define END_RELEASE %d\n#define ZERO_EARLY %d\n#define END_WAIT %d\n#define MONO %d\n#define PACKETS %d\n", b2i(!packets), b2i(g.res.Sync == SyncHandshakes),
		b2i(g.res.Sync != SyncFlags && !mono), b2i(mono), b2i(usesPackets(p)))
	fmt.Fprintf(&src, "#define PEER_GPU %d\n", b2i(peerGPU))
	if len(g.res.SemInit) > 0 {
		fmt.Fprintf(&src, "#define SEM_INIT {%s}\n", joinInts(g.res.SemInit))
	}
	src.WriteString("\n")
	src.WriteString(cudasrc.Half)
	src.WriteString("\n")
	src.WriteString(cudasrc.MemOrder)
	src.WriteString("\n")
	src.WriteString(runtimeSource)
	src.WriteString("\n// ---- the plan ----\n")
	src.WriteString(body.String())
	// The thread blocks' functions take the arguments by reference. A
	// reference to an ordinary kernel parameter makes the compiler copy
	// the whole parameter (1056 bytes) into every thread's local memory at
	// the kernel's start; __grid_constant__ (compute capability 7.0, the
	// executor's least) lets them read it where it is, in the constant
	// bank. The copy into shared memory by one thread that this replaces
	// took 0.7-0.9 us of a 1 KB call (globaltimer stamps, H200, 2 ranks
	// under MPS). A reference passed to a function that is not inlined
	// (the thread blocks' of large plans) makes every read a generic load
	// (TestArgsStayInConstantBank).
	// The launch bound names one block per multiprocessor: with the
	// thread count alone, NVRTC 13.0 (driver 580) gave 2- and 3-rank plans
	// 32 registers and spilled (allreduce_twoshot on 2 ranks: 20 bytes of
	// spill stores, 36 of loads), as if for two blocks a multiprocessor;
	// with it none of the library's kernels from 2 to 4 ranks spills on
	// 13.0 or 11.8 (every algorithm, dtype and op, ptxas -v).
	fmt.Fprintf(&src, "\nextern \"C\" __global__ void __launch_bounds__(NTHREADS, 1) %s(const __grid_constant__ Args params) {\n", KernelName)
	src.WriteString("  const Args& a = params;\n  bool gave, wrapped;\n  const flag_t flag = call_flag(a, &gave, &wrapped);\n")
	src.WriteString("#if PACKETS\n  if (wrapped) {\n    scrub(a);\n    gave = gave || gave_up(a);\n  }\n#endif\n  start_barrier(a, flag);\n")
	src.WriteString("  if (!(START ? gave_up(a) : gave)) {\n    switch (blockIdx.x / (u32)a.group) {\n")
	for ti := range gp.ThreadBlocks {
		fmt.Fprintf(&src, "      case %d: tb_%d(a, flag); break;\n", ti, ti)
	}
	src.WriteString("      default: break;\n    }\n  }\n  end_barrier(a, flag);\n}\n")
	return &Kernel{Rank: rank, DType: dt, Op: op, Source: src.String(), Blocks: max(1, len(gp.ThreadBlocks)), Threads: threads, Res: g.res, PeerGPU: peerGPU}, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Groupable reports whether each thread block of p may run on a group of
// CUDA blocks: no port channels (the proxy counts signals itself), and
// every directed memory channel instance signalled from one thread block
// and waited on by one (lane counters then pair signal and wait ops one
// to one, and tickets can live in registers).
func Groupable(p *plan.Plan) bool {
	slots := p.ChannelSlots()
	sig := map[int]int{}  // slot -> tb+1 that signals it
	wait := map[int]int{} // slot -> tb+1 that waits on it
	ok := true
	for r := range p.GPUs {
		all := p.GPUs[r].ChannelPeers(plan.ChannelMemory)
		for t := range p.GPUs[r].ThreadBlocks {
			var visit func(op *plan.Op)
			visit = func(op *plan.Op) {
				for i := range op.Ops {
					visit(&op.Ops[i])
				}
				if op.ChannelType == plan.ChannelPort || op.ChannelType == plan.ChannelSwitch {
					ok = false
					return
				}
				side, waits := sig, false
				switch op.Name {
				case plan.OpSignal, plan.OpRelaxedSignal, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush:
				case plan.OpWait, plan.OpRelaxedWait:
					side, waits = wait, true
				default:
					return
				}
				for _, i := range op.ChannelIDs {
					id, err := p.TBChannel(r, t, plan.ChannelMemory, i)
					if err != nil || id < 0 || id >= len(all) {
						ok = false
						return
					}
					peer, k := all[id], plan.Occurrence(all, id)
					key := slotKey{Type: plan.ChannelMemory, Src: r, Dst: peer, K: k}
					if waits {
						key = slotKey{Type: plan.ChannelMemory, Src: peer, Dst: r, K: k}
					}
					s := slots[key] // signalled only by key.Src, waited on only by key.Dst
					if prev, seen := side[s]; seen && prev != t+1 {
						ok = false
					}
					side[s] = t + 1
				}
			}
			for oi := range p.GPUs[r].ThreadBlocks[t].Ops {
				visit(&p.GPUs[r].ThreadBlocks[t].Ops[oi])
			}
		}
	}
	return ok
}

// inlineOps: a rank's kernel whose thread blocks have at most this many
// ops in all inlines their functions (no call per block); larger plans
// keep one function each (__noinline__), which bounds NVRTC's time.
const inlineOps = 64

// Sync is how a plan's kernels meet their peers at a call's start and
// end (docs/gpu-executor.md, "Call boundaries").
type Sync uint8

const (
	// SyncBarriers: a start barrier, then an end barrier whose last block
	// publishes every write of the rank (release, acquire) and, for
	// grouped plans, then zeroes the signal counters.
	SyncBarriers Sync = iota
	// SyncPackets (PacketSynced): no start barrier; a relaxed end barrier.
	SyncPackets
	// SyncHandshakes (HandshakeSynced): no start barrier; the end
	// barrier's last block zeroes the signal counters before it publishes.
	SyncHandshakes
	// SyncFlags (FlagSynced): no barrier at all; the packets' flags and
	// the double scratch keep the ranks within one call of each other.
	SyncFlags
	// SyncSignals (SignalSynced): no barrier at all; the plan's opening
	// and closing handshakes do their work, and the signal counters are
	// never zeroed (each lane's waits count from a base the last block
	// advances).
	SyncSignals
)

// CallSync picks the cheapest call boundary that keeps the executor's
// guarantees for p.
func CallSync(p *plan.Plan) Sync {
	switch {
	case FlagSynced(p):
		return SyncFlags
	case PacketSynced(p):
		return SyncPackets
	case SignalSynced(p):
		return SyncSignals
	case HandshakeSynced(p):
		return SyncHandshakes
	}
	return SyncBarriers
}

// usesPackets reports whether an op of p reads or writes LL packets (or
// p's accesses cannot be resolved). SignalSynced plans have none: their
// call number is 64 bits, where packets carry 32.
func usesPackets(p *plan.Plan) bool {
	packets, _, err := p.ScratchUse()
	return packets || err != nil
}

// visitOps calls f on every op of thread block t of rank r in program
// order, pipeline bodies in place (inPipe true).
func visitOps(p *plan.Plan, r, t int, f func(op *plan.Op, inPipe bool)) {
	for oi := range p.GPUs[r].ThreadBlocks[t].Ops {
		op := &p.GPUs[r].ThreadBlocks[t].Ops[oi]
		if op.Name == plan.OpPipeline {
			for bi := range op.Ops {
				f(&op.Ops[bi], true)
			}
			continue
		}
		f(op, false)
	}
}

// QuietRank reports whether rank r of p writes, in a call, nothing that
// another rank reads: no op of r writes another rank's memory (memory,
// port or switch channels alike), and no buffer of r that r writes is
// read by another rank's op (buffers compared whole: in, out, scratch).
// Then a memory signal of r publishes nothing: each tells its peer only
// that r has arrived or has finished reading the peer's memory, and the
// generator makes it relaxed. allreduce_oneshot's ranks are quiet (they
// write their own output, which no peer reads); the two-shot plan's are
// not (peers read the reduced slices from their scratch). False when an
// access cannot be resolved.
func QuietRank(p *plan.Plan, r int) bool {
	written := map[plan.BufferType]bool{}
	ok := true // r writes no other rank's memory
	resolved := visitAccesses(p, r, func(a plan.Access) {
		if a.Mode != plan.AccessWrite {
			return
		}
		if a.Rank != r {
			ok = false
		}
		written[a.Buffer] = true
	})
	if !ok || !resolved {
		return false
	}
	for q := range p.GPUs {
		if q == r {
			continue
		}
		resolved := visitAccesses(p, q, func(a plan.Access) {
			if a.Rank == r && written[a.Buffer] {
				ok = false
			}
		})
		ok = ok && resolved
	}
	return ok
}

// visitAccesses calls f with every access of every op of rank r's
// thread blocks (pipeline bodies included); false when an op's accesses
// cannot be resolved.
func visitAccesses(p *plan.Plan, r int, f func(a plan.Access)) bool {
	ok := true
	for t := range p.GPUs[r].ThreadBlocks {
		visitOps(p, r, t, func(op *plan.Op, _ bool) {
			acc, err := p.OpAccess(r, t, op)
			if err != nil {
				ok = false
				return
			}
			for _, a := range acc {
				f(a)
			}
		})
	}
	return ok
}

// PacketSynced reports whether p's kernels may start a call without the
// cross-rank start barrier and end it with a relaxed one: p is not in
// place, has no signals, waits, flushes, semaphores or port or switch
// channels, and every access of a rank to another rank's memory is a
// packet store into that rank's scratch. The start barrier keeps a peer
// out of a rank's memory until the rank has finished its previous call
// (and its staging copies, and zeroed its signal counters); such a plan
// stages nothing and counts no signals, its readers accept only packets
// carrying this call's flag, and the previous call's end barrier already
// held every peer until this rank had finished that call. Nothing after
// the kernel reads what peers stored (their packets were consumed by
// flag), so the end barrier only says "I am done" (relaxed, as ccl/ipc's
// one-shot end barrier). allreduce_packet is one.
func PacketSynced(p *plan.Plan) bool {
	if p.InPlace || p.NumRanks() < 1 {
		return false
	}
	ok := true
	for r := range p.GPUs {
		for t := range p.GPUs[r].ThreadBlocks {
			visitOps(p, r, t, func(op *plan.Op, _ bool) {
				if !ok {
					return
				}
				switch op.Name {
				case plan.OpSignal, plan.OpWait, plan.OpRelaxedSignal, plan.OpRelaxedWait, plan.OpFlush,
					plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush, plan.OpSemAcquire, plan.OpSemRelease:
					ok = false
					return
				}
				if op.ChannelType == plan.ChannelPort || op.ChannelType == plan.ChannelSwitch {
					ok = false
					return
				}
				acc, err := p.OpAccess(r, t, op)
				if err != nil {
					ok = false
					return
				}
				for _, a := range acc {
					if a.Rank != r && (a.Mode != plan.AccessWrite || a.Buffer != plan.Scratch || !a.Packet) {
						ok = false
						return
					}
				}
			})
		}
	}
	return ok
}

// FlagSynced reports whether p's kernels need no call barrier at all:
// p is PacketSynced, doubles its scratch (a call's packets go to the half
// of its parity) and every rank that stores packets into a peer's
// scratch gets packets from that peer in the same call. Then a rank that
// stores into a peer's half for call N+2 has read that peer's packets of
// call N+1, so the peer had started N+1 and finished N, the last call
// that used the half; a rank can be at most one call ahead of any peer
// it stores into, and readers accept only this call's flag. Nothing else
// of a rank is touched by its peers (PacketSynced), so the end barrier,
// which cost a cross-rank round trip in the last block, has nothing left
// to order. MSCCL++'s and NCCL's LL kernels work so.
func FlagSynced(p *plan.Plan) bool {
	if !p.UseDoubleScratchBuffer || !PacketSynced(p) {
		return false
	}
	stores := map[[2]int]bool{} // [from, to]
	for r := range p.GPUs {
		for t := range p.GPUs[r].ThreadBlocks {
			visitOps(p, r, t, func(op *plan.Op, _ bool) {
				acc, err := p.OpAccess(r, t, op)
				if err != nil {
					stores[[2]int{-1, -1}] = true // unresolvable: never flag-synced
					return
				}
				for _, a := range acc {
					if a.Rank != r {
						stores[[2]int{r, a.Rank}] = true
					}
				}
			})
		}
	}
	for k := range stores {
		if k[0] < 0 || !stores[[2]int{k[1], k[0]}] {
			return false
		}
	}
	return true
}

// HandshakeSynced reports whether p's kernels may start a call without
// the cross-rank start barrier because the plan's own handshakes do its
// work: p groups (Groupable: memory channels only, each directed channel
// signalled by one thread block and waited on by one), has no
// semaphores, no signal or wait inside a pipeline, as many signals as
// waits on every directed channel, and every op of rank r that touches
// rank q's memory runs after a wait on a channel from q, in its own
// thread block or in one that met it at an intra-rank barrier since.
//
// Why that suffices: a wait that returns saw a signal of this call (the
// counters are zero at every call's start), so q has started this call:
// it finished the previous one, its staging copies included, and its
// input for this call is in place. Every signal of a call is waited for
// in the call (equal counts), so when a rank's last block arrives at the
// end barrier no signal of the call is still in flight: it zeroes its
// counters then, before it tells its peers (release), and no peer can
// signal again before it has seen that word. allreduce_oneshot and
// allreduce_twoshot are such plans (each starts with a handshake); the
// start barrier was one cross-rank round trip per call on top of it.
func HandshakeSynced(p *plan.Plan) bool {
	if !Groupable(p) || p.NumRanks() < 1 {
		return false
	}
	slots := p.ChannelSlots()
	balance := map[int]int{} // slot -> signals - waits
	for r := range p.GPUs {
		gp := &p.GPUs[r]
		if len(gp.Semaphores) > 0 {
			return false
		}
		all := gp.ChannelPeers(plan.ChannelMemory)
		// waitPeers: the peers a wait op waits for; signals and waits are
		// counted per directed channel into balance.
		waitPeers := func(t int, op *plan.Op) (uint64, bool) {
			var peers uint64
			for _, i := range op.ChannelIDs {
				id, err := p.TBChannel(r, t, plan.ChannelMemory, i)
				if err != nil || id < 0 || id >= len(all) {
					return 0, false
				}
				peer, k := all[id], plan.Occurrence(all, id)
				if op.Name == plan.OpWait || op.Name == plan.OpRelaxedWait {
					balance[slots[slotKey{Type: plan.ChannelMemory, Src: peer, Dst: r, K: k}]]--
					peers |= 1 << uint(peer)
				} else {
					balance[slots[slotKey{Type: plan.ChannelMemory, Src: r, Dst: peer, K: k}]]++
				}
			}
			return peers, true
		}
		// Per block: the ops in order with what each one needs to know:
		// the peers a wait waits for (its cover), a barrier's (id,
		// meeting), the ranks whose memory a data op touches.
		steps := make([][]coverStep, len(gp.ThreadBlocks))
		pipeBarrier := false
		ok := true
		for t := range gp.ThreadBlocks {
			meeting := map[int]int{}
			visitOps(p, r, t, func(op *plan.Op, inPipe bool) {
				if !ok {
					return
				}
				if op.ChannelType == plan.ChannelPort || op.ChannelType == plan.ChannelSwitch {
					ok = false
					return
				}
				switch op.Name {
				case plan.OpSignal, plan.OpRelaxedSignal, plan.OpWait, plan.OpRelaxedWait:
					w, good := waitPeers(t, op)
					if inPipe || !good {
						ok = false
						return
					}
					steps[t] = append(steps[t], coverStep{cover: w})
				case plan.OpBarrier:
					if inPipe {
						pipeBarrier = true
						return
					}
					steps[t] = append(steps[t], barrierStep(meeting, op.BarrierID))
				case plan.OpNop, plan.OpFlush:
				case plan.OpSemAcquire, plan.OpSemRelease, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush:
					ok = false
				default:
					touch, good := remoteTouches(p, r, t, op)
					if !good {
						ok = false
						return
					}
					steps[t] = append(steps[t], coverStep{touches: touch})
				}
			})
		}
		if !ok {
			return false
		}
		// Barriers pass on what the blocks meeting there have waited for
		// (unless one sits in a pipeline: its meetings are not counted).
		if !covered(steps, false, !pipeBarrier) {
			return false
		}
	}
	for _, b := range balance {
		if b != 0 {
			return false
		}
	}
	return true
}

// coverStep is one op of a thread block in the call-boundary analyses
// (HandshakeSynced, SignalSynced): the ranks it covers (a wait's peers,
// or a signal's), the ranks whose memory it touches, or a barrier
// meeting (id, how many times the block met there before).
type coverStep struct {
	cover, touches uint64
	barrier        [2]int
	isBar          bool
}

// barrierStep is the step of a block's next meeting at barrier id.
func barrierStep(meeting map[int]int, id int) coverStep {
	s := coverStep{barrier: [2]int{id, meeting[id]}, isBar: true}
	meeting[id]++
	return s
}

// covered reports whether every step's touches are covered: by the
// cover of the steps before it in its block (after: of the steps after
// it) and, with barriers, by what the blocks it meets at a barrier
// cover up to that meeting (after: from it on). The meetings' sets only
// grow, so the fixed point settles.
func covered(steps [][]coverStep, after, barriers bool) bool {
	walk := func(ss []coverStep, f func(s coverStep)) {
		for i := range ss {
			if after {
				i = len(ss) - 1 - i
			}
			f(ss[i])
		}
	}
	met := map[[2]int]uint64{}
	for changed := barriers; changed; {
		changed = false
		for _, ss := range steps {
			var c uint64
			walk(ss, func(s coverStep) {
				c |= s.cover
				if s.isBar {
					if met[s.barrier]|c != met[s.barrier] {
						met[s.barrier] |= c
						changed = true
					}
					c |= met[s.barrier]
				}
			})
		}
	}
	ok := true
	for _, ss := range steps {
		var c uint64
		walk(ss, func(s coverStep) {
			c |= s.cover
			if s.isBar {
				c |= met[s.barrier]
			}
			if s.touches&^c != 0 {
				ok = false
			}
		})
	}
	return ok
}

// remoteTouches is the set of ranks other than r whose memory op (of
// rank r's thread block t) reads or writes; false when its accesses
// cannot be resolved.
func remoteTouches(p *plan.Plan, r, t int, op *plan.Op) (uint64, bool) {
	acc, err := p.OpAccess(r, t, op)
	if err != nil {
		return 0, false
	}
	var touch uint64
	for _, a := range acc {
		if a.Rank != r {
			touch |= 1 << uint(a.Rank)
		}
	}
	return touch, true
}

// SignalSynced reports whether p's kernels need no call barrier at all:
// p is HandshakeSynced (its waits tell a rank that a peer has started
// the call), no wait is relaxed, no barrier sits in a pipeline, and every
// op that touches rank q's memory is followed, in its block or in one it
// meets at an intra-rank barrier afterwards, by a signal to q, which q
// waits for in the call (every signal is: HandshakeSynced). Such a signal
// follows another op of its block, so the generator makes it a
// system-scope release, and q's wait acquires: when q's kernel ends, no
// peer touches q's memory any more and every peer write to it is
// visible, which is what the end barrier's round trip said. Without
// that word a peer may signal for the next call while q ends this one,
// so the inbound words are not zeroed: a signal stores (call << 16 | k)
// at its k-th signal on the channel in the call, one writer a lane, and
// a wait for the j-th polls until the word is at least (call << 16 | j)
// (runtime.cuh, MONO; the call number is 64 bits, so plans with packets,
// which carry 32, are not SignalSynced). allreduce_oneshot and
// allreduce_twoshot end with such a closing handshake.
func SignalSynced(p *plan.Plan) bool {
	if !HandshakeSynced(p) || p.Protocol == plan.LL || usesPackets(p) {
		return false
	}
	for r := range p.GPUs {
		gp := &p.GPUs[r]
		all := gp.ChannelPeers(plan.ChannelMemory)
		// Per block, in order: a data op's touched peers, a signal's
		// peers (its cover), a barrier's (id, meeting).
		steps := make([][]coverStep, len(gp.ThreadBlocks))
		ok := true
		for t := range gp.ThreadBlocks {
			meeting := map[int]int{}
			visitOps(p, r, t, func(op *plan.Op, inPipe bool) {
				if !ok {
					return
				}
				switch op.Name {
				case plan.OpRelaxedWait:
					ok = false
				case plan.OpRelaxedSignal, plan.OpWait, plan.OpNop, plan.OpFlush:
					// a relaxed signal publishes nothing, so it covers nothing
				case plan.OpSignal:
					var peers uint64
					for _, i := range op.ChannelIDs {
						id, err := p.TBChannel(r, t, plan.ChannelMemory, i)
						if err != nil || id < 0 || id >= len(all) {
							ok = false
							return
						}
						peers |= 1 << uint(all[id])
					}
					steps[t] = append(steps[t], coverStep{cover: peers})
				case plan.OpBarrier:
					if inPipe {
						ok = false
						return
					}
					steps[t] = append(steps[t], barrierStep(meeting, op.BarrierID))
				default:
					touch, good := remoteTouches(p, r, t, op)
					if !good {
						ok = false
						return
					}
					steps[t] = append(steps[t], coverStep{touches: touch})
				}
			})
		}
		if !ok {
			return false
		}
		// Walking each block backwards: a barrier meeting passes on what
		// any block meeting there signals after it.
		if !covered(steps, true, true) {
			return false
		}
	}
	return true
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

func (g *gen) printf(format string, args ...any) { fmt.Fprintf(&g.w, format, args...) }

func (g *gen) block(ti int) error {
	tb := &g.p.GPUs[g.rank].ThreadBlocks[ti]
	inline := "__noinline__"
	if g.inline {
		inline = "__forceinline__"
	}
	g.printf("\n// thread block %d: %d ops\nstatic __device__ %s void tb_%d(const Args& a, const flag_t flag) {\n", ti, len(tb.Ops), inline, ti)
	clear(g.sent)
	g.printf("  u64 tk[%d] = {0}; // wait tickets (GROUPED plans)\n", max(1, g.res.Tickets))
	g.first = true
	meet, err := NopMeetings(g.p, g.rank, ti)
	if err != nil {
		return err
	}
	g.meet = meet
	for oi := range tb.Ops {
		op := &tb.Ops[oi]
		if op.Name == plan.OpPipeline {
			g.first = false
			if op.Iter == nil || op.Iter.UnitSize <= 0 {
				return g.errf(ti, oi, -1, op, "pipeline without a positive unit_size")
			}
			g.printf("  { // op %d: pipeline, %d-byte units over %d chunks\n", oi, op.Iter.UnitSize, op.Iter.NumChunks)
			g.printf("    const u64 pu = %dull;\n    const u64 iters = ((u64)%d * a.chunk + pu - 1) / pu;\n    for (u64 it = 0; it < iters; it++) {\n", op.Iter.UnitSize, op.Iter.NumChunks)
			for bi := range op.Ops {
				if err := g.op(ti, oi, bi, &op.Ops[bi], "      ", "it, pu"); err != nil {
					return err
				}
			}
			g.printf("    }\n  }\n")
			continue
		}
		if err := g.op(ti, oi, -1, op, "  ", "0, 0"); err != nil {
			return err
		}
		if (op.Name != plan.OpSignal && op.Name != plan.OpRelaxedSignal) || op.ChannelType != plan.ChannelMemory {
			g.first = false
		}
	}
	g.printf("}\n")
	return nil
}

func (g *gen) errf(tb, oi, bi int, op *plan.Op, format string, args ...any) error {
	where := fmt.Sprintf("rank %d tb %d op %d", g.rank, tb, oi)
	if bi >= 0 {
		where += fmt.Sprintf(" body %d", bi)
	}
	return fmt.Errorf("gpuexec: %s (%s): %s", where, op.Name, fmt.Sprintf(format, args...))
}

// chans resolves an op's channels: peer, the slot this rank signals on
// (in the peer's inbound array), the slot it waits on (in its own) and
// its ticket.
func (g *gen) chans(tb int, op *plan.Op) (peers, sigSlots, waitSlots, tickets []int, err error) {
	gp := &g.p.GPUs[g.rank]
	all := gp.ChannelPeers(op.ChannelType)
	for _, i := range op.ChannelIDs {
		id, err := g.p.TBChannel(g.rank, tb, op.ChannelType, i)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if id < 0 || id >= len(all) {
			return nil, nil, nil, nil, fmt.Errorf("no %s channel %d", op.ChannelType, id)
		}
		peer, k := all[id], plan.Occurrence(all, id)
		peers = append(peers, peer)
		sigSlots = append(sigSlots, g.slots[slotKey{Type: op.ChannelType, Src: g.rank, Dst: peer, K: k}])
		waitSlots = append(waitSlots, g.slots[slotKey{Type: op.ChannelType, Src: peer, Dst: g.rank, K: k}])
		tickets = append(tickets, g.ticketBase[op.ChannelType]+id)
	}
	return
}

// loc is the (tb, op, body) triple the waits of an op report.
func loc(tb, oi, bi int) string { return fmt.Sprintf("%d, %d, %d", tb, oi, bi+1) }

func describe(op *plan.Op, acc []plan.Access) string {
	var s []string
	for _, a := range acc {
		r := fmt.Sprintf("r%d.%s[%d:%d]", a.Rank, a.Buffer.Short(), a.Index, a.End())
		if a.Packet {
			r += "pkt"
		}
		if a.Parts > 1 {
			r += fmt.Sprintf("/%d of %d", a.Part, a.Parts)
		}
		s = append(s, r)
	}
	d := op.Name.String()
	if op.ChannelType != plan.ChannelNone {
		d += " (" + op.ChannelType.String() + ")"
	}
	if len(s) > 0 {
		d += " " + strings.Join(s, " ")
	}
	return d
}

func (g *gen) op(tb, oi, bi int, op *plan.Op, ind, iter string) error {
	var acc []plan.Access
	switch {
	case op.Name == plan.OpGroupLoadReduce, op.Name == plan.OpGroupStore, op.Name == plan.OpGroupLoadReduceStore,
		op.Name == plan.OpGroupStorePackets, op.ChannelType == plan.ChannelSwitch:
		// gstorepkt and signal/wait on a switch channel (its barrier)
		// included: every op that needs the multicast object.
		return fmt.Errorf("%w: %v", ErrUnsupported, g.errf(tb, oi, bi, op, "switch channels (NVLink multicast) are not supported: multicast is off on the machines chorus runs on (docs/gpu-executor.md)"))
	}
	switch op.Name {
	case plan.OpPipeline:
		return g.errf(tb, oi, bi, op, "nested pipeline")
	case plan.OpNop, plan.OpBarrier, plan.OpSignal, plan.OpWait, plan.OpRelaxedSignal, plan.OpRelaxedWait,
		plan.OpFlush, plan.OpSemAcquire, plan.OpSemRelease:
	default:
		var err error
		if acc, err = g.p.OpAccess(g.rank, tb, op); err != nil {
			return g.errf(tb, oi, bi, op, "%v", err)
		}
		if len(acc) != len(op.Src)+len(op.Dst) || len(op.Src) == 0 || len(op.Dst) == 0 {
			return g.errf(tb, oi, bi, op, "%d accesses for %d sources and %d destinations", len(acc), len(op.Src), len(op.Dst))
		}
		for _, a := range acc {
			g.res.MaxChunks = max(g.res.MaxChunks, a.Size)
			if a.Packet {
				g.res.Packets = true
			}
			if a.Via == plan.ChannelPort {
				g.res.Port = true
			}
		}
	}
	if op.ChannelType == plan.ChannelPort {
		g.res.Port = true
	}
	L := loc(tb, oi, bi)
	g.printf("%s{ // op %d", ind, oi)
	if bi >= 0 {
		g.printf(" body %d", bi)
	}
	g.printf(": %s\n", describe(op, acc))
	in := ind + "  "
	switch op.Name {
	case plan.OpNop:
		if bi < 0 && g.res.Grouped && !g.meet[oi] {
			// No data op across it touches what one before it did, so
			// it orders nothing between the block's threads either;
			// signals and waits synchronize the block themselves.
			g.printf("%s// nothing to order: no data op across it touches what one before it did\n", in)
			break
		}
		g.printf("%sgroup_sync(a, %s);\n", in, L)
	case plan.OpBarrier:
		if op.BarrierID < 0 || op.NumThreadBlocks <= 0 {
			return g.errf(tb, oi, bi, op, "barrier id %d over %d blocks", op.BarrierID, op.NumThreadBlocks)
		}
		g.res.Barriers = max(g.res.Barriers, op.BarrierID+1)
		g.printf("%stb_barrier(a, %d, %du, %s);\n", in, op.BarrierID, op.NumThreadBlocks, L)
	case plan.OpSemAcquire, plan.OpSemRelease:
		g.printf("%sconst int ids[] = {%s};\n", in, joinInts(op.SemaphoreIDs))
		if op.Name == plan.OpSemAcquire {
			g.printf("%ssem_acquire(a, ids, %d, %s);\n", in, len(op.SemaphoreIDs), L)
		} else {
			g.printf("%ssem_release(a, ids, %d, %s);\n", in, len(op.SemaphoreIDs), L)
		}
	case plan.OpSignal, plan.OpRelaxedSignal, plan.OpWait, plan.OpRelaxedWait:
		peers, sig, wait, tickets, err := g.chans(tb, op)
		if err != nil {
			return g.errf(tb, oi, bi, op, "%v", err)
		}
		if len(peers) == 0 {
			g.printf("%s__syncthreads();\n", in)
			break
		}
		relaxed := op.Name == plan.OpRelaxedSignal || op.Name == plan.OpRelaxedWait
		switch {
		case op.Name == plan.OpWait || op.Name == plan.OpRelaxedWait:
			g.printf("%sconst int slot[] = {%s};\n%sconst int ticket[] = {%s};\n", in, joinInts(wait), in, joinInts(tickets))
			g.printf("%swait_chan(a, slot, ticket, %d, %t, tk, flag, %s);\n", in, len(peers), relaxed, L)
		case op.ChannelType == plan.ChannelPort:
			g.printf("%sconst int peer[] = {%s};\n%sconst int slot[] = {%s};\n", in, joinInts(peers), in, joinInts(sig))
			g.printf("%sport_signal(a, peer, slot, %d, %s);\n", in, len(peers), L)
		default:
			// A signal before any other op of its block has nothing of the
			// call to publish (no write, no wait or barrier that could pass
			// on another's): relaxed, as ccl/ipc's start barrier. The
			// plans' opening handshakes are such signals; a system-scope
			// release costs about 0.9 us (docs/benchmarks.md).
			// So is every signal of a rank that writes nothing a peer
			// reads (QuietRank): it only says "I have arrived" or "I have
			// finished reading your memory", and a load whose value was
			// used before the __syncthreads that precedes the signal has
			// returned (ccl/ipc's end barrier is relaxed for the same
			// reason).
			if g.first || g.quiet {
				relaxed = true
			}
			// seq: each signal's number on its channel in this call
			// (MONO plans store it; the others add 1). MONO plans have
			// no signal in a pipeline, so the numbers are the program
			// order's.
			seq := make([]int, len(sig))
			closing := bi < 0 && len(sig) > 0
			for i, sl := range sig {
				if bi < 0 {
					g.sent[sl]++
					seq[i] = g.sent[sl]
				}
				if seq[i] > 0xffff && g.res.Sync == SyncSignals {
					return g.errf(tb, oi, bi, op, "more than 65535 signals on one channel in a call")
				}
				if n, ok := g.closing[sl]; !ok || n != seq[i] {
					closing = false
				}
			}
			// A closing signal to peers whose memory this rank never
			// writes and whose matching wait ends its block
			// (closingSlots) has nothing to publish either.
			if closing {
				relaxed = true
			}
			g.printf("%sconst int peer[] = {%s};\n%sconst int slot[] = {%s};\n%sconst u32 seq[] = {%s};\n", in, joinInts(peers), in, joinInts(sig), in, joinInts(seq))
			g.printf("%ssignal_mem(a, peer, slot, seq, %d, %t, flag);\n", in, len(peers), relaxed)
		}
	case plan.OpFlush:
		if op.ChannelType == plan.ChannelPort {
			g.printf("%sport_flush(a, %s);\n", in, L)
		} else {
			g.printf("%sgroup_sync(a, %s);\n", in, L)
		}
	case plan.OpCopy, plan.OpPut, plan.OpGet, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush,
		plan.OpCopyPackets, plan.OpPutPackets, plan.OpUnpackPackets, plan.OpReadPutPackets:
		if err := g.move(tb, oi, bi, op, acc, in, iter, L); err != nil {
			return err
		}
	case plan.OpReduce, plan.OpReadReduce, plan.OpReduceSend, plan.OpReadReduceSend:
		g.ranges(acc, in, iter)
		ns := len(op.Src)
		g.printf("%schar* const dst[%d] = {%s};\n", in, len(op.Dst), g.ptrs(acc[ns:], ns))
		g.printf("%sconst char* const src[%d] = {%s};\n", in, ns, g.ptrs(acc[:ns], 0))
		g.printf("%sreduce_plain<%d, %d>(a, dst, src, r0.n);\n", in, ns, len(op.Dst))
	case plan.OpReducePackets, plan.OpReduceSendPackets, plan.OpReduceCopyPackets, plan.OpReduceCopySendPackets:
		ns := len(op.Src)
		if acc[0].Packet {
			return g.errf(tb, oi, bi, op, "source 0 must be plain data")
		}
		mask := 0
		for d, a := range acc[ns:] {
			if a.Packet {
				if a.Via == plan.ChannelPort {
					return fmt.Errorf("%w: %v", ErrUnsupported, g.errf(tb, oi, bi, op, "packets over port channels"))
				}
				mask |= 1 << d
			}
		}
		if acc[ns].Packet {
			return g.errf(tb, oi, bi, op, "destination 0 must be plain data")
		}
		g.ranges(acc, in, iter)
		g.printf("%schar* const dst[%d] = {%s};\n", in, len(op.Dst), g.ptrs(acc[ns:], ns))
		g.printf("%sconst char* const src[%d] = {%s};\n", in, ns, g.ptrs(acc[:ns], 0))
		g.printf("%sreduce_packets<%d, %d, %d>(a, dst, src, r0.n, flag, %s);\n", in, ns, len(op.Dst), mask, L)
	default:
		return fmt.Errorf("%w: %v", ErrUnsupported, g.errf(tb, oi, bi, op, "unknown op"))
	}
	g.printf("%s}\n", ind)
	return nil
}

// ranges declares r0, r1, ... for the op's accesses.
func (g *gen) ranges(acc []plan.Access, in, iter string) {
	for i, a := range acc {
		g.printf("%sconst Rg r%d = rg(a, %d, %d, %d, %d, %s);\n", in, i, a.Index, a.Size, a.Part, max(1, a.Parts), iter)
	}
}

func (g *gen) ptr(a plan.Access, i int) string {
	return fmt.Sprintf("at(a, flag, %d, %d, r%d.off)", a.Rank, int(a.Buffer)-1, i)
}

func (g *gen) ptrs(acc []plan.Access, first int) string {
	s := make([]string, len(acc))
	for i, a := range acc {
		s[i] = g.ptr(a, first+i)
	}
	return strings.Join(s, ", ")
}

// move emits copy, put, get and the packet moves: dst[i] from src[i].
func (g *gen) move(tb, oi, bi int, op *plan.Op, acc []plan.Access, in, iter, L string) error {
	ns := len(op.Src)
	if op.Name == plan.OpReadPutPackets && len(op.Dst) > 1 {
		// One source forwarded to every destination (MSCCL++'s rppkt;
		// plan.Validate checks every src_buff entry is src_buff[0]):
		// each packet is waited for once and stored len(Dst) times.
		for _, a := range acc[ns:] {
			if a.Via == plan.ChannelPort {
				return fmt.Errorf("%w: %v", ErrUnsupported, g.errf(tb, oi, bi, op, "packets over port channels"))
			}
		}
		g.ranges(acc, in, iter)
		g.printf("%schar* const dst[%d] = {%s};\n", in, len(op.Dst), g.ptrs(acc[ns:], ns))
		g.printf("%sforward_packets_to<%d>(a, dst, %s, r0.n, flag, %s);\n", in, len(op.Dst), g.ptr(acc[0], 0), L)
		return nil
	}
	if ns != len(op.Dst) {
		return g.errf(tb, oi, bi, op, "%d sources for %d destinations", ns, len(op.Dst))
	}
	if op.Name == plan.OpReadPutPackets && ns == 1 && acc[0].Packet && acc[1].Packet && acc[0].Via != plan.ChannelPort && acc[1].Via == plan.ChannelPort {
		// Packets over a port channel (MSCCL++'s two-node packet
		// programs): the source packets, in this rank's scratch, are
		// waited for, then the proxy copies them, flags and all, into the
		// peer's scratch, whose readers wait for the flags as for a
		// memory channel's packets. Packets are twice their data bytes
		// (LL16 and LL8 alike).
		g.ranges(acc, in, iter)
		sp, dp := g.ptr(acc[0], 0), g.ptr(acc[1], 1)
		g.printf("%swait_packets(a, %s, %s, r0.n, flag, %s);\n", in, dp, sp, L)
		g.printf("%sport_put(a, %s, %s, 2 * r0.n, %s);\n", in, dp, sp, L)
		return nil
	}
	g.ranges(acc, in, iter)
	port := false
	for i := range ns {
		s, d := acc[i], acc[ns+i]
		sp, dp := g.ptr(s, i), g.ptr(d, ns+i)
		viaPort := s.Via == plan.ChannelPort || d.Via == plan.ChannelPort
		switch {
		case viaPort && (s.Packet || d.Packet):
			return fmt.Errorf("%w: %v", ErrUnsupported, g.errf(tb, oi, bi, op, "packets over port channels"))
		case viaPort:
			if s.Via == plan.ChannelPort {
				return fmt.Errorf("%w: %v", ErrUnsupported, g.errf(tb, oi, bi, op, "reads over port channels"))
			}
			port = true
			g.printf("%sport_put(a, %s, %s, r%d.n, %s);\n", in, dp, sp, i, L)
		case !s.Packet && !d.Packet:
			g.printf("%scopy_bytes(a, %s, %s, r%d.n);\n", in, dp, sp, i)
		case !s.Packet:
			g.printf("%swrite_packets(a, %s, %s, r%d.n, flag);\n", in, dp, sp, i)
		case !d.Packet:
			g.printf("%sread_packets(a, %s, %s, r%d.n, flag, %s);\n", in, dp, sp, i, L)
		default:
			g.printf("%sforward_packets(a, %s, %s, r%d.n, flag, %s);\n", in, dp, sp, i, L)
		}
	}
	if op.Name != plan.OpPutWithSignal && op.Name != plan.OpPutWithSignalAndFlush {
		return nil
	}
	peers, sig, _, _, err := g.chans(tb, op)
	if err != nil {
		return g.errf(tb, oi, bi, op, "%v", err)
	}
	if len(peers) > 0 {
		g.printf("%sconst int peer[] = {%s};\n%sconst int slot[] = {%s};\n", in, joinInts(peers), in, joinInts(sig))
		if port || op.ChannelType == plan.ChannelPort {
			g.printf("%sport_signal(a, peer, slot, %d, %s);\n", in, len(peers), L)
		} else {
			g.printf("%ssignal_mem(a, peer, slot, %d, false);\n", in, len(peers))
		}
	}
	if op.Name == plan.OpPutWithSignalAndFlush {
		if port || op.ChannelType == plan.ChannelPort {
			g.printf("%sport_flush(a, %s);\n", in, L)
		} else {
			g.printf("%s__syncthreads();\n", in)
		}
	}
	return nil
}

// NopMeetings reports, for each op of thread block tb of rank (true at a
// nop whose group must meet), whether a top-level nop needs the group's
// CUDA blocks to meet (group_sync) or only the block's threads
// (__syncthreads). A nop orders the data ops before it against those
// after it; within a group, the CUDA blocks split each op's bytes, so
// data one block wrote may be read by another only after a meeting. Where
// no data op between the last meeting (or barrier, semaphore op, memory
// flush, the start) and the nop touches, on any rank, a range of a buffer
// that a data op between the nop and the next such point touches, with at
// least one of the two writing, nothing crosses the nop between blocks
// and the meeting is dropped. Signals and waits are not meetings here:
// every block of a group signals its own lane and every waiting block
// polls every lane (runtime.cuh), so what crosses ranks is ordered by
// them alone. In-place plans put input and output in one allocation: any
// two accesses to either on one rank conflict. Nops inside pipelines
// always meet.
func NopMeetings(p *plan.Plan, rank, tb int) ([]bool, error) {
	ops := p.GPUs[rank].ThreadBlocks[tb].Ops
	meet := make([]bool, len(ops))
	acc := make([][]plan.Access, len(ops)) // the data ops' accesses
	for i := range ops {
		switch ops[i].Name {
		case plan.OpNop, plan.OpBarrier, plan.OpSignal, plan.OpWait, plan.OpRelaxedSignal, plan.OpRelaxedWait,
			plan.OpFlush, plan.OpSemAcquire, plan.OpSemRelease:
			continue
		}
		a, err := p.OpAccess(rank, tb, &ops[i])
		if err != nil {
			return nil, err
		}
		acc[i] = a
	}
	meets := func(op *plan.Op) bool { // a point every block of the group reaches together
		switch op.Name {
		case plan.OpBarrier, plan.OpSemAcquire, plan.OpSemRelease:
			return true
		case plan.OpFlush:
			return op.ChannelType != plan.ChannelPort
		}
		return false
	}
	var since []plan.Access
	for i := range ops {
		switch {
		case ops[i].Name == plan.OpNop:
			var after []plan.Access
			for j := i + 1; j < len(ops) && ops[j].Name != plan.OpNop && !meets(&ops[j]); j++ {
				after = append(after, acc[j]...)
			}
			if meet[i] = conflicts(since, after, p.InPlace); meet[i] {
				since = since[:0]
			}
		case meets(&ops[i]):
			since = since[:0]
		default:
			since = append(since, acc[i]...)
		}
	}
	return meet, nil
}

// conflicts reports whether an access of a and one of b touch the same
// chunks of one buffer of one rank, at least one writing.
func conflicts(a, b []plan.Access, inPlace bool) bool {
	class := func(x plan.Access) plan.BufferType {
		if inPlace && x.Buffer == plan.Output {
			return plan.Input
		}
		return x.Buffer
	}
	for _, x := range a {
		for _, y := range b {
			if x.Rank != y.Rank || class(x) != class(y) || (x.Mode != plan.AccessWrite && y.Mode != plan.AccessWrite) {
				continue
			}
			if (inPlace && class(x) == plan.Input) || (x.Index < y.End() && y.Index < x.End()) {
				return true
			}
		}
	}
	return false
}

// closingSlots returns, for rank r of p, the memory channel slots whose
// last signal of a call (from r) may be relaxed: r writes nothing in the
// peer's memory anywhere in the call, and the peer's last wait on the
// slot is the last op but nops of its thread block, outside pipelines.
// Such a signal only says "I have finished reading your memory" (a load
// whose value was used before the __syncthreads that precedes the
// signal has returned) to a block that does nothing after it, so it
// has nothing to publish and nothing to pass on: the system-scope
// release it would otherwise be (about 0.9 us) buys nothing. The
// result maps slot -> the number of signals r makes on it in a call
// (the last one is the closing signal); nil when an access or channel
// cannot be resolved.
func closingSlots(p *plan.Plan, slots map[slotKey]int, r int) map[int]int {
	// The ranks whose memory r writes.
	var writes uint64
	if !visitAccesses(p, r, func(a plan.Access) {
		if a.Mode == plan.AccessWrite && a.Rank != r {
			writes |= 1 << uint(a.Rank)
		}
	}) {
		return nil
	}
	// chanSlots resolves the channels of a memory signal or wait of rank
	// q's block t: their peers, signal slots and wait slots, false when
	// unresolvable.
	chanSlots := func(q, t int, op *plan.Op) (peers, sig, wait []int, ok bool) {
		all := p.GPUs[q].ChannelPeers(plan.ChannelMemory)
		for _, i := range op.ChannelIDs {
			id, err := p.TBChannel(q, t, plan.ChannelMemory, i)
			if err != nil || id < 0 || id >= len(all) {
				return nil, nil, nil, false
			}
			peer, k := all[id], plan.Occurrence(all, id)
			peers = append(peers, peer)
			sig = append(sig, slots[slotKey{Type: plan.ChannelMemory, Src: q, Dst: peer, K: k}])
			wait = append(wait, slots[slotKey{Type: plan.ChannelMemory, Src: peer, Dst: q, K: k}])
		}
		return peers, sig, wait, true
	}
	isSignal := func(op *plan.Op) bool {
		return (op.Name == plan.OpSignal || op.Name == plan.OpRelaxedSignal) && op.ChannelType == plan.ChannelMemory
	}
	isWait := func(op *plan.Op) bool {
		return (op.Name == plan.OpWait || op.Name == plan.OpRelaxedWait) && op.ChannelType == plan.ChannelMemory
	}
	// r's signals per slot, at the top level only, and the peer each
	// slot signals.
	count, to := map[int]int{}, map[int]int{}
	for t := range p.GPUs[r].ThreadBlocks {
		for oi := range p.GPUs[r].ThreadBlocks[t].Ops {
			op := &p.GPUs[r].ThreadBlocks[t].Ops[oi]
			if op.Name == plan.OpPipeline {
				for bi := range op.Ops {
					if isSignal(&op.Ops[bi]) {
						return nil // numbering inside pipelines is not the program order's
					}
				}
			}
			if !isSignal(op) {
				continue
			}
			peers, sig, _, ok := chanSlots(r, t, op)
			if !ok {
				return nil
			}
			for i, s := range sig {
				count[s]++
				to[s] = peers[i]
			}
		}
	}
	out := map[int]int{}
	for q := range p.GPUs {
		if q == r || writes&(1<<uint(q)) != 0 {
			continue
		}
		// q's last wait on each slot: whether only nops follow it (a
		// slot waited on in two blocks: no).
		last, waiter := map[int]bool{}, map[int]int{}
		for t := range p.GPUs[q].ThreadBlocks {
			ops := p.GPUs[q].ThreadBlocks[t].Ops
			for oi := range ops {
				op := &ops[oi]
				if op.Name == plan.OpPipeline {
					for bi := range op.Ops {
						if isWait(&op.Ops[bi]) {
							return nil
						}
					}
				}
				if !isWait(op) {
					continue
				}
				_, _, wait, ok := chanSlots(q, t, op)
				if !ok {
					return nil
				}
				tail := true
				for _, o := range ops[oi+1:] {
					if o.Name != plan.OpNop {
						tail = false
						break
					}
				}
				for _, s := range wait {
					if w, seen := waiter[s]; seen && w != t {
						tail = false
						waiter[s] = -1
					} else if !seen {
						waiter[s] = t
					}
					last[s] = tail && waiter[s] == t // a later wait on the slot overwrites
				}
			}
		}
		for s, n := range count {
			if last[s] && to[s] == q {
				out[s] = n
			}
		}
	}
	return out
}

// usesPortChannels reports whether some rank of p has a port channel.
func usesPortChannels(p *plan.Plan) bool {
	for r := range p.GPUs {
		if len(p.GPUs[r].ChannelPeers(plan.ChannelPort)) > 0 {
			return true
		}
	}
	return false
}

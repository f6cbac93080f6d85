package gpuexec

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
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
// channels, dtypes other than float32/float16/bfloat16, ...).
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
}

// Resources are the device words a rank's kernel uses, sized by the plan.
type Resources struct {
	Slots    int   // inbound signal counters per rank (numbered across the plan)
	Tickets  int   // this rank's wait ticket counters (one per channel)
	Barriers int   // intra-rank barrier ids
	SemInit  []int // semaphores and their init values
	Port     bool  // some op uses a port channel: the rank needs the proxy
	Packets  bool  // some op reads or writes LL packets
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

// slotKey names one directed channel instance: the k-th channel of type t
// from src to dst (the k-th channel from r to p pairs with the k-th from
// p to r, as in the CPU executor).
type slotKey struct {
	t        plan.ChannelType
	src, dst int
	k        int
}

// slotTable numbers every directed channel instance of the plan the same
// way on every rank: the index of its counter in the receiver's inbound
// array.
func slotTable(p *plan.Plan) map[slotKey]int {
	keys := map[slotKey]bool{}
	for r := range p.GPUs {
		for _, t := range []plan.ChannelType{plan.ChannelMemory, plan.ChannelPort} {
			peers := p.GPUs[r].ChannelPeers(t)
			for c, peer := range peers {
				k := occurrence(peers, c)
				keys[slotKey{t, r, peer, k}] = true
				keys[slotKey{t, peer, r, k}] = true
			}
		}
	}
	list := make([]slotKey, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	slices.SortFunc(list, func(a, b slotKey) int {
		switch {
		case a.t != b.t:
			return int(a.t) - int(b.t)
		case a.src != b.src:
			return a.src - b.src
		case a.dst != b.dst:
			return a.dst - b.dst
		}
		return a.k - b.k
	})
	out := make(map[slotKey]int, len(list))
	for i, k := range list {
		out[k] = i
	}
	return out
}

func occurrence(peers []int, c int) int {
	k := 0
	for _, q := range peers[:c] {
		if q == peers[c] {
			k++
		}
	}
	return k
}

type gen struct {
	p          *plan.Plan
	rank       int
	slots      map[slotKey]int
	ticketBase map[plan.ChannelType]int
	res        Resources
	w          strings.Builder
}

// Generate writes the kernel of rank `rank` of p for dtype dt and reduce
// op op. p must be valid (plan.Validate); Generate does not verify it.
// Every op of every thread block becomes straight-line code in a function
// of its own; the kernel switches on blockIdx.x. A switch-channel op
// (NVLink multicast) or a packet op over a port channel is an error
// wrapping ErrUnsupported that names the op.
func Generate(p *plan.Plan, rank int, dt tensor.DType, op reduce.Op) (*Kernel, error) {
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
	g := &gen{p: p, rank: rank, slots: slotTable(p), ticketBase: map[plan.ChannelType]int{}}
	gp := &p.GPUs[rank]
	for _, t := range []plan.ChannelType{plan.ChannelMemory, plan.ChannelPort} {
		g.ticketBase[t] = g.res.Tickets
		g.res.Tickets += len(gp.ChannelPeers(t))
	}
	g.res.Slots = len(g.slots)
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
	fmt.Fprintf(&src, "#define RANK %d\n#define NRANKS %d\n#define DT %d\n#define OP %d\n#define LL %d\n#define NTHREADS %d\n#define NSEMS %d\n",
		rank, p.NumRanks(), dc, oc, ll, threads, len(g.res.SemInit))
	if len(g.res.SemInit) > 0 {
		fmt.Fprintf(&src, "#define SEM_INIT {%s}\n", joinInts(g.res.SemInit))
	}
	src.WriteString("\n")
	src.WriteString(cudasrc.Half)
	src.WriteString("\n")
	src.WriteString(runtimeSource)
	src.WriteString("\n// ---- the plan ----\n")
	src.WriteString(body.String())
	fmt.Fprintf(&src, "\nextern \"C\" __global__ void __launch_bounds__(NTHREADS) %s(const Args a) {\n", KernelName)
	src.WriteString("  const u32 flag = call_flag(a);\n  start_barrier(a, flag);\n  if (!gave_up(a)) {\n    switch (blockIdx.x) {\n")
	for ti := range gp.ThreadBlocks {
		fmt.Fprintf(&src, "      case %d: tb_%d(a, flag); break;\n", ti, ti)
	}
	src.WriteString("      default: break;\n    }\n  }\n  end_barrier(a, flag);\n}\n")
	return &Kernel{Rank: rank, DType: dt, Op: op, Source: src.String(), Blocks: max(1, len(gp.ThreadBlocks)), Threads: threads, Res: g.res}, nil
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
	g.printf("\n// thread block %d: %d ops\nstatic __device__ __noinline__ void tb_%d(const Args& a, const u32 flag) {\n", ti, len(tb.Ops), ti)
	for oi := range tb.Ops {
		op := &tb.Ops[oi]
		if op.Name == plan.OpPipeline {
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
		peer, k := all[id], occurrence(all, id)
		peers = append(peers, peer)
		sigSlots = append(sigSlots, g.slots[slotKey{op.ChannelType, g.rank, peer, k}])
		waitSlots = append(waitSlots, g.slots[slotKey{op.ChannelType, peer, g.rank, k}])
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
	switch op.Name {
	case plan.OpGroupLoadReduce, plan.OpGroupStore, plan.OpGroupLoadReduceStore:
		return fmt.Errorf("%w: %v", ErrUnsupported, g.errf(tb, oi, bi, op, "switch channels (NVLink multicast) are not supported: multicast is off on the machines chorus runs on (docs/gpu-executor.md)"))
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
		g.printf("%s__syncthreads();\n", in)
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
			g.printf("%ssem_release(a, ids, %d);\n", in, len(op.SemaphoreIDs))
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
			g.printf("%swait_chan(a, slot, ticket, %d, %t, %s);\n", in, len(peers), relaxed, L)
		case op.ChannelType == plan.ChannelPort:
			g.printf("%sconst int peer[] = {%s};\n%sconst int slot[] = {%s};\n", in, joinInts(peers), in, joinInts(sig))
			g.printf("%sport_signal(a, peer, slot, %d, %s);\n", in, len(peers), L)
		default:
			g.printf("%sconst int peer[] = {%s};\n%sconst int slot[] = {%s};\n", in, joinInts(peers), in, joinInts(sig))
			g.printf("%ssignal_mem(a, peer, slot, %d, %t);\n", in, len(peers), relaxed)
		}
	case plan.OpFlush:
		if op.ChannelType == plan.ChannelPort {
			g.printf("%sport_flush(a, %s);\n", in, L)
		} else {
			g.printf("%s__syncthreads();\n", in)
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
		g.printf("%sreduce_plain<%d, %d>(dst, src, r0.n);\n", in, ns, len(op.Dst))
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
	if ns != len(op.Dst) {
		return g.errf(tb, oi, bi, op, "%d sources for %d destinations", ns, len(op.Dst))
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
			g.printf("%scopy_bytes(%s, %s, r%d.n);\n", in, dp, sp, i)
		case !s.Packet:
			g.printf("%swrite_packets(%s, %s, r%d.n, flag);\n", in, dp, sp, i)
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

package gpuexec

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/verify"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// ErrRejected wraps the verifier's error for a plan it rejects (the
// *verify.Error stays reachable with errors.As).
var ErrRejected = errors.New("gpuexec: the verifier rejects the plan (force to run it anyway)")

// CheckPlan refuses, before anything is allocated or launched, a plan the
// GPU executor cannot run on n ranks: a different rank count, more than
// MaxRanks, switch channels (NVLink multicast), reads over port
// channels, packet ops over port channels other than rppkt to one peer,
// or (unless force) a plan the verifier rejects, with the verifier's
// message. Every rank reaches the same verdict.
func CheckPlan(p *plan.Plan, n int, force bool) error {
	if p == nil {
		return fmt.Errorf("%w: nil plan", ccl.ErrBadArgs)
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: plan %q: %v", ccl.ErrBadArgs, p.Name, err)
	}
	if p.NumRanks() != n {
		return fmt.Errorf("%w: plan %q has %d ranks, the communicator %d", ccl.ErrBadArgs, p.Name, p.NumRanks(), n)
	}
	if n > MaxRanks {
		return fmt.Errorf("%w: plan %q has %d ranks (at most %d)", ErrUnsupported, p.Name, n, MaxRanks)
	}
	for r := range p.GPUs {
		for _, c := range p.GPUs[r].Channels {
			if c.Type == plan.ChannelSwitch {
				return fmt.Errorf("%w: plan %q: rank %d has a switch channel (NVLink multicast), which the GPU executor does not run", ErrUnsupported, p.Name, r)
			}
		}
		// Generating the kernel finds every op it cannot run and names it.
		if _, err := Generate(p, r, tensor.Float32, reduce.Sum); err != nil {
			return err
		}
	}
	if !force {
		if _, err := verify.Verify(p); err != nil {
			return fmt.Errorf("%w: plan %q: %w", ErrRejected, p.Name, err)
		}
	}
	return nil
}

// Call is one call's sizes, checked against the plan on every rank.
type Call struct {
	DType             tensor.DType
	Op                reduce.Op
	InBytes, OutBytes int64
	Layouts           []plan.Layout // per rank
}

// CheckCall checks a call of p (dtype, reduce op, input and output bytes)
// before launch: the dtype and op have kernels, explicit reduce ops in
// the plan agree with op, and every rank's layout accepts the sizes with
// chunks, thread-block-group parts and pipeline units of whole elements
// (whole 4-byte packet words in LL plans). Errors wrap ccl.ErrBadArgs or
// ErrUnsupported.
func CheckCall(p *plan.Plan, dt tensor.DType, op reduce.Op, inBytes, outBytes int64) (*Call, error) {
	if _, err := DTypeCode(dt); err != nil {
		return nil, err
	}
	if _, err := OpCode(op); err != nil {
		return nil, err
	}
	want := map[reduce.Op]plan.ReduceOp{reduce.Sum: plan.ReduceSum, reduce.Min: plan.ReduceMin, reduce.Max: plan.ReduceMax}[op]
	es := int64(dt.Size())
	word := es
	if p.Protocol == plan.LL {
		word = max(es, 4)
	}
	c := &Call{DType: dt, Op: op, InBytes: inBytes, OutBytes: outBytes}
	var err error
	eachOp(p, func(r, tb, oi int, o *plan.Op) {
		if err != nil {
			return
		}
		if o.ReduceOp != plan.ReduceNone && o.ReduceOp != want {
			err = fmt.Errorf("%w: plan %q rank %d tb %d op %d (%s) reduces with %s, the call with %s (rewrite the plan for the call's op)",
				ccl.ErrBadArgs, p.Name, r, tb, oi, o.Name, o.ReduceOp, op)
		}
		if o.TBG != nil && o.TBG.Size > 1 && int64(p.BufferAlignment)%word != 0 {
			err = fmt.Errorf("%w: plan %q rank %d tb %d op %d splits ranges over a thread-block group in %d-byte units, not whole %d-byte words of %s",
				ccl.ErrBadArgs, p.Name, r, tb, oi, p.BufferAlignment, word, dt)
		}
		if o.Name == plan.OpPipeline && o.Iter != nil && int64(o.Iter.UnitSize)%word != 0 {
			err = fmt.Errorf("%w: plan %q rank %d tb %d op %d: pipeline unit of %d bytes is not whole %d-byte words of %s",
				ccl.ErrBadArgs, p.Name, r, tb, oi, o.Iter.UnitSize, word, dt)
		}
	})
	if err != nil {
		return nil, err
	}
	for r := range p.GPUs {
		lay, err := p.Layout(r, inBytes, outBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: plan %q rank %d: %v", ccl.ErrBadArgs, p.Name, r, err)
		}
		if lay.ChunkBytes%word != 0 {
			return nil, fmt.Errorf("%w: plan %q rank %d: chunks of %d bytes are not whole %d-byte words of %s", ccl.ErrBadArgs, p.Name, r, lay.ChunkBytes, word, dt)
		}
		c.Layouts = append(c.Layouts, lay)
	}
	return c, nil
}

// eachOp visits every op of every rank, pipeline bodies included (with
// the pipeline's op index).
func eachOp(p *plan.Plan, f func(r, tb, oi int, o *plan.Op)) {
	for r := range p.GPUs {
		for ti := range p.GPUs[r].ThreadBlocks {
			for oi := range p.GPUs[r].ThreadBlocks[ti].Ops {
				o := &p.GPUs[r].ThreadBlocks[ti].Ops[oi]
				f(r, ti, oi, o)
				for bi := range o.Ops {
					f(r, ti, oi, &o.Ops[bi])
				}
			}
		}
	}
}

// Buffers says where each of a rank's buffers lives.
type Buffers struct {
	// IPC: some rank reaches the buffer of another (or the buffer holds
	// packets): it is IPC memory every rank maps, staged from and to the
	// caller's tensors. Otherwise the kernel uses the caller's tensor
	// directly (no copy). Indexed by plan.BufferType-1.
	IPC [3]bool
	// InputWritten: some op writes an input buffer, so the caller's input
	// is never used in place (it would be modified).
	InputWritten bool
	// OutputCovered[r]: the ops write every output chunk of rank r in
	// every call, so a staged output need not be preloaded with the
	// caller's (poisoned) values.
	OutputCovered []bool
}

// AliasUnsafe reports whether a call whose send and recv tensors overlap
// would compute garbage: neither buffer is staged through IPC memory and
// the plan is not in-place, so the kernel reads the caller's input and
// writes the caller's output directly and a thread block may read input
// that another already overwrote. A staged input is copied in before the
// kernel, a staged output copied out after it, so those calls are safe.
func (b Buffers) AliasUnsafe(inPlace bool) bool { return !inPlace && !b.IPC[0] && !b.IPC[1] }

// Overlap reports whether byte ranges [a, a+an) and [b, b+bn) overlap.
func Overlap(a uint64, an int64, b uint64, bn int64) bool {
	return an > 0 && bn > 0 && a < b+uint64(bn) && b < a+uint64(an)
}

// PlanBuffers decides, from Plan.Access over every op of every rank,
// which buffers are IPC memory. The answer is the same on every rank, so
// the IPC allocations stay collective. In-place plans stage input and
// output through one IPC region that aliases them as the collective says.
func PlanBuffers(p *plan.Plan) (Buffers, error) {
	var b Buffers
	var err error
	eachOp(p, func(r, tb, oi int, o *plan.Op) {
		if err != nil || o.Name == plan.OpPipeline {
			return
		}
		acc, e := p.OpAccess(r, tb, o)
		if e != nil {
			err = fmt.Errorf("gpuexec: rank %d tb %d op %d: %w", r, tb, oi, e)
			return
		}
		for _, a := range acc {
			i := int(a.Buffer) - 1
			if i < 0 || i > 2 {
				continue
			}
			if a.Rank != r || a.Packet {
				b.IPC[i] = true
			}
			if a.Mode == plan.AccessWrite && a.Buffer == plan.Input {
				b.InputWritten = true
			}
		}
	})
	if err != nil {
		return b, err
	}
	for r := range p.GPUs {
		if p.GPUs[r].ScratchChunks > 0 {
			b.IPC[2] = true
		}
	}
	if p.InPlace {
		b.IPC[0], b.IPC[1] = true, true
	}
	b.OutputCovered = make([]bool, p.NumRanks())
	for r := range p.GPUs {
		if b.OutputCovered[r], err = outputCovered(p, r); err != nil {
			return b, err
		}
	}
	return b, nil
}

// outputCovered reports whether every output chunk of rank is written in
// every call (whole chunks, or every part of a thread-block group).
func outputCovered(p *plan.Plan, rank int) (bool, error) {
	oc := p.GPUs[rank].OutputChunks
	if oc == 0 || (p.InPlace && p.Collective != plan.AllGather) {
		return true, nil
	}
	covered := make([]bool, oc)
	mark := func(a, b int) {
		for i := max(a, 0); i < min(b, oc); i++ {
			covered[i] = true
		}
	}
	if p.InPlace {
		ic := p.GPUs[rank].InputChunks
		mark(rank*ic, (rank+1)*ic)
	}
	type key struct{ index, size, parts int }
	parts := map[key]map[int]bool{}
	var err error
	eachOp(p, func(r, tb, oi int, o *plan.Op) {
		if err != nil || o.Name == plan.OpPipeline {
			return
		}
		acc, e := p.OpAccess(r, tb, o)
		if e != nil {
			err = e
			return
		}
		for _, a := range acc {
			if a.Mode != plan.AccessWrite || a.Rank != rank || a.Buffer != plan.Output {
				continue
			}
			if a.Parts <= 1 {
				mark(a.Index, a.End())
				continue
			}
			k := key{a.Index, a.Size, a.Parts}
			if parts[k] == nil {
				parts[k] = map[int]bool{}
			}
			parts[k][a.Part] = true
			if len(parts[k]) == a.Parts {
				mark(a.Index, a.End())
			}
		}
	})
	for _, c := range covered {
		if !c {
			return false, err
		}
	}
	return true, err
}

// Sizes are the IPC bytes one call needs per buffer (the most over every
// rank, so every rank allocates the same: the allocations are
// collective), and each scratch half.
type Sizes struct {
	Bytes       [3]int64 // input, output, scratch; in-place plans use Bytes[0] for the shared region
	ScratchHalf []int64  // per rank: one half of the scratch when double-buffered, else 0
}

// CallSizes sizes the IPC buffers of call c.
func CallSizes(p *plan.Plan, b Buffers, c *Call) Sizes {
	var s Sizes
	for r, lay := range c.Layouts {
		if b.IPC[0] {
			s.Bytes[0] = max(s.Bytes[0], lay.InputBytes)
		}
		if b.IPC[1] {
			s.Bytes[1] = max(s.Bytes[1], lay.OutputBytes)
		}
		s.Bytes[2] = max(s.Bytes[2], lay.ScratchBytes)
		half := int64(0)
		if p.UseDoubleScratchBuffer {
			half = lay.ScratchBytes / 2
			// Layout rounds the doubled size up to the alignment; a half is
			// at least the undoubled size rounded up.
			al := lay.Alignment
			one := lay.ChunkBytes * int64(p.GPUs[r].ScratchChunks)
			if p.Protocol == plan.LL {
				one *= 2
			}
			half = max(half, (one+al-1)/al*al)
			s.Bytes[2] = max(s.Bytes[2], 2*half)
		}
		s.ScratchHalf = append(s.ScratchHalf, half)
	}
	if p.InPlace {
		s.Bytes[0] = max(s.Bytes[0], s.Bytes[1])
		s.Bytes[1] = 0
	}
	return s
}

// InPlaceOffsets are the offsets of rank r's input and output inside the
// shared in-place region: allgather's input is block r of the output,
// reducescatter's output block r of the input, otherwise both at 0.
func InPlaceOffsets(p *plan.Plan, r int, inBytes, outBytes int64) (in, out int64) {
	switch p.Collective {
	case plan.AllGather:
		return int64(r) * inBytes, 0
	case plan.ReduceScatter:
		return 0, int64(r) * outBytes
	}
	return 0, 0
}

// Control is the layout of a rank's control allocation (IPC memory,
// zeroed when allocated): the words peers write (barrier slots, inbound
// signal counters) and the rank's own (call counter, tickets, intra-rank
// barriers, semaphores, the FIFO head). The same size on every rank.
type Control struct {
	BarStart, BarEnd, Ctl, Tickets, Inbound, TBBar, Sems, FIFOHead, GBar, Epochs, Total int64
	Slots, NTickets, NBarriers, NSems, NTBs                                             int
}

// MaxGroup is the most CUDA blocks one plan thread block runs on: the
// inbound counters have MaxGroup lanes per channel slot.
const MaxGroup = 128

// ControlLayout sizes the control allocation for p (the most any rank
// needs).
func ControlLayout(p *plan.Plan) Control {
	var c Control
	c.Slots = len(p.ChannelSlots())
	for r := range p.GPUs {
		g := &p.GPUs[r]
		c.NTickets = max(c.NTickets, len(g.ChannelPeers(plan.ChannelMemory))+len(g.ChannelPeers(plan.ChannelPort)))
		c.NSems = max(c.NSems, len(g.Semaphores))
		c.NTBs = max(c.NTBs, len(g.ThreadBlocks))
	}
	eachOp(p, func(r, tb, oi int, o *plan.Op) {
		if o.Name == plan.OpBarrier {
			c.NBarriers = max(c.NBarriers, o.BarrierID+1)
		}
	})
	up := func(n int64) int64 { return (n + 63) / 64 * 64 }
	c.BarStart = 0
	c.BarEnd = 64
	c.Ctl = 128
	c.FIFOHead = 192
	c.Tickets = 256
	c.Inbound = c.Tickets + up(int64(c.NTickets)*8)
	// the inbound words, MaxGroup lanes a slot (runtime.cuh, slot_at)
	c.TBBar = c.Inbound + up(int64(c.Slots)*8*MaxGroup)
	c.Sems = c.TBBar + up(int64(c.NBarriers)*8)
	c.GBar = c.Sems + up(int64(c.NSems)*4)
	c.Epochs = c.GBar + up(int64(c.NTBs)*8)
	// the last call's flag, one u64 a block (runtime.cuh, epochs_of):
	// MaxGroup lanes a plan thread block
	c.Total = c.Epochs + up(int64(c.NTBs)*8*MaxGroup)
	return c
}

// Hash identifies a plan: ranks compare it before every call.
func Hash(p *plan.Plan) ([32]byte, error) {
	raw, err := p.Marshal()
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(raw), nil
}

// Place is where a caller's tensor lies: in a live IPC allocation
// (ccl/ipc Allocator.Lookup: the allocation's Seq, the tensor's Offset in
// it and the allocation's bytes from there, Room) or not (IPC false).
type Place struct {
	IPC          bool
	Seq          uint64
	Offset, Room int64
}

// DirectProposal says, for the input and the output, whether this rank
// can let its peers reach the caller's tensor where it lies instead of
// staging it through the executor's IPC buffer (a device copy before or
// after the kernel): the plan stages that buffer (Buffers.IPC, not in
// place), the tensor is IPC memory at a 16-byte aligned offset, it holds
// the bytes the kernel addresses in that buffer on any rank (s.Bytes),
// the plan never writes its input, and send and recv do not overlap
// (peers would read an input this rank overwrites). Every rank proposes;
// a buffer goes direct only where every rank proposes it with the same
// allocation and offset (Run), so the peers' addresses are the
// allocation's mappings plus that offset.
func DirectProposal(p *plan.Plan, b Buffers, s Sizes, in, out Place, inBytes, outBytes int64, overlap bool) [2]bool {
	var d [2]bool
	if p.InPlace || overlap {
		return d
	}
	ok := func(pl Place, need, have int64) bool {
		return pl.IPC && pl.Offset%16 == 0 && need <= have && need <= pl.Room
	}
	d[0] = b.IPC[0] && !b.InputWritten && ok(in, s.Bytes[0], inBytes)
	d[1] = b.IPC[1] && ok(out, s.Bytes[1], outBytes)
	return d
}

package handplan

import (
	"fmt"

	"github.com/chorus-rt/chorus/algo/plan"
)

// Options tune the hand-built plans.
type Options struct {
	// TBs splits every data op over this many thread blocks (thread-block
	// groups), each with its own channel to every peer; 0 means 1.
	TBs int
	// Alignment is the plan's buffer alignment in bytes (0: 16). Small
	// alignments allow odd element counts.
	Alignment int
	// Reduce is the reduce_op written on reduce ops (ReduceNone: absent,
	// the caller's op applies).
	Reduce plan.ReduceOp
	// LL selects the packet protocol (allreduce only).
	LL bool
}

func (o Options) tbs() int {
	if o.TBs < 1 {
		return 1
	}
	return o.TBs
}

// slot is the scratch chunk where rank `to` keeps what rank `from` sent:
// peers in rank order, skipping `to` itself.
func slot(from, to int) int {
	if from < to {
		return from
	}
	return from - 1
}

func peersOf(r, n int) []int {
	var ps []int
	for p := range n {
		if p != r {
			ps = append(ps, p)
		}
	}
	return ps
}

// builder assembles one rank.
type builder struct {
	r, n, k int
	peers   []int
	g       plan.GPU
}

func newBuilder(r, n int, o Options) *builder {
	b := &builder{r: r, n: n, k: o.tbs(), peers: peersOf(r, n)}
	b.g.ID = r
	var conn []int
	for range b.k {
		conn = append(conn, b.peers...)
	}
	if len(conn) > 0 {
		b.g.Channels = []plan.Channel{{Type: plan.ChannelMemory, ConnectedTo: conn}}
	}
	for tb := range b.k {
		t := plan.ThreadBlock{ID: tb}
		if len(b.peers) > 0 {
			ids := make([]int, len(b.peers))
			for j := range ids {
				ids[j] = tb*len(b.peers) + j
			}
			t.Channels = []plan.TBChannel{{Type: plan.ChannelMemory, ChannelIDs: ids}}
		}
		b.g.ThreadBlocks = append(b.g.ThreadBlocks, t)
	}
	return b
}

// remote adds remote buffer (peer, typ) to the rank and every block's refs,
// returning its thread-block-local id.
func (b *builder) remote(peer int, typ plan.BufferType) int {
	id := len(b.g.RemoteBuffers)
	b.g.RemoteBuffers = append(b.g.RemoteBuffers, plan.RemoteBuffer{Rank: peer, Type: typ, AccessChannelTypes: []plan.ChannelType{plan.ChannelMemory}})
	for tb := range b.g.ThreadBlocks {
		t := &b.g.ThreadBlocks[tb]
		if len(t.RemoteBufferRefs) == 0 {
			t.RemoteBufferRefs = []plan.RemoteBufRef{{AccessChannelType: plan.ChannelMemory}}
		}
		t.RemoteBufferRefs[0].RemoteBufferIDs = append(t.RemoteBufferRefs[0].RemoteBufferIDs, id)
	}
	return id
}

func (b *builder) allChannels() []int {
	ids := make([]int, len(b.peers))
	for j := range ids {
		ids[j] = j
	}
	return ids
}

// each appends op (with its part set) to every thread block.
func (b *builder) each(make func(tb int) plan.Op) {
	for tb := range b.k {
		op := make(tb)
		if b.k > 1 && (len(op.Src) > 0 || len(op.Dst) > 0) {
			op.TBG = &plan.TBGroup{ID: tb, Size: b.k}
		}
		t := &b.g.ThreadBlocks[tb]
		t.Ops = append(t.Ops, op)
	}
}

// syncAll: nop (the block's writes are done), signal every peer, wait for
// every peer, nop (the whole block sees the peers' writes), as MSCCL++'s
// GPU threads need.
func (b *builder) syncAll() {
	if len(b.peers) == 0 {
		return
	}
	b.each(func(int) plan.Op { return plan.Op{Name: plan.OpNop} })
	b.each(func(int) plan.Op {
		return plan.Op{Name: plan.OpSignal, ChannelType: plan.ChannelMemory, ChannelIDs: b.allChannels()}
	})
	b.each(func(int) plan.Op {
		return plan.Op{Name: plan.OpWait, ChannelType: plan.ChannelMemory, ChannelIDs: b.allChannels()}
	})
	b.each(func(int) plan.Op { return plan.Op{Name: plan.OpNop} })
}

func (b *builder) finish() plan.GPU {
	if b.k > 1 {
		b.each(func(int) plan.Op { return plan.Op{Name: plan.OpBarrier, BarrierID: 0, NumThreadBlocks: b.k} })
	}
	return b.g
}

func newPlan(name string, coll plan.Collective, n int, o Options) *plan.Plan {
	al := o.Alignment
	if al <= 0 {
		al = plan.DefaultBufferAlignment
	}
	proto := plan.Simple
	if o.LL {
		proto = plan.LL
	}
	return &plan.Plan{Name: name, Collective: coll, Protocol: proto, NumThreadsPerBlock: plan.DefaultNumThreadsPerBlock,
		BufferAlignment: al, MaxMessageSize: plan.DefaultMaxMessageSize}
}

// AllPairsAllReduce is the one-step all-pairs allreduce for n ranks,
// in place: rank r puts chunk p of its input into rank p's scratch, then
// reduces chunk r with what it received (res) and puts the result into
// chunk r of every peer's input. With LL, the puts are packets and no
// signals are needed (ppkt, respkt, upkt).
func AllPairsAllReduce(n int, o Options) (*plan.Plan, error) {
	if n < 1 {
		return nil, fmt.Errorf("handplan: %d ranks", n)
	}
	name := fmt.Sprintf("allpairs_allreduce_%d", n)
	if o.LL {
		name += "_ll"
	}
	p := newPlan(name, plan.AllReduce, n, o)
	p.InPlace = true
	for r := range n {
		b := newBuilder(r, n, o)
		b.g.InputChunks, b.g.OutputChunks = n, n
		b.g.ScratchChunks = n - 1
		if o.LL {
			b.g.ScratchChunks = 2 * (n - 1)
		}
		scr := make([]int, len(b.peers))
		in := make([]int, len(b.peers))
		for j, q := range b.peers {
			scr[j] = b.remote(q, plan.Scratch)
			in[j] = b.remote(q, plan.Input)
		}
		if len(b.peers) > 0 {
			name := plan.OpPut
			if o.LL {
				name = plan.OpPutPackets
			}
			b.each(func(int) plan.Op {
				op := plan.Op{Name: name, ChannelType: plan.ChannelMemory}
				for j, q := range b.peers {
					op.Src = append(op.Src, plan.Local(plan.Input, q, 1))
					op.Dst = append(op.Dst, plan.Remote(scr[j], slot(r, q), 1))
				}
				return op
			})
			if !o.LL {
				b.syncAll()
			}
		}
		red := plan.OpReduceSend
		if o.LL {
			red = plan.OpReduceSendPackets
		}
		if len(b.peers) == 0 {
			red = plan.OpReduce
		}
		b.each(func(int) plan.Op {
			op := plan.Op{Name: red, ReduceOp: o.Reduce}
			if len(b.peers) > 0 {
				op.ChannelType = plan.ChannelMemory
			}
			op.Src = []plan.BufRef{plan.Local(plan.Input, r, 1)}
			op.Dst = []plan.BufRef{plan.Local(plan.Input, r, 1)}
			for j := range b.peers {
				op.Src = append(op.Src, plan.Local(plan.Scratch, j, 1))
			}
			for j, q := range b.peers {
				if o.LL {
					op.Dst = append(op.Dst, plan.Remote(scr[j], n-1+slot(r, q), 1))
				} else {
					op.Dst = append(op.Dst, plan.Remote(in[j], r, 1))
				}
			}
			return op
		})
		if len(b.peers) > 0 {
			if o.LL {
				b.each(func(int) plan.Op {
					op := plan.Op{Name: plan.OpUnpackPackets}
					for j, q := range b.peers {
						op.Src = append(op.Src, plan.Local(plan.Scratch, n-1+j, 1))
						op.Dst = append(op.Dst, plan.Local(plan.Input, q, 1))
					}
					return op
				})
			} else {
				b.syncAll()
			}
		}
		p.GPUs = append(p.GPUs, b.finish())
	}
	return p, p.Validate()
}

// AllPairsAllGather is the one-step allgather, out of place: rank r copies
// its input into output chunk r and puts it into chunk r of every peer's
// output, then signals and waits for every peer.
func AllPairsAllGather(n int, o Options) (*plan.Plan, error) {
	if n < 1 {
		return nil, fmt.Errorf("handplan: %d ranks", n)
	}
	p := newPlan(fmt.Sprintf("allpairs_allgather_%d", n), plan.AllGather, n, o)
	for r := range n {
		b := newBuilder(r, n, o)
		b.g.InputChunks, b.g.OutputChunks = 1, n
		out := make([]int, len(b.peers))
		for j, q := range b.peers {
			out[j] = b.remote(q, plan.Output)
		}
		b.each(func(int) plan.Op {
			return plan.Op{Name: plan.OpCopy, Src: []plan.BufRef{plan.Local(plan.Input, 0, 1)}, Dst: []plan.BufRef{plan.Local(plan.Output, r, 1)}}
		})
		if len(b.peers) > 0 {
			b.each(func(int) plan.Op {
				op := plan.Op{Name: plan.OpPut, ChannelType: plan.ChannelMemory}
				for j := range b.peers {
					op.Src = append(op.Src, plan.Local(plan.Input, 0, 1))
					op.Dst = append(op.Dst, plan.Remote(out[j], r, 1))
				}
				return op
			})
			b.syncAll()
		}
		p.GPUs = append(p.GPUs, b.finish())
	}
	return p, p.Validate()
}

// AllPairsReduceScatter: rank r puts input chunk p into rank p's scratch,
// signals and waits, then reduces its own chunk with what it received
// into its output (re).
func AllPairsReduceScatter(n int, o Options) (*plan.Plan, error) {
	if n < 1 {
		return nil, fmt.Errorf("handplan: %d ranks", n)
	}
	p := newPlan(fmt.Sprintf("allpairs_reducescatter_%d", n), plan.ReduceScatter, n, o)
	for r := range n {
		b := newBuilder(r, n, o)
		b.g.InputChunks, b.g.OutputChunks, b.g.ScratchChunks = n, 1, n-1
		scr := make([]int, len(b.peers))
		for j, q := range b.peers {
			scr[j] = b.remote(q, plan.Scratch)
		}
		if len(b.peers) > 0 {
			b.each(func(int) plan.Op {
				op := plan.Op{Name: plan.OpPut, ChannelType: plan.ChannelMemory}
				for j, q := range b.peers {
					op.Src = append(op.Src, plan.Local(plan.Input, q, 1))
					op.Dst = append(op.Dst, plan.Remote(scr[j], slot(r, q), 1))
				}
				return op
			})
			b.syncAll()
		}
		b.each(func(int) plan.Op {
			op := plan.Op{Name: plan.OpReduce, ReduceOp: o.Reduce}
			op.Src = []plan.BufRef{plan.Local(plan.Input, r, 1)}
			for j := range b.peers {
				op.Src = append(op.Src, plan.Local(plan.Scratch, j, 1))
			}
			op.Dst = []plan.BufRef{plan.Local(plan.Output, 0, 1)}
			return op
		})
		p.GPUs = append(p.GPUs, b.finish())
	}
	return p, p.Validate()
}

// Names lists the plans Build makes.
func Names() []string {
	return []string{"allpairs-allreduce", "allpairs-allreduce-ll", "allpairs-allgather", "allpairs-reducescatter"}
}

// Build makes the named plan for n ranks.
func Build(name string, n int, o Options) (*plan.Plan, error) {
	switch name {
	case "allpairs-allreduce":
		return AllPairsAllReduce(n, o)
	case "allpairs-allreduce-ll":
		o.LL = true
		return AllPairsAllReduce(n, o)
	case "allpairs-allgather":
		return AllPairsAllGather(n, o)
	case "allpairs-reducescatter":
		return AllPairsReduceScatter(n, o)
	}
	return nil, fmt.Errorf("handplan: unknown plan %q (have %v)", name, Names())
}

// CopyOps is a 1-rank allreduce (a copy of the input into the output)
// made of k copy ops, op i copying chunk i of k, each split over the
// Options' thread blocks (thread-block groups). It measures what one op
// of the GPU executor costs: the plan moves the bytes of one plain device
// copy, so (plan time - copy time) / k is the cost per op (chorus bench
// planops). It is not in Names: it has one rank only.
func CopyOps(k int, o Options) (*plan.Plan, error) {
	if k < 1 {
		return nil, fmt.Errorf("handplan: copy-ops: %d ops", k)
	}
	p := newPlan(fmt.Sprintf("copy_ops_%d", k), plan.AllReduce, 1, o)
	b := newBuilder(0, 1, o)
	b.g.InputChunks, b.g.OutputChunks = k, k
	for i := range k {
		b.each(func(int) plan.Op {
			return plan.Op{Name: plan.OpCopy, Src: []plan.BufRef{plan.Local(plan.Input, i, 1)}, Dst: []plan.BufRef{plan.Local(plan.Output, i, 1)}}
		})
	}
	p.GPUs = append(p.GPUs, b.finish())
	return p, p.Validate()
}

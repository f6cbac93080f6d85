package verify

import (
	"fmt"
	"sort"

	"github.com/chorus-rt/chorus/algo/plan"
)

// Report says what Verify checked.
type Report struct {
	Collective   plan.Collective
	Ranks        int // ranks (GPUs)
	ThreadBlocks int // thread blocks over all ranks
	Ops          int // ops in the plan, pipeline bodies counted op by op
	// Steps is the number of op executions simulated: pipeline bodies are
	// run PipelineIterations times.
	Steps              int
	PipelineIterations int
	// States is the number of scheduler states explored: one per executed
	// step plus the initial one. By confluence (docs/plans.md) one maximal
	// execution decides deadlock freedom, so this is all there is to explore.
	States        int
	CellsPerChunk int // symbolic cells each chunk is cut into
	Cells         int // symbolic cells tracked over all ranks and buffers
	CellAccesses  int // cell reads and writes checked for races
	SyncEdges     int // happens-before edges: signal/wait, barrier, semaphore, flush, packet
	OutputChunks  int // output chunks compared with the collective's result (or, Custom, described)
	// Custom: the collective has no fixed result (broadcast, sendrecv,
	// "test", custom names); the plan is free of deadlocks, races and
	// undefined reads and Movement is what it computes.
	Custom bool
	// Movement is the data movement the plan computes (set whenever the
	// simulation got as far as the results, for every collective).
	Movement *Movement
}

func (r *Report) String() string {
	if r.Custom {
		return fmt.Sprintf("%s: %d ranks, %d thread blocks, %d ops (%d steps, %d states), %d cells (%d per chunk), %d cell accesses, %d sync edges; no fixed result for this collective: %d output chunks described by the data movement",
			r.Collective, r.Ranks, r.ThreadBlocks, r.Ops, r.Steps, r.States, r.Cells, r.CellsPerChunk, r.CellAccesses, r.SyncEdges, r.OutputChunks)
	}
	return fmt.Sprintf("%s: %d ranks, %d thread blocks, %d ops (%d steps, %d states), %d cells (%d per chunk), %d cell accesses, %d sync edges, %d output chunks checked",
		r.Collective, r.Ranks, r.ThreadBlocks, r.Ops, r.Steps, r.States, r.Cells, r.CellsPerChunk, r.CellAccesses, r.SyncEdges, r.OutputChunks)
}

// pipelineIters is how many iterations of a pipeline body the verifier
// runs; each iteration works on its slice of every range of the body.
const pipelineIters = 2

// maxCellsPerChunk bounds the cells a chunk is cut into (lcm of thread-block
// group sizes, times the pipeline iterations).
const maxCellsPerChunk = 1024

// Verify checks that p computes its collective on every rank without
// deadlock or data race, for every schedule of its thread blocks. It returns
// nil error only then. A rejection is an *Error (errors.As) whose Kind says
// why; errors.Is works with ErrDeadlock, ErrRace, ErrWrongResult, ... The
// Report (non-nil whenever the simulation ran) says what was checked.
// docs/plans.md describes the method and its limits.
func Verify(p *plan.Plan) (*Report, error) {
	if p == nil {
		return nil, &Error{Kind: Invalid, Rank: -1, TB: -1, Op: -1, Body: -1, Iter: -1, Msg: "nil plan"}
	}
	if err := p.Validate(); err != nil {
		return nil, &Error{Kind: Invalid, Rank: -1, TB: -1, Op: -1, Body: -1, Iter: -1, Msg: "the plan fails Validate", Err: err}
	}
	v := &verifier{p: p, rep: &Report{Collective: p.Collective, Ranks: p.NumRanks()}}
	if e := v.setup(); e != nil {
		return v.rep, e
	}
	v.run()
	if e := v.finish(); e != nil {
		return v.rep, e
	}
	return v.rep, nil
}

type clock []uint32

func (c clock) join(o clock) {
	for i, x := range o {
		if x > c[i] {
			c[i] = x
		}
	}
}

func (c clock) clone() clock { return append(clock(nil), c...) }

// event is one access: by agent th at epoch ep, in step at (nil: none).
type event struct {
	th int
	ep uint32
	at *step
}

type cell struct {
	val    *value
	pkt    bool // holds LL packets
	w      event
	wC, wW clock   // the writer's clocks at a packet write (a packet read acquires them)
	rw     []event // idempotent packet rewrites since w (same value and format)
	reads  []event
}

// agent is a thread block, or the proxy of one port channel (tb == -1).
type agent struct {
	id, rank, tb int
	chanID       int // proxy: the GPU port channel id
	steps        []*step
	pc           int
	// seg: a thread block's current segment (ops between two fences; every
	// access of the segment has epoch seg and C[id] == seg-1), a proxy's
	// operation counter (C[id] == seg).
	seg     uint32
	C, W    clock // strong (release/acquire) and weak (incl. relaxed) knowledge
	pC, pW  clock // acquisitions of the current segment, effective after the next fence
	arrived bool
	barN    map[int]int
}

func (a *agent) done() bool { return a.pc >= len(a.steps) }

type step struct {
	loc     Location
	op      *plan.Op
	iter    int
	iters   int
	acc     []plan.Access
	keys    []sigKey // channel keys of signal/wait/pws/pwsf, per channel_ids entry
	proxies []*agent // port ops: the proxy of each channel_ids entry
}

func (s *step) String() string { return s.loc.String() + " (" + s.op.Name.String() + ")" }

type sigKey struct {
	src, dst int
	t        plan.ChannelType
	k        int // the k-th channel of type t from src to dst
}

type sigRec struct {
	C, W    clock
	strongC clock // C of the latest strong signal up to this one (nil: none)
	at      *step
}

type sigState struct {
	key       sigKey
	sigs      []sigRec
	waits     int
	total     int
	signalers map[int]bool
	waiters   map[int]bool
	firstSig  *step
}

type barGen struct {
	arrived int
	C, W    clock
}

type barState struct {
	n    int
	gens []*barGen
}

type semState struct {
	init, value, acquires int
	rel                   []sigRec
	releasers, acquirers  map[int]bool
	lastRel               *step
}

type verifier struct {
	p      *plan.Plan
	rep    *Report
	U      int
	iters  int
	agents []*agent // thread blocks first (rank, tb order), then proxies
	nthr   int
	prox   map[[2]int]*agent
	mem    [][3][]cell
	alias  []aliasMap
	ctb    contrib
	keys   map[sigKey]*sigState
	korder []sigKey
	bars   map[[2]int]*barState
	sems   [][]*semState
	swInst [][]int // plan.SwitchInstances, once a switch signal or wait needs it

	race, undef, format, unsup *Error
}

// aliasMap says where a rank's logical buffers live: buffer b (index b-1)
// is physical buffer to[b-1] shifted by shift[b-1] chunks.
type aliasMap struct {
	to    [3]plan.BufferType
	shift [3]int
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func isWaitOp(n plan.OpName) bool { return n == plan.OpWait || n == plan.OpRelaxedWait }
func isSignalOp(n plan.OpName) bool {
	return n == plan.OpSignal || n == plan.OpRelaxedSignal || n == plan.OpPutWithSignal || n == plan.OpPutWithSignalAndFlush
}
func isPutOp(n plan.OpName) bool {
	switch n {
	case plan.OpPut, plan.OpPutWithSignal, plan.OpPutWithSignalAndFlush, plan.OpPutPackets, plan.OpReadPutPackets:
		return true
	}
	return false
}
func isReduceOp(n plan.OpName) bool {
	switch n {
	case plan.OpReduce, plan.OpReadReduce, plan.OpReduceSend, plan.OpReadReduceSend, plan.OpReducePackets,
		plan.OpReduceSendPackets, plan.OpReduceCopyPackets, plan.OpReduceCopySendPackets,
		plan.OpGroupLoadReduce, plan.OpGroupLoadReduceStore:
		return true
	}
	return false
}

func (v *verifier) setup() *Error {
	p := v.p
	n := p.NumRanks()
	// Cells per chunk: every thread-block-group split and pipeline slice of
	// a chunk range falls on cell boundaries.
	l, pipes := 1, false
	var visit func(ops []plan.Op)
	visit = func(ops []plan.Op) {
		for i := range ops {
			if ops[i].TBG != nil && ops[i].TBG.Size > 1 {
				l = l / gcd(l, ops[i].TBG.Size) * ops[i].TBG.Size
			}
			if ops[i].Name == plan.OpPipeline {
				pipes = true
				visit(ops[i].Ops)
			}
		}
	}
	for r := range p.GPUs {
		for t := range p.GPUs[r].ThreadBlocks {
			visit(p.GPUs[r].ThreadBlocks[t].Ops)
			if l > maxCellsPerChunk {
				return newErr(Unsupported, nil, "thread-block group sizes need more than %d cells per chunk", maxCellsPerChunk)
			}
		}
	}
	v.iters = 1
	if pipes {
		v.iters = pipelineIters
		l *= pipelineIters
	}
	v.U = l
	v.rep.CellsPerChunk = l
	v.rep.PipelineIterations = v.iters

	// Agents and steps.
	v.prox = map[[2]int]*agent{}
	for r := range p.GPUs {
		g := &p.GPUs[r]
		for t := range g.ThreadBlocks {
			a := &agent{id: len(v.agents), rank: r, tb: t, seg: 1, barN: map[int]int{}}
			v.agents = append(v.agents, a)
			v.rep.ThreadBlocks++
			for oi := range g.ThreadBlocks[t].Ops {
				op := &g.ThreadBlocks[t].Ops[oi]
				if op.Name != plan.OpPipeline {
					v.rep.Ops++
					s, e := v.newStep(r, t, op, Location{Rank: r, TB: t, Op: oi, Body: -1, Iter: -1}, 0, 1)
					if e != nil {
						return e
					}
					a.steps = append(a.steps, s)
					continue
				}
				v.rep.Ops += len(op.Ops)
				for it := 0; it < v.iters; it++ {
					for bi := range op.Ops {
						s, e := v.newStep(r, t, &op.Ops[bi], Location{Rank: r, TB: t, Op: oi, Body: bi, Iter: it}, it, v.iters)
						if e != nil {
							return e
						}
						a.steps = append(a.steps, s)
					}
				}
			}
		}
	}
	v.nthr = len(v.agents)
	// Proxies were created on demand by newStep in v.prox; number them.
	var pk [][2]int
	for k := range v.prox {
		pk = append(pk, k)
	}
	sort.Slice(pk, func(i, j int) bool { return pk[i][0] < pk[j][0] || pk[i][0] == pk[j][0] && pk[i][1] < pk[j][1] })
	for _, k := range pk {
		a := v.prox[k]
		a.id = len(v.agents)
		v.agents = append(v.agents, a)
	}
	for _, a := range v.agents {
		a.C, a.W = make(clock, len(v.agents)), make(clock, len(v.agents))
	}

	// Static synchronization structure.
	v.keys = map[sigKey]*sigState{}
	v.bars = map[[2]int]*barState{}
	v.sems = make([][]*semState, n)
	for r := range p.GPUs {
		for _, s := range p.GPUs[r].Semaphores {
			v.sems[r] = append(v.sems[r], &semState{init: s.InitValue, value: s.InitValue, releasers: map[int]bool{}, acquirers: map[int]bool{}})
		}
	}
	for _, a := range v.agents[:v.nthr] {
		for _, s := range a.steps {
			name := s.op.Name
			switch {
			case isSignalOp(name) || isWaitOp(name):
				for _, k := range s.keys {
					st := v.key(k)
					if isWaitOp(name) {
						st.waiters[a.id] = true
					} else {
						st.total++
						st.signalers[a.id] = true
						if st.firstSig == nil {
							st.firstSig = s
						}
					}
				}
			case name == plan.OpBarrier:
				bk := [2]int{a.rank, s.op.BarrierID}
				if v.bars[bk] == nil {
					v.bars[bk] = &barState{n: s.op.NumThreadBlocks}
				}
			case name == plan.OpSemAcquire || name == plan.OpSemRelease:
				for _, id := range s.op.SemaphoreIDs {
					st := v.sems[a.rank][id]
					if name == plan.OpSemAcquire {
						st.acquirers[a.id] = true
					} else {
						st.releasers[a.id] = true
					}
				}
			}
		}
	}
	users := map[*agent]map[int]bool{}
	for _, a := range v.agents[:v.nthr] {
		for _, s := range a.steps {
			if s.op.Name == plan.OpWait {
				continue
			}
			for _, px := range s.proxies {
				if users[px] == nil {
					users[px] = map[int]bool{}
				}
				users[px][a.tb] = true
				if len(users[px]) > 1 {
					return newErr(Unsupported, s, "port channel %d of rank %d is used by more than one thread block; the order of its proxy's requests would depend on the schedule", px.chanID, px.rank)
				}
			}
		}
	}
	for _, k := range v.korder {
		st := v.keys[k]
		if len(st.signalers) > 1 || len(st.waiters) > 1 {
			return newErr(Unsupported, st.firstSig, "%s channel %d from rank %d to rank %d is signalled by %d and waited on by %d thread blocks; the verifier needs one of each (a shared counter's pairing depends on the schedule)",
				k.t, k.k, k.src, k.dst, len(st.signalers), len(st.waiters))
		}
	}
	for r := range v.sems {
		for id, st := range v.sems[r] {
			if len(st.releasers) > 1 || len(st.acquirers) > 1 {
				return &Error{Kind: Unsupported, Rank: r, TB: -1, Op: -1, Body: -1, Iter: -1,
					Msg: fmt.Sprintf("semaphore %d is released by %d and acquired by %d thread blocks; the verifier needs at most one of each", id, len(st.releasers), len(st.acquirers))}
			}
		}
	}
	return v.setupMemory()
}

func (v *verifier) key(k sigKey) *sigState {
	st := v.keys[k]
	if st == nil {
		st = &sigState{key: k, signalers: map[int]bool{}, waiters: map[int]bool{}}
		v.keys[k] = st
		v.korder = append(v.korder, k)
	}
	return st
}

func (v *verifier) newStep(r, t int, op *plan.Op, loc Location, iter, iters int) (*step, *Error) {
	p := v.p
	s := &step{loc: loc, op: op, iter: iter, iters: iters}
	acc, err := p.OpAccess(r, t, op)
	if err != nil {
		return nil, newErr(Invalid, s, "%v", err)
	}
	s.acc = acc
	if op.ChannelType == plan.ChannelMemory || op.ChannelType == plan.ChannelPort {
		for _, ci := range op.ChannelIDs {
			gid, err := p.TBChannel(r, t, op.ChannelType, ci)
			if err != nil {
				return nil, newErr(Invalid, s, "%v", err)
			}
			peers := p.GPUs[r].ChannelPeers(op.ChannelType)
			peer := peers[gid]
			k := 0
			for j := 0; j < gid; j++ {
				if peers[j] == peer {
					k++
				}
			}
			if isSignalOp(op.Name) {
				s.keys = append(s.keys, sigKey{src: r, dst: peer, t: op.ChannelType, k: k})
			} else if isWaitOp(op.Name) {
				s.keys = append(s.keys, sigKey{src: peer, dst: r, t: op.ChannelType, k: k})
			}
			if op.ChannelType == plan.ChannelPort {
				pk := [2]int{r, gid}
				a := v.prox[pk]
				if a == nil {
					a = &agent{rank: r, tb: -1, chanID: gid}
					v.prox[pk] = a
				}
				s.proxies = append(s.proxies, a)
			}
		}
	}
	if op.ChannelType == plan.ChannelSwitch && (isSignalOp(op.Name) || isWaitOp(op.Name)) {
		// A switch barrier (chorus's reading): rank r's signal counts on
		// (r -> q) for every group rank q, its wait waits on (q -> r) for
		// every q, so the k-th wait needs every group rank's k-th signal
		// and acquires them all (k: the switch instance).
		if v.swInst == nil {
			v.swInst = p.SwitchInstances()
		}
		groups := p.GPUs[r].SwitchGroups()
		for _, ci := range op.ChannelIDs {
			gid, err := p.TBChannel(r, t, plan.ChannelSwitch, ci)
			if err != nil || gid < 0 || gid >= len(groups) {
				return nil, newErr(Invalid, s, "switch channel index %d does not resolve", ci)
			}
			for _, q := range groups[gid].Ranks {
				if isSignalOp(op.Name) {
					s.keys = append(s.keys, sigKey{src: r, dst: q, t: plan.ChannelSwitch, k: v.swInst[r][gid]})
				} else {
					s.keys = append(s.keys, sigKey{src: q, dst: r, t: plan.ChannelSwitch, k: v.swInst[r][gid]})
				}
			}
		}
	}
	if op.ChannelType == plan.ChannelPort && op.Name != plan.OpWait && len(s.proxies) == 0 {
		return nil, newErr(Unsupported, s, "port-channel %s without channel_ids", op.Name)
	}
	return s, nil
}

// setupMemory lays out the cells of every rank, resolves in-place aliasing
// and fills the input cells with their contributions.
func (v *verifier) setupMemory() *Error {
	p := v.p
	n := p.NumRanks()
	U := v.U
	v.mem = make([][3][]cell, n)
	v.alias = make([]aliasMap, n)
	v.ctb = contrib{base: make([]int32, n), units: U}
	var next int64
	for r := range p.GPUs {
		g := &p.GPUs[r]
		v.ctb.base[r] = int32(next)
		next += int64(g.InputChunks * U)
		if next > 1<<30 {
			return newErr(Unsupported, nil, "plan too large to verify")
		}
		am := aliasMap{to: [3]plan.BufferType{plan.Input, plan.Output, plan.Scratch}}
		if p.InPlace {
			ic, oc := g.InputChunks, g.OutputChunks
			switch p.Collective {
			case plan.AllGather:
				if oc != n*ic {
					return v.shapeErr(r, "in-place allgather needs output chunks = %d ranks x %d input chunks, rank %d has %d", n, ic, r, oc)
				}
				am.to[plan.Input-1], am.shift[plan.Input-1] = plan.Output, r*ic
			case plan.ReduceScatter:
				if ic != n*oc {
					return v.shapeErr(r, "in-place reducescatter needs input chunks = %d ranks x %d output chunks, rank %d has %d", n, oc, r, ic)
				}
				am.to[plan.Output-1], am.shift[plan.Output-1] = plan.Input, r*oc
			default:
				if ic != oc {
					return v.shapeErr(r, "in-place %s with %d input and %d output chunks: the verifier does not know how they alias", p.Collective, ic, oc)
				}
				am.to[plan.Output-1] = plan.Input
			}
		}
		v.alias[r] = am
		for b := plan.Input; b <= plan.Scratch; b++ {
			if am.to[b-1] == b {
				v.mem[r][b-1] = make([]cell, g.Chunks(b)*U)
				v.rep.Cells += g.Chunks(b) * U
			}
		}
		for c := 0; c < g.InputChunks; c++ {
			for u := 0; u < U; u++ {
				cl := v.cell(r, plan.Input, c*U+u)
				cl.val = &value{elems: []int32{v.ctb.id(r, c, u)}}
			}
		}
	}
	return nil
}

func (v *verifier) shapeErr(r int, format string, args ...any) *Error {
	return &Error{Kind: WrongResult, Rank: r, TB: -1, Op: -1, Body: -1, Iter: -1, Msg: fmt.Sprintf(format, args...)}
}

// cell returns the physical cell of logical cell i of rank r's buffer b.
func (v *verifier) cell(r int, b plan.BufferType, i int) *cell {
	am := v.alias[r]
	pb := am.to[b-1]
	return &v.mem[r][pb-1][i+am.shift[b-1]*v.U]
}

// span returns the logical cell range [off, off+n) an access of step s
// covers: its chunks, cut to the pipeline iteration, then to the
// thread-block-group part (plan.Layout.Part's rule, on cells).
func (v *verifier) span(s *step, a plan.Access) (off, n int) {
	l := plan.Layout{Alignment: 1}
	o, m := int64(a.Index*v.U), int64(a.Size*v.U)
	if s.iters > 1 {
		o, m = l.Part(o, m, s.iter, s.iters)
	}
	o, m = l.Part(o, m, a.Part, a.Parts)
	return int(o), int(m)
}

func (v *verifier) chunkName(a plan.Access, i int) string {
	s := fmt.Sprintf("rank %d %s[%d]", a.Rank, a.Buffer.Short(), i/v.U)
	if v.U > 1 {
		s += fmt.Sprintf(" (part %d/%d)", i%v.U, v.U)
	}
	return s
}

// run executes enabled steps until none is: every agent runs as far as it
// can, round after round (any schedule gives the same result).
func (v *verifier) run() {
	v.rep.States = 1
	for progress := true; progress; {
		progress = false
		for _, a := range v.agents[:v.nthr] {
			for !a.done() && v.enabled(a, a.steps[a.pc]) {
				v.exec(a, a.steps[a.pc])
				a.pc++
				v.rep.Steps++
				v.rep.States++
				progress = true
			}
		}
	}
}

func (a *agent) fence() {
	if a.pC != nil {
		a.C.join(a.pC)
		a.W.join(a.pW)
		a.pC, a.pW = nil, nil
	}
	a.C[a.id], a.W[a.id] = a.seg, a.seg
	a.seg++
}

func (a *agent) acquire(C, W clock) {
	if a.pC == nil {
		a.pC, a.pW = make(clock, len(a.C)), make(clock, len(a.C))
	}
	if C != nil {
		a.pC.join(C)
	}
	a.pW.join(W)
}

// issue starts a proxy operation requested by thread block t.
func (px *agent) issue(t *agent) {
	px.seg++
	px.C.join(t.C)
	px.W.join(t.W)
	px.C[px.id], px.W[px.id] = px.seg, px.seg
}

func (v *verifier) enabled(a *agent, s *step) bool {
	op := s.op
	switch op.Name {
	case plan.OpWait, plan.OpRelaxedWait:
		need := map[sigKey]int{}
		for _, k := range s.keys {
			need[k]++
			st := v.keys[k]
			if st.waits+need[k] > len(st.sigs) {
				return false
			}
		}
		return true
	case plan.OpBarrier:
		bs := v.bars[[2]int{a.rank, op.BarrierID}]
		g := a.barN[op.BarrierID]
		for len(bs.gens) <= g {
			bs.gens = append(bs.gens, &barGen{C: make(clock, len(v.agents)), W: make(clock, len(v.agents))})
		}
		gen := bs.gens[g]
		if !a.arrived {
			a.arrived = true
			a.fence()
			gen.arrived++
			gen.C.join(a.C)
			gen.W.join(a.W)
		}
		return gen.arrived >= bs.n
	case plan.OpSemAcquire:
		need := map[int]int{}
		for _, id := range op.SemaphoreIDs {
			need[id]++
			if v.sems[a.rank][id].value < need[id] {
				return false
			}
		}
		return true
	}
	for _, acc := range s.acc {
		if acc.Mode == plan.AccessRead && acc.Packet {
			off, n := v.span(s, acc)
			for i := off; i < off+n; i++ {
				if !v.cell(acc.Rank, acc.Buffer, i).pkt {
					return false
				}
			}
		}
	}
	return true
}

func (v *verifier) exec(t *agent, s *step) {
	op := s.op
	switch op.Name {
	case plan.OpNop:
		t.fence()
	case plan.OpBarrier:
		bs := v.bars[[2]int{t.rank, op.BarrierID}]
		gen := bs.gens[t.barN[op.BarrierID]]
		t.barN[op.BarrierID]++
		t.arrived = false
		t.C.join(gen.C)
		t.W.join(gen.W)
		t.fence()
		v.rep.SyncEdges++
	case plan.OpSignal, plan.OpRelaxedSignal:
		v.signal(t, s)
	case plan.OpWait, plan.OpRelaxedWait:
		for _, k := range s.keys {
			st := v.keys[k]
			rec := st.sigs[st.waits]
			st.waits++
			if op.Name == plan.OpWait {
				t.acquire(rec.strongC, rec.W)
			} else {
				t.acquire(nil, rec.W)
			}
			v.rep.SyncEdges++
		}
	case plan.OpFlush:
		for _, px := range s.proxies {
			t.acquire(px.C, px.W)
			v.rep.SyncEdges++
		}
	case plan.OpSemRelease:
		for _, id := range op.SemaphoreIDs {
			st := v.sems[t.rank][id]
			st.value++
			st.rel = append(st.rel, sigRec{C: t.C.clone(), W: t.W.clone(), at: s})
			st.lastRel = s
		}
	case plan.OpSemAcquire:
		for _, id := range op.SemaphoreIDs {
			st := v.sems[t.rank][id]
			st.value--
			st.acquires++
			if i := st.acquires - st.init; i >= 1 && i <= len(st.rel) {
				t.acquire(st.rel[i-1].C, st.rel[i-1].W)
				v.rep.SyncEdges++
			}
		}
	default:
		v.data(t, s)
		if op.Name == plan.OpPutWithSignal || op.Name == plan.OpPutWithSignalAndFlush {
			v.signal(t, s)
		}
		if op.Name == plan.OpPutWithSignalAndFlush {
			for _, px := range s.proxies {
				t.acquire(px.C, px.W)
				v.rep.SyncEdges++
			}
		}
	}
}

// signal records one signal per channel of s. A memory-channel signal
// releases what the thread block knows at its last fence; a port-channel
// signal goes through the channel's proxy, after the puts queued before it.
func (v *verifier) signal(t *agent, s *step) {
	strong := s.op.Name != plan.OpRelaxedSignal
	for i, k := range s.keys {
		st := v.keys[k]
		var C, W clock
		if s.op.ChannelType == plan.ChannelPort {
			px := s.proxies[i]
			if s.op.Name == plan.OpSignal {
				px.issue(t)
			}
			C, W = px.C.clone(), px.W.clone()
		} else {
			C, W = t.C.clone(), t.W.clone()
		}
		rec := sigRec{C: C, W: W, at: s}
		if strong {
			rec.strongC = C
		} else if n := len(st.sigs); n > 0 {
			rec.strongC = st.sigs[n-1].strongC
		}
		st.sigs = append(st.sigs, rec)
	}
}

type ref struct {
	a      plan.Access
	off, n int
	ag     *agent
	C, W   clock
}

// data executes a data op: race checks on every cell it reads and writes,
// then the symbolic values.
func (v *verifier) data(t *agent, s *step) {
	reads, writes := v.refs(t, s)
	vals := v.readCells(s, reads)
	outs, ok := v.values(s, reads, writes, vals)
	if !ok {
		return
	}
	v.writeCells(s, writes, outs)
}

// refs splits the op's accesses into reads and writes, each with the
// agent that performs it (the thread block, or the proxy of a port
// channel's put) and the clocks it carries: packet reads first acquire
// the clocks of the packets' writers.
func (v *verifier) refs(t *agent, s *step) (reads, writes []*ref) {
	op := s.op
	proxied := op.ChannelType == plan.ChannelPort && isPutOp(op.Name)
	issued := map[*agent]bool{}
	var opC, opW clock // the thread block's clocks for this op (packet acquisitions added)
	for _, a := range s.acc {
		r := &ref{a: a, ag: t}
		r.off, r.n = v.span(s, a)
		if a.Mode == plan.AccessRead {
			reads = append(reads, r)
		} else {
			writes = append(writes, r)
		}
	}
	if proxied {
		for i, r := range reads {
			r.ag = s.proxies[min(i, len(s.proxies)-1)]
		}
		for i, r := range writes {
			r.ag = s.proxies[min(i, len(s.proxies)-1)]
		}
		for _, px := range s.proxies {
			if !issued[px] {
				issued[px] = true
				px.issue(t)
			}
		}
	}
	// Packet reads acquire the clocks of the packets' writers: the reader
	// polls each packet's flag, so it sees the data only once written.
	for _, r := range reads {
		if !r.a.Packet {
			continue
		}
		for i := r.off; i < r.off+r.n; i++ {
			c := v.cell(r.a.Rank, r.a.Buffer, i)
			if c.wC == nil {
				continue
			}
			if r.ag == t {
				if opC == nil {
					opC, opW = t.C.clone(), t.W.clone()
				}
				opC.join(c.wC)
				opW.join(c.wW)
			} else {
				r.ag.C.join(c.wC)
				r.ag.W.join(c.wW)
			}
		}
		v.rep.SyncEdges++
	}
	for _, r := range append(reads, writes...) {
		if r.ag == t {
			r.C, r.W = t.C, t.W
			if opC != nil {
				r.C, r.W = opC, opW
			}
		} else {
			r.C, r.W = r.ag.C, r.ag.W
		}
	}
	return reads, writes
}

// readCells checks every cell the reads touch against earlier writes
// (races, undefined data, packets read as plain data), records the reads
// and returns the values read, per read.
func (v *verifier) readCells(s *step, reads []*ref) [][]*value {
	vals := make([][]*value, len(reads))
	for ri, r := range reads {
		vals[ri] = make([]*value, r.n)
		e := event{th: r.ag.id, ep: r.ag.seg, at: s}
		for i := 0; i < r.n; i++ {
			c := v.cell(r.a.Rank, r.a.Buffer, r.off+i)
			v.rep.CellAccesses++
			// A packet read of packets waits for the flag of the write it
			// sees (it acquired that writer's clock above), so only plain
			// reads need ordering by the clocks.
			if c.w.at != nil && c.w.at != s && !(r.a.Packet && c.pkt) && r.C[c.w.th] < c.w.ep && v.race == nil {
				v.race = v.raceErr(s, c.w.at, fmt.Sprintf("reads %s, which %s writes", v.chunkName(r.a, r.off+i), c.w.at))
			}
			found := false
			for j := range c.reads {
				if c.reads[j].th == e.th {
					c.reads[j] = e
					found = true
					break
				}
			}
			if !found {
				c.reads = append(c.reads, e)
			}
			if c.val == nil {
				if v.undef == nil {
					v.undef = newErr(UndefinedRead, s, "reads %s, which holds no data yet (nothing has written it)", v.chunkName(r.a, r.off+i))
				}
			} else if c.pkt != r.a.Packet && v.format == nil {
				if c.pkt {
					v.format = newErr(WrongResult, s, "reads %s as plain data, but it holds LL packets (written by %s)", v.chunkName(r.a, r.off+i), c.w.at)
				}
			}
			vals[ri][i] = c.val
		}
	}
	return vals
}

// values computes what each write stores: the reduction of the reads,
// or a copy of the read beside it (or of the one read); false when the
// shapes are not supported (reported once).
func (v *verifier) values(s *step, reads, writes []*ref, vals [][]*value) ([][]*value, bool) {
	op := s.op
	outs := make([][]*value, len(writes))
	switch {
	case isReduceOp(op.Name):
		n := -1
		for _, r := range append(reads, writes...) {
			if n == -1 {
				n = r.n
			} else if r.n != n {
				n = -2
			}
		}
		if n < 0 {
			v.unsupportedOnce(s, "reduce over ranges of different sizes")
			return nil, false
		}
		res := make([]*value, n)
		rop := op.ReduceOp.Effective()
		for i := 0; i < n; i++ {
			in := make([]*value, len(reads))
			ok := true
			for ri := range reads {
				in[ri] = vals[ri][i]
				if in[ri] == nil {
					ok = false
				}
			}
			if ok {
				res[i] = reduce(in, rop, s)
			}
		}
		for wi := range writes {
			outs[wi] = res
		}
	case len(reads) == len(writes):
		for wi := range writes {
			if writes[wi].n != reads[wi].n {
				v.unsupportedOnce(s, "copy between ranges of different sizes")
				return nil, false
			}
			outs[wi] = vals[wi]
		}
	case len(reads) == 1:
		for wi := range writes {
			if writes[wi].n != reads[0].n {
				v.unsupportedOnce(s, "copy between ranges of different sizes")
				return nil, false
			}
			outs[wi] = vals[0]
		}
	default:
		v.unsupportedOnce(s, fmt.Sprintf("%d reads for %d writes", len(reads), len(writes)))
		return nil, false
	}
	return outs, true
}

// writeCells checks every cell the writes touch against earlier reads
// and writes (races) and stores the new values.
func (v *verifier) writeCells(s *step, writes []*ref, outs [][]*value) {
	op := s.op
	for wi, r := range writes {
		e := event{th: r.ag.id, ep: r.ag.seg, at: s}
		var snapC, snapW clock
		if r.a.Packet {
			snapC, snapW = r.C.clone(), r.W.clone()
			snapC[r.ag.id], snapW[r.ag.id] = r.ag.seg, r.ag.seg
		}
		for i := 0; i < r.n; i++ {
			c := v.cell(r.a.Rank, r.a.Buffer, r.off+i)
			v.rep.CellAccesses++
			if op.Name == plan.OpGroupStorePackets && r.a.Packet && c.pkt && c.w.at != nil && sameValue(c.val, outs[wi][i]) {
				// An idempotent packet rewrite: a multicast packet store
				// also writes its own rank's range, typically the very
				// packets it read (cpkt put them there). A reader sees the
				// same data and flag from either write, so the rewrite
				// conflicts with no read and no write of that value. A
				// reader may have seen either, so it acquires only what
				// both writers knew (the meet of their clocks; order
				// independent). Later writes of other data must be ordered
				// after it too (rw). Only gstorepkt gets this: a repeated
				// ppkt or cpkt of the same packets stays a race (a
				// duplicated op is a defect of the plan).
				c.wC, c.wW = meet(c.wC, snapC), meet(c.wW, snapW)
				c.rw = append(c.rw, e)
				continue
			}
			if v.race == nil {
				if c.w.at != nil && c.w.at != s && r.C[c.w.th] < c.w.ep {
					v.race = v.raceErr(s, c.w.at, fmt.Sprintf("writes %s, which %s also writes", v.chunkName(r.a, r.off+i), c.w.at))
				}
				for _, rw := range c.rw {
					if v.race == nil && rw.at != s && r.C[rw.th] < rw.ep {
						v.race = v.raceErr(s, rw.at, fmt.Sprintf("writes %s, which %s also writes", v.chunkName(r.a, r.off+i), rw.at))
					}
				}
				for _, rd := range c.reads {
					if v.race == nil && rd.at != s && r.W[rd.th] < rd.ep {
						v.race = v.raceErr(s, rd.at, fmt.Sprintf("writes %s, which %s reads", v.chunkName(r.a, r.off+i), rd.at))
					}
				}
			}
			c.w = e
			c.rw = c.rw[:0]
			c.reads = c.reads[:0]
			c.val = outs[wi][i]
			c.pkt = r.a.Packet
			c.wC, c.wW = snapC, snapW
		}
	}
}

func (v *verifier) raceErr(s, other *step, what string) *Error {
	e := newErr(Race, s, "%s, and nothing orders the two; fix: %s", what, v.raceFix(s, other))
	l := other.loc
	e.Other = &l
	return e
}

func (v *verifier) unsupportedOnce(s *step, what string) {
	if v.unsup == nil {
		v.unsup = newErr(Unsupported, s, "%s", what)
	}
}

// raceFix says how to order other (the earlier access) before s.
func (v *verifier) raceFix(s, other *step) string {
	a, b := other.loc, s.loc
	portPut := other.op.ChannelType == plan.ChannelPort && isPutOp(other.op.Name)
	switch {
	case a.Rank == b.Rank && a.TB == b.TB:
		return fmt.Sprintf("both are in one segment of rank %d tb %d (ops between two fences run concurrently on the block's threads): put a nop (__syncthreads; SyncAfter/SyncBefore in the DSL) between op %d and op %d", a.Rank, a.TB, a.Op, b.Op)
	case portPut:
		return fmt.Sprintf("%s is a port-channel put, done by the proxy: it is ordered only by a signal on that port channel (or pws/pwsf) paired with a wait, or by a flush followed by a nop on the issuing block", other)
	case a.Rank == b.Rank:
		return fmt.Sprintf("they run on two thread blocks of rank %d: a barrier over tbs %d and %d (or a semaphore released by tb %d after op %d and acquired by tb %d before op %d) between them", a.Rank, a.TB, b.TB, a.TB, a.Op, b.TB, b.Op)
	}
	fix := fmt.Sprintf("rank %d tb %d must signal rank %d after op %d with a nop before the signal (SyncBefore), and rank %d tb %d wait for it before op %d with a nop after the wait (SyncAfter)", a.Rank, a.TB, b.Rank, a.Op, b.Rank, b.TB, b.Op)
	if v.relaxedBetween(a.Rank, b.Rank) {
		fix += fmt.Sprintf("; note: rank %d's rlxsignal to rank %d orders no data (a relaxed signal does not make the writes before it visible): use signal/wait there", a.Rank, b.Rank)
	}
	return fix
}

// relaxedBetween reports whether rank src relaxed-signals rank dst anywhere.
func (v *verifier) relaxedBetween(src, dst int) bool {
	for _, k := range v.korder {
		if k.src == src && k.dst == dst {
			st := v.keys[k]
			if st.firstSig != nil && st.firstSig.op.Name == plan.OpRelaxedSignal {
				return true
			}
		}
	}
	return false
}

// meet is the element-wise minimum of two clocks: what both know.
func meet(a, b clock) clock {
	if a == nil || b == nil {
		return nil
	}
	out := a.clone()
	for i, x := range b {
		if x < out[i] {
			out[i] = x
		}
	}
	return out
}

package gpuexec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/ipc"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/tensor"
)

// Config describes one rank of a GPU executor.
type Config struct {
	Rank, Size int
	Ordinal    int // this rank's CUDA device
	Driver     *cuda.Driver
	// Exec runs fn on the thread that owns the rank's GPU, with its stream.
	Exec func(fn func(stream uintptr) error) error
	// Alloc is the rank's IPC allocator (ccl/ipc); its control
	// communicator carries the executor's checks.
	Alloc   *ipc.Allocator
	Control ccl.Comm
	Timeout time.Duration // a kernel's wait for a peer (0: 30 s)
	// Force runs a plan the verifier rejects.
	Force bool
	// FIFOSize is the port-channel proxy's FIFO length (0: 1024).
	FIFOSize int
	// Activity records each NVRTC compile of a plan kernel on the
	// worker's flight recorder (registry.BeginActivity; nil: not
	// recorded).
	Activity func(name string) (end func())
}

// args mirrors struct Args of runtime.cuh.
type args struct {
	buf                              [MaxRanks][3]uint64
	inbound, barStart, barEnd        [MaxRanks]uint64
	chunk, align, scratchHalf        uint64
	tickets, ctl, tbbar, sems        uint64
	abort, err                       uint64
	timeout                          int64
	fifo, fifoHead, fifoTail, fifoDn uint64
	fifoSize                         uint64
	group, gbar, nslots              uint64
	scratchBytes                     uint64
	epochs                           uint64
}

type loaded struct {
	mod cuda.Module
	fn  cuda.Function
	k   *Kernel
	bps int // blocks of the kernel per multiprocessor (occupancy)
	// bpsSmall: the same with smallThreads threads a block (CallShape)
	bpsSmall int
}

// Executor runs one plan on this rank's GPU. Every rank of the
// communicator makes one (New is collective) and makes the same calls.
type Executor struct {
	cfg  Config
	p    *plan.Plan
	hash [32]byte
	bufs Buffers
	ctl  Control

	ctlBuf *ipc.Buffer
	data   [3]*ipc.Buffer

	comp    *nvrtc.Compiler
	arch    string
	tout    int64
	kernels map[[2]int]*loaded

	// host: mapped page-locked memory: [0] the constant 1 Abort copies
	// into the device's abort word, [4..24) the error record (code, rank,
	// tb, op, body) the kernels store to, the FIFO from byte 64. The
	// kernels' waits never load host memory (see ccl/ipc, "Stalls"): the
	// abort word is word 3 of the control words in device memory.
	host    unsafe.Pointer
	hostDev cuda.DevicePtr
	// Abort's copy runs on a stream of its own in the primary context,
	// without the device's lock.
	abortCtx    cuda.Context
	abortDev    cuda.Device
	abortStream cuda.Stream
	abortTo     cuda.DevicePtr
	abortOnce   sync.Once
	fifo        *FIFO
	proxy       *Proxy
	engine      *cudaEngine

	// share is this rank's GPU, sharing the ranks' placement (its
	// Blocks: the multiprocessors each rank may fill when ranks share a
	// GPU under MPS, else 0); sms those this rank's context may use.
	share   ipc.GPUShare
	sharing ipc.Sharing
	sms     int
	group   int // the latest call's blocks per plan thread block
	threads int // the latest call's threads per CUDA block (CallShape)
	// direct: the latest call's input and output go to the peers where
	// the caller's tensors lie (IPC memory, DirectProposal), at
	// directBuf[b].Data[q] + directOff[b] on rank q; no staging copy.
	direct    [2]bool
	directBuf [2]*ipc.Buffer
	directOff [2]int64

	a      *args
	params []unsafe.Pointer
	desc   *tensor.Tensor
	all    *tensor.Tensor
	failed atomic.Bool
	closed atomic.Bool
}

const hostHeader = 64

// New checks p (CheckPlan: refused before anything is allocated), maps
// the host words, exchanges every rank's status, allocates the control
// memory (IPC, collective) and starts the port-channel proxy when this
// rank uses port channels. Kernels are compiled at the first call of each
// dtype and reduce op.
func New(ctx context.Context, cfg Config, p *plan.Plan) (*Executor, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.FIFOSize <= 0 {
		cfg.FIFOSize = 1024
	}
	if cfg.Alloc == nil || cfg.Driver == nil || cfg.Exec == nil || cfg.Control == nil {
		return nil, fmt.Errorf("%w: gpuexec: the executor needs a driver, a device executor, an IPC allocator and a control communicator", ccl.ErrBadArgs)
	}
	me := cfg.Rank
	if err := CheckPlan(p, cfg.Size, cfg.Force); err != nil {
		return nil, fmt.Errorf("gpuexec: rank %d: %w", me, err)
	}
	x := &Executor{cfg: cfg, p: p, ctl: ControlLayout(p), kernels: map[[2]int]*loaded{}, a: new(args)}
	x.params = []unsafe.Pointer{unsafe.Pointer(x.a)}
	var err error
	if x.hash, err = Hash(p); err != nil {
		return nil, err
	}
	if x.bufs, err = PlanBuffers(p); err != nil {
		return nil, err
	}
	if x.bufs.InputWritten {
		x.bufs.IPC[0] = true // never write the caller's input
	}
	x.desc = tensor.MustNew(tensor.Uint8, tensor.Shape{descBytes})
	x.all = tensor.MustNew(tensor.Uint8, tensor.Shape{int64(descBytes * cfg.Size)})
	lerr := x.setupLocal()
	// Every rank learns whether every rank could set up, and that all
	// loaded the same plan, before any allocates.
	d := desc{plan: x.hash, share: x.share}
	// Blocks per SM of 1: Sharing.Blocks is then the multiprocessors
	// each rank sharing a GPU under MPS may fill; a kernel's own
	// occupancy multiplies it per call.
	d.share.BlocksPerSM = 1
	if lerr != nil {
		d.bad = 1
	}
	if xerr := x.exchange(ctx, d); xerr != nil {
		x.freeLocal()
		return nil, fmt.Errorf("gpuexec: rank %d: set-up exchange: %w", me, xerr)
	}
	if lerr != nil {
		x.freeLocal()
		return nil, fmt.Errorf("gpuexec: rank %d: %w", me, lerr)
	}
	shares := make([]ipc.GPUShare, cfg.Size)
	for q := range cfg.Size {
		o := x.peerDesc(q)
		shares[q] = o.share
		if o.bad != 0 {
			x.freeLocal()
			return nil, fmt.Errorf("%w: gpuexec: rank %d: rank %d could not set up the GPU executor", ccl.ErrFailed, me, q)
		}
		if o.plan != x.hash {
			x.freeLocal()
			return nil, fmt.Errorf("%w: gpuexec: rank %d: rank %d loaded another plan than %q", ccl.ErrMismatch, me, q, p.Name)
		}
	}
	if x.sharing, err = ipc.PlaceRanks(shares); err != nil {
		x.freeLocal()
		return nil, fmt.Errorf("gpuexec: rank %d: %w", me, err)
	}
	if x.ctlBuf, err = cfg.Alloc.Alloc(ctx, x.ctl.Total); err != nil {
		x.freeLocal()
		return nil, fmt.Errorf("gpuexec: rank %d: control memory: %w", me, err)
	}
	// Fixed for the executor's life: Abort reads it from any goroutine.
	x.abortTo = cuda.DevicePtr(x.ctlBuf.Data[me] + uint64(x.ctl.Ctl) + abortWordOffset)
	if n := len(p.GPUs[me].Semaphores); n > 0 {
		init := make([]byte, 4*n)
		for i, s := range p.GPUs[me].Semaphores {
			binary.LittleEndian.PutUint32(init[4*i:], uint32(int32(s.InitValue)))
		}
		err = cfg.Exec(func(uintptr) error {
			return cfg.Driver.MemcpyHtoD(cuda.DevicePtr(x.ctlBuf.Data[me]+uint64(x.ctl.Sems)), init)
		})
		if err != nil {
			x.Close()
			return nil, fmt.Errorf("gpuexec: rank %d: semaphores: %w", me, err)
		}
	}
	if usesPort(p, me) {
		x.fifo = NewFIFO(unsafe.Add(x.host, hostHeader), cfg.FIFOSize)
		x.engine = &cudaEngine{d: cfg.Driver, ordinal: cfg.Ordinal}
		x.proxy = StartProxy(x.fifo, x.engine, x.engine.setup)
	}
	return x, nil
}

func usesPort(p *plan.Plan, r int) bool {
	port := false
	for ti := range p.GPUs[r].ThreadBlocks {
		for oi := range p.GPUs[r].ThreadBlocks[ti].Ops {
			o := &p.GPUs[r].ThreadBlocks[ti].Ops[oi]
			port = port || o.ChannelType == plan.ChannelPort
			for bi := range o.Ops {
				port = port || o.Ops[bi].ChannelType == plan.ChannelPort
			}
		}
	}
	return port
}

func (x *Executor) setupLocal() error {
	c, d := x.cfg, x.cfg.Driver
	comp, err := nvrtc.Load()
	if err != nil {
		return err
	}
	x.comp = comp
	return c.Exec(func(uintptr) error {
		dev, err := d.DeviceGet(c.Ordinal)
		if err != nil {
			return err
		}
		major, err := d.DeviceAttribute(dev, cuda.AttrComputeCapabilityMajor)
		if err != nil {
			return err
		}
		minor, err := d.DeviceAttribute(dev, cuda.AttrComputeCapabilityMinor)
		if err != nil {
			return err
		}
		if major < 7 {
			return fmt.Errorf("%w: the GPU executor needs compute capability 7.0 or newer, cuda:%d has %d.%d", ccl.ErrBadArgs, c.Ordinal, major, minor)
		}
		x.arch = fmt.Sprintf("sm_%d%d", major, minor)
		if x.share, err = ipc.DescribeGPU(d, dev, nil); err != nil {
			return err
		}
		x.sms = x.share.SMs
		if x.share.ActiveSMs > 0 {
			x.sms = x.share.ActiveSMs
		}
		khz, err := d.DeviceAttribute(dev, cuda.AttrClockRate)
		if err != nil {
			return err
		}
		x.tout = int64(khz) * int64(c.Timeout/time.Millisecond)
		size := int64(hostHeader + FIFOBytes(c.FIFOSize))
		if x.host, err = d.MemHostAlloc(size, cuda.MemHostAllocPortable|cuda.MemHostAllocDeviceMap); err != nil {
			return err
		}
		clear(unsafe.Slice((*byte)(x.host), size))
		atomic.StoreUint32((*uint32)(x.host), 1)
		if x.hostDev, err = d.MemHostGetDevicePointer(x.host); err != nil {
			return err
		}
		if x.abortCtx, err = d.PrimaryCtxRetain(dev); err != nil {
			return err
		}
		x.abortDev = dev
		x.abortStream, err = d.StreamCreate(cuda.StreamNonBlocking)
		return err
	})
}

func (x *Executor) freeLocal() {
	x.cfg.Exec(func(uintptr) error {
		x.freeAbort()
		if x.host != nil {
			x.cfg.Driver.MemFreeHost(x.host)
			x.host = nil
		}
		return nil
	})
}

// freeAbort waits for an Abort in flight and frees its stream and context
// reference (on the device's thread).
func (x *Executor) freeAbort() error {
	x.abortOnce.Do(func() {})
	d := x.cfg.Driver
	var errs []error
	if x.abortStream != 0 {
		errs = append(errs, d.StreamSynchronize(x.abortStream), d.StreamDestroy(x.abortStream))
		x.abortStream = 0
	}
	if x.abortCtx != 0 {
		errs = append(errs, d.PrimaryCtxRelease(x.abortDev))
		x.abortCtx = 0
	}
	return errors.Join(errs...)
}

// descriptor exchanged before every call (and at New, with the GPU).
const descBytes = 128

type desc struct {
	bad       byte
	dtype, op byte
	group     uint16 // the blocks per plan thread block this rank proposes (the least wins)
	inB, outB int64
	plan      [32]byte
	share     ipc.GPUShare // at New
	// route: this rank's DirectProposal (bit 0 input, bit 1 output) and
	// where its tensors lie (IPC allocation, offset).
	direct        byte
	inSeq, outSeq uint64
	inOff, outOff int64
}

func (d desc) encode(b []byte) {
	clear(b[:descBytes])
	b[0], b[1], b[2], b[3] = d.bad, d.dtype, d.op, d.direct
	binary.LittleEndian.PutUint16(b[4:], d.group)
	binary.LittleEndian.PutUint64(b[8:], uint64(d.inB))
	binary.LittleEndian.PutUint64(b[16:], uint64(d.outB))
	copy(b[24:56], d.plan[:])
	d.share.Encode(b[56 : 56+ipc.GPUShareBytes])
	binary.LittleEndian.PutUint64(b[96:], d.inSeq)
	binary.LittleEndian.PutUint64(b[104:], uint64(d.inOff))
	binary.LittleEndian.PutUint64(b[112:], d.outSeq)
	binary.LittleEndian.PutUint64(b[120:], uint64(d.outOff))
}

func decodeDesc(b []byte) desc {
	d := desc{bad: b[0], dtype: b[1], op: b[2], direct: b[3], group: binary.LittleEndian.Uint16(b[4:]),
		inB: int64(binary.LittleEndian.Uint64(b[8:])), outB: int64(binary.LittleEndian.Uint64(b[16:]))}
	copy(d.plan[:], b[24:56])
	d.share = ipc.DecodeGPUShare(b[56 : 56+ipc.GPUShareBytes])
	d.inSeq, d.inOff = binary.LittleEndian.Uint64(b[96:]), int64(binary.LittleEndian.Uint64(b[104:]))
	d.outSeq, d.outOff = binary.LittleEndian.Uint64(b[112:]), int64(binary.LittleEndian.Uint64(b[120:]))
	return d
}

// agreeDirect is, per buffer, whether every rank proposed the direct
// route with the same allocation and offset as mine.
func agreeDirect(mine desc, all []desc) [2]bool {
	var d [2]bool
	for b := range 2 {
		d[b] = mine.direct&(1<<b) != 0
		for _, o := range all {
			if o.direct&(1<<b) == 0 {
				d[b] = false
			}
			if b == 0 && (o.inSeq != mine.inSeq || o.inOff != mine.inOff) {
				d[b] = false
			}
			if b == 1 && (o.outSeq != mine.outSeq || o.outOff != mine.outOff) {
				d[b] = false
			}
		}
	}
	return d
}

func (x *Executor) exchange(ctx context.Context, d desc) error {
	d.encode(x.desc.Bytes())
	return x.cfg.Control.AllGather(ctx, x.desc, x.all)
}

func (x *Executor) peerDesc(q int) desc { return decodeDesc(x.all.Bytes()[q*descBytes:]) }

// Plan is the executor's plan.
func (x *Executor) Plan() *plan.Plan { return x.p }

// Rank and Size are this rank and the rank count.
func (x *Executor) Rank() int { return x.cfg.Rank }
func (x *Executor) Size() int { return x.cfg.Size }

func (x *Executor) devPtr(name string, t *tensor.Tensor) (uint64, error) {
	if t == nil {
		return 0, fmt.Errorf("%w: %s is nil", ccl.ErrBadArgs, name)
	}
	if t.Device() != tensor.CUDADevice(x.cfg.Ordinal) || t.Storage().Buffer() == nil {
		return 0, fmt.Errorf("%w: %s is on %v, this rank's GPU is cuda:%d", ccl.ErrBadArgs, name, t.Device(), x.cfg.Ordinal)
	}
	return uint64(t.Storage().Buffer().Ptr()) + uint64(t.Offset()), nil
}

// kernel compiles (NVRTC, cached on disk) and loads the kernel for dt and
// op, once.
func (x *Executor) kernel(dt tensor.DType, op reduce.Op) (*loaded, error) {
	dc, err := DTypeCode(dt)
	if err != nil {
		return nil, err
	}
	oc, err := OpCode(op)
	if err != nil {
		return nil, err
	}
	if l := x.kernels[[2]int{dc, oc}]; l != nil {
		return l, nil
	}
	// Every rank on this GPU (ranks sharing it under MPS): GPU-scope
	// signals (Target.OneGPU).
	k, err := GenerateFor(x.p, x.cfg.Rank, dt, op, Target{OneGPU: x.sharing.OneGPU(x.cfg.Rank)})
	if err != nil {
		return nil, err
	}
	file := fmt.Sprintf("chorus_plan_%s_r%d.cu", x.p.Name, x.cfg.Rank)
	end := func() {}
	if x.cfg.Activity != nil {
		end = x.cfg.Activity("NVRTC compile " + file)
	}
	cubin, _, err := x.comp.CompileCached(file, k.Source, x.arch)
	end()
	if err != nil {
		return nil, err
	}
	l := &loaded{k: k}
	err = x.cfg.Exec(func(uintptr) error {
		var err error
		if l.mod, err = x.cfg.Driver.ModuleLoadData(cubin); err != nil {
			return err
		}
		if l.fn, err = x.cfg.Driver.ModuleGetFunction(l.mod, KernelName); err != nil {
			return err
		}
		if l.bps, err = x.cfg.Driver.OccupancyMaxActiveBlocksPerMultiprocessor(l.fn, k.Threads, 0); err != nil {
			return err
		}
		l.bpsSmall, err = x.cfg.Driver.OccupancyMaxActiveBlocksPerMultiprocessor(l.fn, min(smallThreads, k.Threads), 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	x.kernels[[2]int{dc, oc}] = l
	return l, nil
}

// Run runs the plan with send and recv (this rank's GPU tensors): the
// sizes and dtype must fit the plan on every rank, and every rank must
// make the same call; otherwise every rank fails before launch
// (ccl.ErrBadArgs, ccl.ErrMismatch). The call is queued on the rank's
// stream; a wait that gave up is reported by Check after the stream was
// synchronized. send and recv may be the same tensor unless the plan
// uses both in place (Buffers.AliasUnsafe: refused). Run works under CUDA graph capture once the buffers have
// grown to the call's sizes (make one call of the size before capturing).
func (x *Executor) Run(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	me := x.cfg.Rank
	if x.closed.Load() {
		return fmt.Errorf("%w: gpuexec: rank %d: plan %q: Run after Close", ccl.ErrFailed, me, x.p.Name)
	}
	var sp, rp uint64
	var err error
	spent := x.failed.Load()
	if spent {
		// Still take part in the exchange, so that the peers fail this
		// call at once instead of waiting for this rank.
		err = fmt.Errorf("%w: gpuexec: rank %d: the executor of plan %q failed or was aborted; load the plan again", ccl.ErrFailed, me, x.p.Name)
	} else {
		sp, err = x.devPtr("send", send)
	}
	if err == nil {
		rp, err = x.devPtr("recv", recv)
	}
	if err == nil && send.DType() != recv.DType() {
		err = fmt.Errorf("%w: send is %s, recv %s", ccl.ErrBadArgs, send.DType(), recv.DType())
	}
	if err == nil && Overlap(sp, send.NumBytes(), rp, recv.NumBytes()) && x.bufs.AliasUnsafe(x.p.InPlace) {
		err = fmt.Errorf("%w: send and recv overlap, and plan %q reads its input and writes its output in the caller's tensors directly: pass separate tensors", ccl.ErrBadArgs, x.p.Name)
	}
	var call *Call
	var l *loaded
	var shape Shape
	d := desc{plan: x.hash}
	if err == nil {
		d.dtype, d.op, d.inB, d.outB = byte(send.DType()), byte(op), send.NumBytes(), recv.NumBytes()
		call, err = CheckCall(x.p, send.DType(), op, send.NumBytes(), recv.NumBytes())
	}
	if err == nil {
		l, err = x.kernel(send.DType(), op)
	}
	if err == nil {
		shape, err = x.propose(l, call)
		d.group = uint16(shape.Group)
	}
	var placeBuf [2]*ipc.Buffer
	if err == nil {
		d = x.proposeDirect(d, call, sp, rp, send.NumBytes(), recv.NumBytes(), &placeBuf)
	}
	switch {
	case spent:
		d.bad = 2
	case err != nil:
		d.bad = 1
	}
	if xerr := x.exchange(ctx, d); xerr != nil {
		return fmt.Errorf("gpuexec: rank %d: call exchange: %w", me, xerr)
	}
	if spent {
		return err
	}
	if err != nil {
		return fmt.Errorf("gpuexec: rank %d: plan %q: %w", me, x.p.Name, err)
	}
	for q := range x.cfg.Size {
		o := x.peerDesc(q)
		if o.bad == 2 {
			return fmt.Errorf("%w: gpuexec: rank %d: rank %d's executor of plan %q failed earlier (it says why); load the plan again", ccl.ErrFailed, me, q, x.p.Name)
		}
		if o.bad != 0 {
			return fmt.Errorf("%w: gpuexec: rank %d: rank %d's call of plan %q is invalid (it says why)", ccl.ErrBadArgs, me, q, x.p.Name)
		}
		// The group and route proposals may differ (the least group
		// wins; a route goes direct only where every rank agrees).
		o.group, o.direct, o.inSeq, o.inOff, o.outSeq, o.outOff = d.group, d.direct, d.inSeq, d.inOff, d.outSeq, d.outOff
		if o != d {
			return fmt.Errorf("%w: gpuexec: rank %d: plan %q called with %s %s, %d -> %d bytes here, %s %s, %d -> %d bytes on rank %d",
				ccl.ErrMismatch, me, x.p.Name, tensor.DType(d.dtype), reduce.Op(d.op), d.inB, d.outB, tensor.DType(o.dtype), reduce.Op(o.op), o.inB, o.outB, q)
		}
	}
	x.group = int(d.group)
	all := make([]desc, x.cfg.Size)
	for q := range x.cfg.Size {
		all[q] = x.peerDesc(q)
		x.group = min(x.group, int(all[q].group))
	}
	// The threads this rank proposed with its group: a smaller agreed
	// group (a peer may fill fewer multiprocessors) of blocks that size
	// is resident too, where blocks of the kernel's full size might not
	// be; the ops then loop over more vectors a thread.
	x.threads = shape.Threads
	x.direct = agreeDirect(d, all)
	x.directBuf, x.directOff = placeBuf, [2]int64{d.inOff, d.outOff}
	sizes := CallSizes(x.p, x.bufs, call)
	if err := x.grow(ctx, sizes); err != nil {
		return err
	}
	x.fill(call, sizes, sp, rp)
	return x.launch(l, call, sp, rp)
}

// proposeDirect adds this rank's route proposal to d (DirectProposal with
// where send and recv lie) and keeps the IPC allocations it found.
func (x *Executor) proposeDirect(d desc, c *Call, sp, rp uint64, inB, outB int64, bufs *[2]*ipc.Buffer) desc {
	var pl [2]Place
	for b, ptr := range []uint64{sp, rp} {
		if buf, off, ok := x.cfg.Alloc.Lookup(ptr); ok {
			bufs[b] = buf
			pl[b] = Place{IPC: true, Seq: buf.Seq, Offset: off, Room: buf.Size - off}
		}
	}
	dir := DirectProposal(x.p, x.bufs, CallSizes(x.p, x.bufs, c), pl[0], pl[1], inB, outB, Overlap(sp, inB, rp, outB))
	if dir[0] {
		d.direct |= 1
		d.inSeq, d.inOff = pl[0].Seq, pl[0].Offset
	}
	if dir[1] {
		d.direct |= 2
		d.outSeq, d.outOff = pl[1].Seq, pl[1].Offset
	}
	return d
}

// propose is the shape this rank proposes for call (every rank takes
// the least group): CallShape with this rank's kernel, occupancy and
// multiprocessors.
func (x *Executor) propose(l *loaded, c *Call) (Shape, error) {
	return CallShape(GroupInput{
		Plan: x.p.Name, Rank: x.cfg.Rank, Blocks: l.k.Blocks, Threads: l.k.Threads, Grouped: l.k.Res.Grouped,
		LL:          x.p.Protocol == plan.LL,
		OpBytes:     opBytes(l, c, x.cfg.Rank),
		BlocksPerSM: l.bps, SmallBlocksPerSM: l.bpsSmall, SMs: x.sms, SharedSMs: x.sharing.Blocks, PerGPU: x.sharing.PerGPU[x.cfg.Rank],
	})
}

// opBytes is the bytes one op of rank r's kernel moves at most in call c
// (chunk bytes x its largest access).
func opBytes(l *loaded, c *Call, r int) int64 {
	return c.Layouts[r].ChunkBytes * int64(max(1, l.k.Res.MaxChunks))
}

// minLaunchThreads: every kernel phase that gives one thread to each
// peer, semaphore or rank (signals, the start barrier) has at most 8;
// two warps keep a margin.
const minLaunchThreads = 64

// GroupInput is what CallShape decides from.
type GroupInput struct {
	Plan            string
	Rank            int
	Blocks, Threads int   // the rank's plan thread blocks, the kernel's threads per block (the most)
	Grouped         bool  // Kernel.Res.Grouped
	LL              bool  // an LL plan: a thread moves 8 data bytes (a packet) at a time, else 16
	OpBytes         int64 // the bytes one op moves at most (chunk bytes x its largest access)
	// BlocksPerSM, SmallBlocksPerSM: the kernel's occupancy with Threads
	// and with smallThreads threads a block; SMs the multiprocessors the
	// rank's context may use.
	BlocksPerSM, SmallBlocksPerSM, SMs int
	// SharedSMs: where ranks share a GPU under MPS, the multiprocessors
	// each may fill (ipc.Sharing.Blocks with one block per SM), else 0;
	// PerGPU the ranks on this rank's GPU.
	SharedSMs, PerGPU int
}

// Shape is a call's launch: CUDA blocks per plan thread block (the
// group) and threads per CUDA block.
type Shape struct{ Group, Threads int }

// CallShape is the launch of a call. The whole grid must be resident at
// once (occupancy x the multiprocessors the rank may fill: all of its
// context's, or its share where ranks share a GPU under MPS); a plan
// whose thread blocks alone do not fit is refused (ipc.ErrNotCoResident):
// its blocks would wait for each other (intra-rank barriers) or for peer
// blocks that never run. Within that, each thread gets about one 16-byte
// vector (an 8-byte packet's data in LL plans) of the largest op, as
// ccl/ipc sizes its grids:
//   - an op that needs at most smallThreads threads runs on one block of
//     that many threads (whole warps, at least minLaunchThreads);
//   - a larger one on blocks of smallThreads threads, one per
//     smallThreads vectors, while they are resident and at most MaxGroup;
//   - else on blocks of the kernel's threads (fewer, so fewer lanes to
//     signal and wait), as many as fit;
//   - but where ranks share a GPU under MPS, on blocks of smallThreads,
//     at most one a multiprocessor of the rank's share (plans of plain
//     data; packet plans as above).
//
// Plans that cannot group (Grouped false) run one block per thread
// block. The kernels step through their data by blockDim, so any count
// works, and each rank launches the threads it proposed with the agreed
// group (a smaller group of them is resident too). One H200, 4 ranks
// under MPS, bfloat16, graph-replayed, IPC tensors
// (docs/gpu-executor.md, "Launch shape"): the one-shot plan took
// 8.4 us at 1 KB with one 1024-thread block a thread block and 4.9 with
// 64 threads; 9.0 at 64 KB against 6.9 with two blocks of 512; at 4 MB
// 23.5 with 1024-thread blocks against 26.8 with 512.
func CallShape(in GroupInput) (Shape, error) {
	sms := in.SMs
	if in.SharedSMs > 0 {
		sms = min(sms, in.SharedSMs)
	}
	limit := in.BlocksPerSM * sms
	if in.Blocks > limit {
		why := fmt.Sprintf("%d blocks of %d threads fit per multiprocessor and the rank may fill %d", in.BlocksPerSM, in.Threads, sms)
		if in.SharedSMs > 0 {
			why += fmt.Sprintf(" (%d ranks share its GPU under MPS)", in.PerGPU)
		}
		return Shape{}, fmt.Errorf("%w: plan %q has %d thread blocks on rank %d, but only %d can be resident at once: %s; run fewer ranks per GPU or a plan with fewer thread blocks",
			ipc.ErrNotCoResident, in.Plan, in.Blocks, in.Rank, limit, why)
	}
	per := int64(16)
	if in.LL {
		per = 8
	}
	need := (max(in.OpBytes, 0) + per - 1) / per // threads: one vector each
	small := min(smallThreads, in.Threads)
	if !in.Grouped || need <= int64(small) {
		t := int(min((need+31)/32*32, int64(in.Threads)))
		return Shape{Group: 1, Threads: min(max(t, minLaunchThreads), in.Threads)}, nil
	}
	blocks := int64(max(1, in.Blocks))
	gSmall := (need + int64(small) - 1) / int64(small) // blocks of smallThreads, one vector a thread
	if in.SharedSMs > 0 && !in.LL {
		// Ranks sharing a GPU under MPS: a block of smallThreads a
		// multiprocessor of the rank's share, as ccl/ipc's grids there
		// (one block a multiprocessor). One H200, 4
		// ranks, IPC tensors, graph-replayed, against up to two small
		// blocks or one of the kernel's threads a multiprocessor (same
		// call, 2026-11-29): the one-shot plan 0.85x at 512 KB, 0.91-0.92x
		// at 32 and 256 MB, 1 KB-4 MB otherwise 0.97-1.00x; the put
		// two-shot 0.96-0.97x to 512 KB, 1.05x at 4 MB; the pull two-shot
		// 0.97-1.02x. The packet plan took 1.21-1.34x from 4 MB (a
		// thread waits on each of its packets: it wants more threads), so
		// LL plans keep the rule below.
		g := min(gSmall, MaxGroup, max(1, int64(sms)/blocks))
		return Shape{Group: int(g), Threads: small}, nil
	}
	if gSmall <= MaxGroup && gSmall*blocks <= int64(in.SmallBlocksPerSM*sms) {
		return Shape{Group: int(gSmall), Threads: small}, nil
	}
	g := min((need+int64(in.Threads)-1)/int64(in.Threads), MaxGroup, int64(limit)/blocks)
	return Shape{Group: int(max(1, g)), Threads: in.Threads}, nil
}

// smallThreads: the threads per block of calls whose ops fit blocks of
// this size (CallShape).
const smallThreads = 512

// grow makes the IPC data buffers large enough (collective: every rank
// checked the same sizes). Refused under graph capture.
func (x *Executor) grow(ctx context.Context, s Sizes) error {
	for b := range 3 {
		need := s.Bytes[b]
		if need == 0 || (x.data[b] != nil && x.data[b].Size >= need) || (b < 2 && x.direct[b]) {
			continue
		}
		var st int
		err := x.cfg.Exec(func(str uintptr) (err error) {
			st, err = x.cfg.Driver.StreamIsCapturing(cuda.Stream(str))
			return err
		})
		if err == nil && st != cuda.CaptureNone {
			err = fmt.Errorf("%w (the call needs larger buffers: make one call of this size before capturing)", device.ErrCapturing)
		}
		if err != nil {
			return fmt.Errorf("gpuexec: rank %d: %w", x.cfg.Rank, err)
		}
		size := int64(4096)
		for size < need {
			size *= 2
		}
		if x.data[b] != nil {
			x.cfg.Alloc.Free(x.data[b])
			x.data[b] = nil
		}
		buf, err := x.cfg.Alloc.Alloc(ctx, size)
		if err != nil {
			return fmt.Errorf("gpuexec: rank %d: %w", x.cfg.Rank, err)
		}
		x.data[b] = buf
	}
	return nil
}

// fill writes the kernel arguments of this call.
func (x *Executor) fill(c *Call, s Sizes, sp, rp uint64) {
	me := x.cfg.Rank
	a := x.a
	*a = args{}
	for q := range x.cfg.Size {
		if x.p.InPlace {
			io, oo := InPlaceOffsets(x.p, q, c.InBytes, c.OutBytes)
			a.buf[q][0] = x.data[0].Data[q] + uint64(io)
			a.buf[q][1] = x.data[0].Data[q] + uint64(oo)
		} else {
			for b := range 2 {
				switch {
				case x.direct[b]:
					a.buf[q][b] = x.directBuf[b].Data[q] + uint64(x.directOff[b])
				case x.bufs.IPC[b]:
					a.buf[q][b] = x.data[b].Data[q]
				}
			}
		}
		if x.data[2] != nil {
			a.buf[q][2] = x.data[2].Data[q]
			a.scratchBytes = uint64(x.data[2].Size)
		}
		a.inbound[q] = x.ctlBuf.Data[q] + uint64(x.ctl.Inbound)
		a.barStart[q] = x.ctlBuf.Data[q] + uint64(x.ctl.BarStart)
		a.barEnd[q] = x.ctlBuf.Data[q] + uint64(x.ctl.BarEnd)
	}
	if !x.p.InPlace {
		if !x.bufs.IPC[0] || x.direct[0] {
			a.buf[me][0] = sp
		}
		if !x.bufs.IPC[1] || x.direct[1] {
			a.buf[me][1] = rp
		}
	}
	lay := c.Layouts[me]
	base := x.ctlBuf.Data[me]
	a.chunk, a.align, a.scratchHalf = uint64(lay.ChunkBytes), uint64(lay.Alignment), uint64(s.ScratchHalf[me])
	a.tickets, a.ctl, a.tbbar, a.sems = base+uint64(x.ctl.Tickets), base+uint64(x.ctl.Ctl), base+uint64(x.ctl.TBBar), base+uint64(x.ctl.Sems)
	a.abort, a.err = base+uint64(x.ctl.Ctl)+abortWordOffset, uint64(x.hostDev)+4
	a.timeout = x.tout
	a.group, a.gbar, a.nslots = uint64(x.group), base+uint64(x.ctl.GBar), uint64(x.ctl.Slots)
	a.epochs = base + uint64(x.ctl.Epochs)
	a.fifoHead = base + uint64(x.ctl.FIFOHead)
	if x.fifo != nil {
		a.fifo = uint64(x.hostDev) + hostHeader + 64
		a.fifoTail = uint64(x.hostDev) + hostHeader
		a.fifoDn = uint64(x.hostDev) + hostHeader + 8
		a.fifoSize = uint64(x.fifo.Size())
	}
}

func (x *Executor) launch(l *loaded, c *Call, sp, rp uint64) error {
	me := x.cfg.Rank
	d := x.cfg.Driver
	a := x.a
	inB, outB := c.InBytes, c.OutBytes
	return x.cfg.Exec(func(st uintptr) error {
		s := cuda.Stream(st)
		cp := func(dst, src uint64, n int64) error {
			if n == 0 || dst == src {
				return nil
			}
			return d.MemcpyDtoDAsync(cuda.DevicePtr(dst), cuda.DevicePtr(src), n, s)
		}
		stagedOut := x.p.InPlace || (x.bufs.IPC[1] && !x.direct[1])
		if x.p.InPlace || (x.bufs.IPC[0] && !x.direct[0]) {
			if err := cp(a.buf[me][0], sp, inB); err != nil {
				return err
			}
		}
		if stagedOut && !x.bufs.OutputCovered[me] && !x.p.InPlace {
			if err := cp(a.buf[me][1], rp, outB); err != nil {
				return err
			}
		}
		if err := d.LaunchKernel(l.fn, [3]uint32{uint32(l.k.Blocks * x.group), 1, 1}, [3]uint32{uint32(x.threads), 1, 1}, 0, s, x.params); err != nil {
			return err
		}
		if stagedOut {
			return cp(rp, a.buf[me][1], outB)
		}
		return nil
	})
}

// SetCallCount makes this rank's call words (every block's: runtime.cuh,
// epochs_of) say that n calls ran, so that the next call takes flag n+1
// (plans that are not SignalSynced; their flag is 32 bits and goes from
// 0xFFFFFFFF to 2). Every rank must
// set the same n between the same two calls, with no kernel of the plan
// running (after a device sync). Tests reach the flag's wrap, and the
// scrub of the call after it (runtime.cuh), without 2^32 calls.
func (x *Executor) SetCallCount(n uint32) error {
	me := x.cfg.Rank
	if CallSync(x.p) == SyncSignals {
		return fmt.Errorf("%w: gpuexec: rank %d: plan %q is SignalSynced: its call number is 64 bits", ccl.ErrBadArgs, me, x.p.Name)
	}
	w := make([]byte, 8*x.ctl.NTBs*MaxGroup)
	for i := 0; i < len(w); i += 8 {
		binary.LittleEndian.PutUint64(w[i:], uint64(n))
	}
	err := x.cfg.Exec(func(uintptr) error {
		return x.cfg.Driver.MemcpyHtoD(cuda.DevicePtr(x.ctlBuf.Data[me]+uint64(x.ctl.Epochs)), w)
	})
	if err != nil {
		return fmt.Errorf("gpuexec: rank %d: call count: %w", me, err)
	}
	return nil
}

// WaitError is a wait of the kernel that gave up: the rank, thread block
// and op (Op -1: the call's start barrier, -2: its end barrier, -3: the
// scrub after the flag's wrap; Body > 0:
// op Body-1 of a pipeline). errors.Is(err, ccl.ErrTimeout) for a timeout,
// ccl.ErrFailed for an abort.
type WaitError struct {
	Plan         string
	Rank, TB, Op int
	Body         int
	Aborted      bool
	Timeout      time.Duration
}

func (e *WaitError) Error() string {
	where := fmt.Sprintf("tb %d op %d", e.TB, e.Op)
	switch {
	case e.Op == -1:
		where = fmt.Sprintf("tb %d at the start barrier", e.TB)
	case e.Op == -2:
		where = fmt.Sprintf("tb %d at the end barrier", e.TB)
	case e.Op == -3:
		where = fmt.Sprintf("block %d at the scrub after the flag's wrap", e.TB)
	case e.Body > 0:
		where += fmt.Sprintf(" (pipeline body op %d)", e.Body-1)
	}
	if e.Aborted {
		return fmt.Sprintf("%v: gpuexec: plan %q rank %d %s: aborted while waiting (a peer was lost); the call's result is wrong", ccl.ErrFailed, e.Plan, e.Rank, where)
	}
	return fmt.Sprintf("%v: gpuexec: plan %q rank %d %s: waited more than %v and gave up; the call's result is wrong", ccl.ErrTimeout, e.Plan, e.Rank, where, e.Timeout)
}

func (e *WaitError) Is(target error) bool {
	if e.Aborted {
		return target == ccl.ErrFailed
	}
	return target == ccl.ErrTimeout || target == ccl.ErrFailed
}

// Check reports a wait that gave up since the executor started (read
// from mapped host memory; call it after the stream was synchronized),
// and a failure of the port-channel proxy. Once it reports, the executor
// refuses every later call.
func (x *Executor) Check() error {
	if x.host == nil {
		return nil
	}
	rec := unsafe.Slice((*uint32)(unsafe.Add(x.host, 4)), 5)
	code := atomic.LoadUint32(&rec[0])
	if code != 0 {
		x.failed.Store(true)
		return &WaitError{Plan: x.p.Name, Rank: int(atomic.LoadUint32(&rec[1])), TB: int(int32(atomic.LoadUint32(&rec[2]))),
			Op: int(int32(atomic.LoadUint32(&rec[3]))), Body: int(atomic.LoadUint32(&rec[4])), Aborted: code == 2, Timeout: x.cfg.Timeout}
	}
	if x.proxy != nil {
		if err := x.proxy.Err(); err != nil {
			x.failed.Store(true)
			return fmt.Errorf("%w: gpuexec: rank %d: %w", ccl.ErrFailed, x.cfg.Rank, err)
		}
	}
	return nil
}

// abortWordOffset: the abort word is control word 3 (1 end
// counter, 2 give-up code; runtime.cuh).
const abortWordOffset = 12

// Abort makes every queued or running kernel of this executor stop
// waiting (within a few hundred polls) and every later call fail: a peer
// was lost. It copies 1 into the device's abort word on a stream of its
// own (the copy engine lands it while the kernels hold the SMs) and takes
// no lock: safe from any goroutine.
func (x *Executor) Abort() {
	x.failed.Store(true)
	if x.abortTo == 0 || x.abortStream == 0 {
		return
	}
	x.abortOnce.Do(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		d := x.cfg.Driver
		if d.SetCurrent(x.abortCtx) == nil {
			// A failure leaves the kernels to their timeout; the session
			// has already reported the lost peer, the first cause.
			d.MemcpyHtoDAsync(x.abortTo, unsafe.Slice((*byte)(x.host), 4), x.abortStream)
		}
	})
}

// Close stops the proxy and frees the executor's memory and kernels.
// Every rank should close after its last call (peers may still read this
// rank's IPC memory until their calls ended).
func (x *Executor) Close() error {
	var errs []error
	if x.proxy != nil {
		if err := x.proxy.Close(); err != nil && !errors.Is(err, ErrProxy) {
			errs = append(errs, err)
		}
		x.proxy = nil
	}
	errs = append(errs, x.cfg.Exec(func(st uintptr) error {
		var errs []error
		d := x.cfg.Driver
		errs = append(errs, d.StreamSynchronize(cuda.Stream(st)))
		if x.engine != nil {
			errs = append(errs, x.engine.close())
		}
		for k, l := range x.kernels {
			errs = append(errs, d.ModuleUnload(l.mod))
			delete(x.kernels, k)
		}
		errs = append(errs, x.freeAbort())
		if x.host != nil {
			errs = append(errs, d.MemFreeHost(x.host))
			x.host = nil
		}
		return errors.Join(errs...)
	}))
	for b := range x.data {
		if x.data[b] != nil {
			x.cfg.Alloc.Free(x.data[b])
			x.data[b] = nil
		}
	}
	if x.ctlBuf != nil {
		x.cfg.Alloc.Free(x.ctlBuf)
		x.ctlBuf = nil
	}
	x.failed.Store(true)
	x.closed.Store(true)
	return errors.Join(errs...)
}

// cudaEngine is the proxy's Engine on CUDA: copies and signal stores on a
// stream of its own (the copy engine), created on the proxy's thread.
type cudaEngine struct {
	d        *cuda.Driver
	ordinal  int
	dev      cuda.Device
	retained bool
	s        cuda.Stream
	stage    unsafe.Pointer // page-locked: one u64 per queued signal
	next     int
	pending  int
}

const stageWords = 1024

func (e *cudaEngine) setup() error {
	dev, err := e.d.DeviceGet(e.ordinal)
	if err != nil {
		return err
	}
	ctx, err := e.d.PrimaryCtxRetain(dev)
	if err != nil {
		return err
	}
	e.dev, e.retained = dev, true
	if err := e.d.SetCurrent(ctx); err != nil {
		return err
	}
	if e.s, err = e.d.StreamCreate(1); err != nil { // CU_STREAM_NON_BLOCKING
		return err
	}
	e.stage, err = e.d.MemHostAlloc(8*stageWords, cuda.MemHostAllocPortable)
	return err
}

func (e *cudaEngine) Copy(dst, src, n uint64) error {
	return e.d.MemcpyDtoDAsync(cuda.DevicePtr(dst), cuda.DevicePtr(src), int64(n), e.s)
}

// Signal stores v from a staging word of its own: a word is reused only
// after a flush or a synchronization, so a queued store never reads a
// later value.
func (e *cudaEngine) Signal(dst, v uint64) error {
	if e.pending == stageWords {
		if err := e.Flush(); err != nil {
			return err
		}
	}
	w := unsafe.Slice((*byte)(unsafe.Add(e.stage, 8*e.next)), 8)
	binary.LittleEndian.PutUint64(w, v)
	e.next = (e.next + 1) % stageWords
	e.pending++
	return e.d.MemcpyHtoDAsync(cuda.DevicePtr(dst), w, e.s)
}

func (e *cudaEngine) Flush() error {
	e.pending = 0
	return e.d.StreamSynchronize(e.s)
}

func (e *cudaEngine) close() error {
	var errs []error
	if e.s != 0 {
		errs = append(errs, e.d.StreamSynchronize(e.s), e.d.StreamDestroy(e.s))
	}
	if e.stage != nil {
		errs = append(errs, e.d.MemFreeHost(e.stage))
	}
	if e.retained {
		errs = append(errs, e.d.PrimaryCtxRelease(e.dev))
	}
	return errors.Join(errs...)
}

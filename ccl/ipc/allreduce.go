package ipc

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/cudasrc"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/tensor"
)

//go:embed kernels.cu
var kernelSource string

// Strategy is how custom_allreduce runs.
type Strategy uint8

const (
	Auto    Strategy = iota // by size and rank count (see Pick)
	OneShot                 // every rank reads every input and reduces
	TwoShot                 // reduce-scatter into scratch, then all-gather
	NCCL                    // the session's NCCL communicator
)

var strategyNames = map[Strategy]string{Auto: "auto", OneShot: "oneshot", TwoShot: "twoshot", NCCL: "nccl"}

func (s Strategy) String() string {
	if n, ok := strategyNames[s]; ok {
		return n
	}
	return fmt.Sprintf("strategy(%d)", uint8(s))
}

// ParseStrategy reads "auto", "oneshot", "twoshot" or "nccl".
func ParseStrategy(s string) (Strategy, error) {
	for k, v := range strategyNames {
		if v == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown all-reduce strategy %q (want auto, oneshot, twoshot or nccl)", ccl.ErrBadArgs, s)
}

// Pick is auto's choice for an eager call of bytes per rank on n ranks,
// from the built-in table (autotable.json, AutoTable); one-shot where the
// table has no rule. AllReducer uses the table it loaded (which
// Options.AutoTable may replace) and the capture state.
func Pick(bytes int64, n int) Strategy {
	t, err := ParseAutoTable(defaultAutoTable)
	if err != nil {
		return OneShot
	}
	return pickFrom(t, bytes, n, false)
}

func pickFrom(t *AutoTable, bytes int64, n int, graph bool) Strategy {
	if s, ok := t.Pick(bytes, n, graph); ok {
		return s
	}
	return OneShot
}

// dtype codes of kernels.cu.
func kernelDType(dt tensor.DType) (string, bool) {
	switch dt {
	case tensor.Float32:
		return "f32", true
	case tensor.Float16:
		return "f16", true
	case tensor.BFloat16:
		return "bf16", true
	}
	return "", false
}

func kernelOp(op reduce.Op) (string, bool) {
	switch op {
	case reduce.Sum:
		return "sum", true
	case reduce.Min:
		return "min", true
	case reduce.Max:
		return "max", true
	}
	return "", false
}

// kargs mirrors struct Args of kernels.cu (400 bytes).
type kargs struct {
	data, barIn, barMid, barOut, scratch [MaxRanks]uint64
	out, counters, err                   uint64
	n                                    uint64
	timeout                              int64
	rank, nranks                         int32
	in, slot                             uint64
	ctl                                  uint64
	digest                               uint32
	flags                                uint32 // flagEarly | flagOneGPU (AllReducer.flags)
}

// Push one-shot: inputs up to PushMax bytes that are not in IPC memory
// are stored into every peer's workspace slot and reduced from local
// memory, with one barrier and no staging copy (see kernels.cu and
// pushMode). The grid is fixed so every block takes part in every call,
// which keeps the slots' call parity equal across blocks.
const (
	PushMax     = 512 << 10
	pushBlocks  = 32
	pushThreads = 512
)

// Options tune the all-reducer.
type Options struct {
	// Threads per block and the most blocks per launch (0: defaults).
	Threads, MaxBlocks int
	// Timeout bounds a kernel's wait for its peers (0: 30 s).
	Timeout time.Duration
	// Capturing reports whether the rank's stream is being captured into
	// a CUDA graph, for auto's table (nil: never).
	Capturing func() bool
	// AutoTable names a JSON table file replacing the built-in
	// strategies (LoadAutoTable); "": the built-in table.
	AutoTable string
	// Activity records the kernels' NVRTC compile on the worker's flight
	// recorder (registry.BeginActivity; nil: not recorded).
	Activity func(name string) (end func())
	// SkipChecks drops the cross-rank argument checks, so that tests
	// reach the kernels' own behaviour on a lost peer. Only test binaries
	// may set it (testing.Testing); elsewhere NewAllReducer refuses it.
	SkipChecks bool
}

// AllReducer runs custom all-reduces on IPC memory.
type AllReducer struct {
	a    *Allocator
	nccl ccl.Comm // for Strategy NCCL (may be nil)
	opts Options
	sms  int

	drv  setupDriver // set-up and Close; the calls use a.cfg.Driver
	mod  cuda.Module
	fns  map[string]cuda.Function
	tout int64 // timeout in GPU clock cycles
	// host is two page-locked host words mapped into the device (hostDev
	// is their device address): [0] holds 1, the source of Abort's copy;
	// [1] the error word a kernel whose barrier gave up stores to (1
	// timeout, 2 aborted), which Check reads without a driver call. The
	// kernels never load from host memory (see kernels.cu).
	host    unsafe.Pointer
	hostDev cuda.DevicePtr
	// ctl is two device words the waiting kernels poll: [0] abort, set
	// by Abort with a copy on abortStream (a copy engine, so it lands
	// while kernels occupy every SM); [1] the sticky give-up code.
	ctl         cuda.DevicePtr
	ctx         cuda.Context
	dev         cuda.Device
	abortStream cuda.Stream
	abortOnce   sync.Once
	aborted     atomic.Bool
	// failed: a call gave up (Check saw it); the ranks' flags are out of
	// step, so every later call fails.
	failed error

	// stage is the IPC workspace for inputs that are not IPC memory.
	stage *Buffer
	// push is the workspace of push one-shot: 2 parities x n slots.
	push *Buffer

	auto      *AutoTable
	desc, all *tensor.Tensor // host exchange buffers
	// checked holds the descriptors of calls that read their input in
	// place and were exchanged and found equal on every rank; such a call
	// again skips the exchange and is checked by the kernels (digest).
	checked    map[desc]struct{}
	args       *kargs // heap-allocated launch arguments
	params     []unsafe.Pointer
	lastUsed   Strategy
	skipChecks bool
	pushMode   pushMode
	// sharing is the ranks' placement on GPUs; pushGrid the push
	// kernel's fixed grid (smaller where ranks share a GPU under MPS).
	sharing  Sharing
	pushGrid int
	// pdl: the kernels are launched with programmatic stream
	// serialization (usePDL).
	pdl bool
}

// usePDL reports whether the all-reduce kernels may be launched with
// programmatic stream serialization: compute capability 9.0+, a driver
// with cuLaunchKernelEx, and every rank alone on its GPU. The kernels
// execute griddepcontrol.wait before anything else (kernels.cu), so
// starting them early is safe for their own data; but blocks placed
// early sit on multiprocessors while they wait, and where ranks share a
// GPU those could be the places a peer's spinning blocks need
// (coresident.go), so shared GPUs launch the ordinary way.
func usePDL(major int, launchEx bool, s Sharing) bool {
	if major < 9 || !launchEx {
		return false
	}
	for _, n := range s.PerGPU {
		if n != 1 {
			return false
		}
	}
	return true
}

// Args.flags of kernels.cu.
const (
	// flagEarly: the kernels let the next kernel launch at their entry.
	flagEarly uint32 = 1 << iota
	// flagOneGPU: every rank runs on this GPU; the words of the
	// barriers that publish data are GPU-scope accesses.
	flagOneGPU
)

// flags is Args.flags. flagEarly: the kernels let the next kernel launch
// at their entry only where they are launched with PDL themselves, every
// rank alone on its GPU (kernels.cu, entry). Where ranks share a GPU the
// next kernel's blocks would be placed while this one waits for its peers
// and could hold the multiprocessors a peer's blocks need: under MPS,
// TestDecoderGPU's 4 ranks on one H200 timed out after 30 s (docs/ipc.md,
// "Ranks sharing a GPU"). flagOneGPU: every rank on this rank's GPU
// (ranks sharing it under MPS), where GPU scope orders what the ranks
// see and a system-scope release only costs time.
func (r *AllReducer) flags() uint32 {
	var f uint32
	if r.pdl {
		f |= flagEarly
	}
	if r.sharing.OneGPU(r.a.cfg.Rank) {
		f |= flagOneGPU
	}
	return f
}

// launchKernel launches f on stream st: with programmatic stream
// serialization where usePDL allowed it, so the kernel's launch and
// block placement overlap the end of the kernel before it on the stream
// (a VM product or norm) and the next kernel's overlap this one's.
func (r *AllReducer) launchKernel(f cuda.Function, grid, block uint32, st uintptr) error {
	d := r.a.cfg.Driver
	if r.pdl {
		return d.LaunchKernelPDL(f, [3]uint32{grid, 1, 1}, [3]uint32{block, 1, 1}, 0, cuda.Stream(st), r.params)
	}
	return d.LaunchKernel(f, [3]uint32{grid, 1, 1}, [3]uint32{block, 1, 1}, 0, cuda.Stream(st), r.params)
}

// pushMode: when one-shot inputs up to PushMax take the push path.
// pushAuto (the default): when the input is not directly readable IPC
// memory (it saves the staging copy; IPC inputs take the pull path,
// whose barriers are cheaper). Tests set pushAlways or pushNever to
// reach both kernels.
type pushMode uint8

const (
	pushAuto pushMode = iota
	pushAlways
	pushNever
)

// NewAllReducer compiles the kernels (NVRTC, cached on disk) and loads
// them on this rank's device. nccl is used for Strategy NCCL; it may be
// nil (then that strategy is an error). It is collective: the ranks
// exchange their device numbers over the control communicator. On an
// error it gives back everything it took from the driver.
func NewAllReducer(ctx context.Context, a *Allocator, nccl ccl.Comm, opts Options) (*AllReducer, error) {
	if a.cfg.Driver == nil || a.cfg.Exec == nil {
		return nil, fmt.Errorf("%w: ipc: rank %d: the custom all-reduce needs a CUDA driver and a device executor (Config.Driver, Config.Exec)", ccl.ErrBadArgs, a.cfg.Rank)
	}
	return newAllReducer(ctx, a, nccl, opts, a.cfg.Driver, compileKernels)
}

// kernelFile and kernelModuleSource are the all-reduce kernels' NVRTC
// unit: kernels.cu after the shared headers.
const kernelFile = "chorus_ipc_allreduce.cu"

func kernelModuleSource() string { return cudasrc.Half + cudasrc.PDL + cudasrc.MemOrder + kernelSource }

// kernelNames are the kernels the AllReducer resolves: each strategy
// (one-shot, two-shot, push) for each dtype and reduction.
func kernelNames() []string {
	var out []string
	for _, shot := range []string{"oneshot", "twoshot", "push"} {
		for _, dt := range []string{"f32", "f16", "bf16"} {
			for _, op := range []string{"sum", "min", "max"} {
				out = append(out, shot+"_"+dt+"_"+op)
			}
		}
	}
	return out
}

// compileKernels builds kernels.cu for arch with NVRTC (cached on disk).
func compileKernels(arch string) ([]byte, error) {
	comp, err := nvrtc.Load()
	if err != nil {
		return nil, err
	}
	cubin, _, err := comp.CompileCached(kernelFile, kernelModuleSource(), arch)
	return cubin, err
}

// newAllReducer is NewAllReducer over any driver and compiler (the tests'
// fakes).
func newAllReducer(ctx context.Context, a *Allocator, nccl ccl.Comm, opts Options, drv setupDriver, compile func(arch string) ([]byte, error)) (_ *AllReducer, err error) {
	r := &AllReducer{a: a, nccl: nccl, opts: opts, drv: drv, fns: map[string]cuda.Function{}, args: new(kargs), checked: map[desc]struct{}{}}
	r.params = []unsafe.Pointer{unsafe.Pointer(r.args)}
	defer func() {
		if err != nil {
			r.release()
		}
	}()
	if opts.SkipChecks && !testing.Testing() {
		return nil, fmt.Errorf("%w: ccl/ipc: rank %d: Options.SkipChecks is for tests only", ccl.ErrBadArgs, a.cfg.Rank)
	}
	r.skipChecks = opts.SkipChecks
	if r.opts.Threads <= 0 {
		r.opts.Threads = 512
	}
	r.opts.Threads = min(max(r.opts.Threads, 32), 1024)
	if r.opts.Timeout <= 0 {
		r.opts.Timeout = 30 * time.Second
	}
	auto, err := LoadAutoTable(opts.AutoTable)
	if err != nil {
		return nil, fmt.Errorf("ipc: rank %d: %w", a.cfg.Rank, err)
	}
	r.auto = auto
	r.desc = tensor.MustNew(tensor.Uint8, tensor.Shape{descBytes})
	r.all = tensor.MustNew(tensor.Uint8, tensor.Shape{int64(descBytes * a.cfg.Size)})
	d := drv
	var share GPUShare
	var major int
	err = a.cfg.Exec(func(uintptr) error {
		dev, err := d.DeviceGet(a.cfg.Ordinal)
		if err != nil {
			return err
		}
		if major, err = d.DeviceAttribute(dev, cuda.AttrComputeCapabilityMajor); err != nil {
			return err
		}
		minor, err := d.DeviceAttribute(dev, cuda.AttrComputeCapabilityMinor)
		if err != nil {
			return err
		}
		if r.sms, err = d.DeviceAttribute(dev, cuda.AttrMultiprocessorCount); err != nil {
			return err
		}
		khz, err := d.DeviceAttribute(dev, cuda.AttrClockRate)
		if err != nil {
			return err
		}
		r.tout = int64(khz) * 1000 * int64(r.opts.Timeout/time.Millisecond) / 1000
		if major < 7 {
			return fmt.Errorf("%w: custom all-reduce needs compute capability 7.0 or newer, cuda:%d has %d.%d", ccl.ErrBadArgs, a.cfg.Ordinal, major, minor)
		}
		arch := fmt.Sprintf("sm_%d%d", major, minor)
		end := func() {}
		if opts.Activity != nil {
			end = opts.Activity("NVRTC compile chorus_ipc_allreduce.cu")
		}
		cubin, err := compile(arch)
		end()
		if err != nil {
			return err
		}
		if r.mod, err = d.ModuleLoadData(cubin); err != nil {
			return err
		}
		var ks []Kernel
		for _, name := range kernelNames() {
			f, err := d.ModuleGetFunction(r.mod, name)
			if err != nil {
				return err
			}
			r.fns[name] = f
			threads := r.opts.Threads
			if strings.HasPrefix(name, "push_") {
				threads = pushThreads
			}
			ks = append(ks, Kernel{Fn: f, Threads: threads})
		}
		if share, err = DescribeGPU(d, dev, ks); err != nil {
			return err
		}
		if r.host, err = d.MemHostAlloc(8, cuda.MemHostAllocPortable|cuda.MemHostAllocDeviceMap); err != nil {
			return err
		}
		(*atomic.Uint32)(r.host).Store(1)
		r.errWord().Store(0)
		if r.hostDev, err = d.MemHostGetDevicePointer(r.host); err != nil {
			return err
		}
		if r.ctl, err = d.MemAlloc(8); err != nil {
			return err
		}
		if err = d.MemsetD8(r.ctl, 0, 8); err != nil {
			return err
		}
		// Abort runs on any goroutine, without the device's lock: it
		// needs the context and a stream of its own.
		r.dev = dev
		if r.ctx, err = d.PrimaryCtxRetain(dev); err != nil {
			return err
		}
		r.abortStream, err = d.StreamCreate(cuda.StreamNonBlocking)
		return err
	})
	// Every rank learns whether every rank could load the kernels before
	// any of them goes on.
	mine := record{ordinal: int32(a.cfg.Ordinal), pid: int64(a.pid), gpu: share}
	if err != nil {
		mine.status = 1
	}
	ords, xerr := exchange(ctx, a.cfg.Control, mine)
	if err != nil {
		return nil, fmt.Errorf("ipc: rank %d: load all-reduce kernels: %w", a.cfg.Rank, err)
	}
	if xerr != nil {
		return nil, fmt.Errorf("ipc: rank %d: all-reducer set-up: %w", a.cfg.Rank, xerr)
	}
	for q, o := range ords {
		if o.status != 0 {
			return nil, fmt.Errorf("ipc: rank %d: rank %d could not load the all-reduce kernels", a.cfg.Rank, q)
		}
	}
	if err := placement(ords); err != nil {
		return nil, fmt.Errorf("%w: ipc: rank %d: %v", ccl.ErrBadArgs, a.cfg.Rank, err)
	}
	if r.opts.MaxBlocks <= 0 {
		r.opts.MaxBlocks = 2 * r.sms
	}
	r.opts.MaxBlocks = min(r.opts.MaxBlocks, maxBlocks)
	shares := make([]GPUShare, len(ords))
	for q, o := range ords {
		shares[q] = o.gpu
	}
	if r.sharing, err = PlaceRanks(shares); err != nil {
		return nil, fmt.Errorf("ipc: rank %d: %w", a.cfg.Rank, err)
	}
	r.pdl = usePDL(major, a.cfg.Driver != nil && a.cfg.Driver.HasLaunchEx(), r.sharing)
	r.pushGrid = pushBlocks
	if b := r.sharing.Blocks; b > 0 {
		// Ranks share a GPU under MPS: every grid whose blocks wait for
		// peer blocks fits beside the peers' (ccl/ipc/coresident.go).
		r.opts.MaxBlocks = min(r.opts.MaxBlocks, b)
		r.pushGrid = min(pushBlocks, b)
	}
	return r, nil
}

// Routes of a one-shot or two-shot call (desc.staged).
const (
	routeDirect byte = 0 // peers read the input where it is (IPC memory)
	routeStaged byte = 1 // copied into the all-reducer's IPC workspace first
	routePush   byte = 2 // push one-shot: the input may be any memory
)

func routeName(r byte) string {
	switch r {
	case routeDirect:
		return "read in place"
	case routeStaged:
		return "staged"
	case routePush:
		return "pushed"
	}
	return fmt.Sprintf("route(%d)", r)
}

// route picks how the input reaches the peers: inIPC and off say whether
// send (at sp, bytes long) lies in IPC memory and where; rp is recv.
func route(s Strategy, bytes int64, sp, rp uint64, inIPC bool, off int64, mode pushMode) byte {
	overlap := sp < rp+uint64(bytes) && rp < sp+uint64(bytes)
	// direct: peers can read the input where it is (one-shot cannot run
	// in place: peers would read what this rank overwrites).
	direct := inIPC && off%16 == 0 && !(s == OneShot && overlap)
	push := s == OneShot && bytes <= PushMax && sp%16 == 0 && mode != pushNever &&
		(mode == pushAlways || !direct)
	switch {
	case push:
		return routePush
	case !direct:
		return routeStaged
	}
	return routeDirect
}

// placement refuses two ranks of one process on one GPU: their kernels
// run in one context, which the GPU does not time-slice, so the spinning
// blocks of one rank's kernel can occupy every SM while the peer's blocks
// they wait for are never scheduled. Ranks in different processes share
// a GPU by time-slicing and are fine (that is how 3-8 ranks are tested).
func placement(rs []record) error {
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			if rs[i].pid == rs[j].pid && rs[i].ordinal == rs[j].ordinal {
				return fmt.Errorf("ranks %d and %d are threads of one process on cuda:%d; the custom all-reduce needs one GPU per rank in a process, or one process per rank (a process session)", i, j, rs[i].ordinal)
			}
		}
	}
	return nil
}

// Sharing is how the communicator's ranks are placed on GPUs, and the
// grid limit that keeps ranks sharing a GPU under MPS co-resident.
func (r *AllReducer) Sharing() Sharing { return r.sharing }

// Workspaces counts the IPC allocations the all-reducer holds itself.
func (r *AllReducer) Workspaces() int {
	n := 0
	for _, b := range []*Buffer{r.stage, r.push} {
		if b != nil {
			n++
		}
	}
	return n
}

// Last is the strategy the latest AllReduce ran (what auto picked).
func (r *AllReducer) Last() Strategy { return r.lastUsed }

// descriptor exchanged before a call: what each rank is about to do.
const descBytes = 48

// maxChecked bounds AllReducer.checked; past it the set starts again (a
// program has a few all-reduce sites, each one descriptor).
const maxChecked = 256

type desc struct {
	bad      byte // this rank's arguments are invalid
	strategy byte
	dtype    byte
	op       byte
	staged   byte
	count    int64
	seq      uint64 // IPC allocation of the input (0 when staged)
	offset   int64
}

func (d desc) encode(b []byte) {
	clear(b[:descBytes])
	b[0], b[1], b[2], b[3], b[4] = d.bad, d.strategy, d.dtype, d.op, d.staged
	binary.LittleEndian.PutUint64(b[8:], uint64(d.count))
	binary.LittleEndian.PutUint64(b[16:], d.seq)
	binary.LittleEndian.PutUint64(b[24:], uint64(d.offset))
}

// digest is the call's 32-bit FNV-1a hash over its encoding, never 0 (0
// tells the kernels not to compare), that the start barrier carries.
func (d desc) digest() uint32 {
	var b [descBytes]byte
	d.encode(b[:])
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	if h == 0 {
		h = 1
	}
	return h
}

// inPlace reports whether the call reads its input where it is: one-shot
// or two-shot on IPC memory, no staging copy, no push slot, no
// allocation. Only such calls may skip the host's exchange, since their
// kernels end with a barrier and compare digests at the start.
func (d desc) inPlace() bool {
	s := Strategy(d.strategy)
	return d.bad == 0 && (s == OneShot || s == TwoShot) && d.staged == routeDirect
}

// wasChecked reports whether d may skip the exchange: it reads its input
// in place and every rank made the same call before (remember).
func (r *AllReducer) wasChecked(d desc) bool {
	_, ok := r.checked[d]
	return ok && d.inPlace()
}

// remember records d after an exchange found it equal on every rank.
func (r *AllReducer) remember(d desc) {
	if !d.inPlace() {
		return
	}
	if len(r.checked) >= maxChecked {
		clear(r.checked)
	}
	r.checked[d] = struct{}{}
}

func decodeDesc(b []byte) desc {
	return desc{bad: b[0], strategy: b[1], dtype: b[2], op: b[3], staged: b[4],
		count: int64(binary.LittleEndian.Uint64(b[8:])), seq: binary.LittleEndian.Uint64(b[16:]), offset: int64(binary.LittleEndian.Uint64(b[24:]))}
}

// devPtr is a tensor's device address on this rank's GPU.
func (r *AllReducer) devPtr(name string, t *tensor.Tensor) (uint64, error) {
	if t == nil {
		return 0, fmt.Errorf("%w: %s is nil", ccl.ErrBadArgs, name)
	}
	if t.Device() != tensor.CUDADevice(r.a.cfg.Ordinal) || t.Storage().Buffer() == nil {
		return 0, fmt.Errorf("%w: %s is on %v, this rank's GPU is cuda:%d", ccl.ErrBadArgs, name, t.Device(), r.a.cfg.Ordinal)
	}
	return uint64(t.Storage().Buffer().Ptr()) + uint64(t.Offset()), nil
}

// AllReduce reduces send over every rank into recv. send should be in IPC
// memory (Allocator.Alloc), where peers read it directly. Otherwise a
// one-shot of up to PushMax bytes pushes it into the peers' workspaces
// (no extra copy), and anything larger is first copied into the
// all-reducer's own IPC workspace (one device copy): documented routes.
// One-shot in place (recv overlapping send) takes the same routes, since
// peers would read the input while it is overwritten. Auto runs
// Pick's choice; NCCL, and auto for dtypes or ops the kernels lack
// (anything but float32/float16/bfloat16 with sum/min/max), use the NCCL
// communicator. Every rank must make the same call; a difference is
// ccl.ErrMismatch on every rank: before any launch where the ranks
// exchange their descriptors (the first call of each descriptor, and
// every staged, pushed or NCCL call), else from the kernels, reported by
// the next synchronization (Check) after which the all-reducer fails
// every call (docs/ipc.md, "Checks").
func (r *AllReducer) AllReduce(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op, s Strategy) error {
	me := r.a.cfg.Rank
	if r.aborted.Load() {
		return fmt.Errorf("%w: ipc: rank %d: the all-reducer was aborted (a peer was lost)", ccl.ErrFailed, me)
	}
	if r.failed != nil {
		return fmt.Errorf("%w: ipc: rank %d: an earlier custom all-reduce gave up (%v); the ranks are out of step, make a new communicator (InitCCL)", ccl.ErrFailed, me, r.failed)
	}
	sp, err := r.devPtr("send", send)
	var rp uint64
	if err == nil {
		rp, err = r.devPtr("recv", recv)
	}
	if err == nil && (send.DType() != recv.DType() || send.NumElements() != recv.NumElements()) {
		err = fmt.Errorf("%w: send is %s[%d], recv is %s[%d]", ccl.ErrBadArgs, send.DType(), send.NumElements(), recv.DType(), recv.NumElements())
	}
	if err == nil {
		err = reduce.Supported(op, send.DType())
		if err != nil {
			err = fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
		}
	}
	_, dtOK := kernelDType(send.DType())
	_, opOK := kernelOp(op)
	if err == nil && s == Auto && (!dtOK || !opOK) {
		s = NCCL // documented route: the kernels cover f32/f16/bf16 x sum/min/max
	}
	if err == nil && (s == OneShot || s == TwoShot) && (!dtOK || !opOK) {
		err = fmt.Errorf("%w: %s all-reduce supports float32, float16, bfloat16 with sum, min, max; got %s %s (use auto or nccl)", ccl.ErrBadArgs, s, send.DType(), op)
	}
	if err == nil && s == NCCL && r.nccl == nil {
		err = fmt.Errorf("%w: strategy nccl needs the session's nccl communicator (InitCCL \"nccl\")", ccl.ErrBadArgs)
	}
	var (
		n     int64
		bytes int64
		buf   *Buffer
		off   int64
		d     desc
	)
	if err == nil {
		n = send.NumElements()
		bytes = n * int64(send.DType().Size())
		if s == Auto {
			s = pickFrom(r.auto, bytes, r.a.cfg.Size, r.opts.Capturing != nil && r.opts.Capturing())
		}
		d = desc{strategy: byte(s), dtype: byte(send.DType()), op: byte(op), count: n}
		if rp%16 != 0 {
			err = fmt.Errorf("%w: custom_allreduce needs recv 16-byte aligned (it is at device offset %d)", ccl.ErrBadArgs, rp%16)
			d.bad = 1
		}
		if s == OneShot || s == TwoShot {
			var ok bool
			buf, off, ok = r.a.Lookup(sp)
			d.staged = route(s, bytes, sp, rp, ok, off, r.pushMode)
			if d.staged == routeDirect {
				d.seq, d.offset = buf.Seq, off
			}
		}
	} else {
		d.bad = 1
	}
	if r.skipChecks {
		// Measurements only: each rank trusts that the others match.
		if err != nil {
			return fmt.Errorf("ipc: rank %d: %w", me, err)
		}
		r.lastUsed = s
		return r.run(ctx, d, s, send, recv, op, sp, rp, n, bytes, buf, off)
	}
	if err == nil && r.wasChecked(d) {
		r.lastUsed = s
		return r.run(ctx, d, s, send, recv, op, sp, rp, n, bytes, buf, off)
	}
	d.encode(r.desc.Bytes())
	if xerr := r.a.cfg.Control.AllGather(ctx, r.desc, r.all); xerr != nil {
		return fmt.Errorf("ipc: rank %d: all-reduce argument exchange: %w", me, xerr)
	}
	if err != nil {
		return fmt.Errorf("ipc: rank %d: %w", me, err)
	}
	for q := range r.a.cfg.Size {
		x := decodeDesc(r.all.Bytes()[q*descBytes:])
		if x.bad != 0 {
			return fmt.Errorf("%w: ipc: rank %d: rank %d passed bad arguments to custom_allreduce", ccl.ErrMismatch, me, q)
		}
		if x != d {
			return fmt.Errorf("%w: ipc: rank %d: custom_allreduce differs: rank %d runs %s of %d %s elements (IPC allocation #%d at offset %d, input %s); rank %d runs %s of %d %s elements (#%d at %d, input %s)",
				ccl.ErrMismatch, me, me, Strategy(d.strategy), d.count, tensor.DType(d.dtype), d.seq, d.offset, routeName(d.staged),
				q, Strategy(x.strategy), x.count, tensor.DType(x.dtype), x.seq, x.offset, routeName(x.staged))
		}
	}
	r.remember(d)
	r.lastUsed = s
	return r.run(ctx, d, s, send, recv, op, sp, rp, n, bytes, buf, off)
}

func (r *AllReducer) run(ctx context.Context, d desc, s Strategy, send, recv *tensor.Tensor, op reduce.Op, sp, rp uint64, n, bytes int64, buf *Buffer, off int64) error {
	var err error
	if s == NCCL {
		return r.nccl.AllReduce(ctx, send, recv, op)
	}
	if n == 0 {
		return nil
	}
	if d.staged == routePush {
		if r.push == nil {
			if err := r.notCapturing("push one-shot"); err != nil {
				return err
			}
			// Every rank reaches its first push call together (the
			// descriptor check above), so this allocation is collective.
			if r.push, err = r.a.Alloc(ctx, 2*int64(r.a.cfg.Size)*PushMax); err != nil {
				r.push = nil
				return err
			}
		}
		return r.launchPush(sp, rp, n, send.DType(), op)
	}
	if d.staged == routeStaged {
		// Every rank took this route (checked above), so the workspace
		// grows on all of them at the same call: the allocation stays
		// collective.
		if r.stage == nil || r.stage.Size < bytes {
			if err := r.notCapturing("a staged input"); err != nil {
				return err
			}
			if r.stage != nil {
				r.a.Free(r.stage)
			}
			size := int64(1 << 20)
			for size < bytes {
				size *= 2
			}
			if r.stage, err = r.a.Alloc(ctx, size); err != nil {
				r.stage = nil
				return err
			}
		}
		buf, off = r.stage, 0
	}
	return r.launch(s, buf, off, sp, rp, n, send.DType(), op, d.staged == routeStaged, bytes, d.digest())
}

// notCapturing refuses to grow a workspace while the stream is captured
// into a graph: the allocation zeroes and synchronizes, which would spoil
// the capture. Every rank is at the same call (checked), so all refuse.
func (r *AllReducer) notCapturing(what string) error {
	var st int
	err := r.a.cfg.Exec(func(s uintptr) (err error) {
		st, err = r.a.cfg.Driver.StreamIsCapturing(cuda.Stream(s))
		return err
	})
	if err == nil && st != cuda.CaptureNone {
		err = fmt.Errorf("%w (the first %s call allocates the all-reducer's workspace: make one such call of at least this size before capturing)", device.ErrCapturing, what)
	}
	if err != nil {
		return fmt.Errorf("ipc: rank %d: %w", r.a.cfg.Rank, err)
	}
	return nil
}

// kernel is the loaded function shot_dtype_op (kernels.cu's names); the
// caller has checked that dtype and op have kernels.
func (r *AllReducer) kernel(shot string, dt tensor.DType, op reduce.Op) cuda.Function {
	dn, _ := kernelDType(dt)
	on, _ := kernelOp(op)
	return r.fns[shot+"_"+dn+"_"+on]
}

func (r *AllReducer) launchPush(sp, rp uint64, n int64, dt tensor.DType, op reduce.Op) error {
	f := r.kernel("push", dt, op)
	buf := r.push
	a := r.args
	*a = kargs{out: rp, counters: buf.Counters, err: uint64(r.hostDev) + 4, n: uint64(n), timeout: r.tout, rank: int32(r.a.cfg.Rank),
		nranks: int32(r.a.cfg.Size), in: sp, slot: PushMax, ctl: uint64(r.ctl), flags: r.flags()}
	for q := range r.a.cfg.Size {
		a.data[q], a.barIn[q] = buf.Data[q], buf.BarrierIn[q]
	}
	return r.a.cfg.Exec(func(st uintptr) error {
		return r.launchKernel(f, uint32(r.pushGrid), pushThreads, st)
	})
}

func (r *AllReducer) launch(s Strategy, buf *Buffer, off int64, sp, rp uint64, n int64, dt tensor.DType, op reduce.Op, staged bool, bytes int64, digest uint32) error {
	shot := "oneshot"
	if s == TwoShot {
		shot = "twoshot"
	}
	f := r.kernel(shot, dt, op)
	size := r.a.cfg.Size
	a := r.args
	*a = kargs{out: rp, counters: buf.Counters, err: uint64(r.hostDev) + 4, n: uint64(n), timeout: r.tout, rank: int32(r.a.cfg.Rank), nranks: int32(size),
		ctl: uint64(r.ctl), digest: digest, flags: r.flags()}
	for q := range size {
		a.data[q] = buf.Data[q] + uint64(off)
		a.barIn[q], a.barMid[q], a.barOut[q], a.scratch[q] = buf.BarrierIn[q], buf.BarrierMid[q], buf.BarrierOut[q], buf.Scratch[q]
	}
	epv := int64(16 / dt.Size())
	work := n / epv // vectors a rank reduces (one-shot)
	if s == TwoShot {
		work = (work + int64(size) - 1) / int64(size)
	}
	threads := int64(r.opts.Threads)
	blocks := min(max((work+threads-1)/threads, 1), int64(r.opts.MaxBlocks))
	d := r.a.cfg.Driver
	return r.a.cfg.Exec(func(st uintptr) error {
		if staged {
			if err := d.MemcpyDtoDAsync(cuda.DevicePtr(buf.Data[r.a.cfg.Rank]), cuda.DevicePtr(sp), bytes, cuda.Stream(st)); err != nil {
				return err
			}
		}
		return r.launchKernel(f, uint32(blocks), uint32(threads), st)
	})
}

// errWord is the mapped host word the kernels report to (see host).
func (r *AllReducer) errWord() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Add(r.host, 4))
}

// Check reports (once) a kernel whose barrier gave up since the last
// Check: a peer never arrived (ccl.ErrTimeout), the all-reducer was
// aborted (ccl.ErrFailed) or a peer's call differed (ccl.ErrMismatch),
// so that call's result is wrong. Call it after the stream was synchronized (the
// kernels' stores to the mapped word are visible then); it reads host
// memory only.
func (r *AllReducer) Check() error {
	if r.host == nil {
		return nil
	}
	var err error
	switch r.errWord().Swap(0) {
	case 0:
		return nil
	case 2:
		err = fmt.Errorf("%w: ipc: rank %d: a custom all-reduce was aborted while it waited for its peers (a peer was lost); its result is wrong", ccl.ErrFailed, r.a.cfg.Rank)
	case 3:
		err = fmt.Errorf("%w: ipc: rank %d: a custom all-reduce differed between ranks (count, dtype, op, strategy or input allocation; found by the kernels, which compare each call's digest); its result is wrong", ccl.ErrMismatch, r.a.cfg.Rank)
	default:
		err = fmt.Errorf("%w: ipc: rank %d: a custom all-reduce waited more than %v for its peers and gave up; its result is wrong", ccl.ErrTimeout, r.a.cfg.Rank, r.opts.Timeout)
	}
	if r.failed == nil {
		r.failed = err
	}
	return err
}

// Abort makes every queued or running custom all-reduce of this rank
// stop waiting for its peers (within a few hundred polls), and every
// later call fail with ccl.ErrFailed: a peer process was lost. It only
// stores to host memory, so it is safe from any goroutine, also while
// another one waits for the device.
func (r *AllReducer) Abort() {
	r.aborted.Store(true)
	if r.ctl == 0 {
		return
	}
	r.abortOnce.Do(func() {
		// The copy engine writes the device word while the waiting
		// kernels occupy the SMs; a failure here leaves the kernels to
		// their timeout, and the error already reported by the session
		// is the first cause, so it is not reported again.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		d := r.a.cfg.Driver
		if d.SetCurrent(r.ctx) == nil {
			d.MemcpyHtoDAsync(r.ctl, unsafe.Slice((*byte)(r.host), 4), r.abortStream)
		}
	})
}

// Close unloads the kernels and frees the all-reducer's memory (the
// allocator is closed by its owner).
func (r *AllReducer) Close() error {
	for _, b := range []**Buffer{&r.stage, &r.push} {
		if *b != nil {
			r.a.Free(*b)
			*b = nil
		}
	}
	return r.release()
}

// release gives back what the set-up took from the driver, as far as it
// got (a zero field was never taken), on the device's thread: the stream
// (after any Abort in flight), the device words, the context reference,
// the host words and the module.
func (r *AllReducer) release() error {
	if r.abortStream == 0 && r.ctl == 0 && r.ctx == 0 && r.host == nil && r.mod == 0 {
		return nil
	}
	return r.a.cfg.Exec(func(uintptr) error {
		d := r.drv
		// An Abort in flight finishes before the words go away.
		r.abortOnce.Do(func() {})
		var errs []error
		if r.abortStream != 0 {
			errs = append(errs, d.StreamSynchronize(r.abortStream), d.StreamDestroy(r.abortStream))
		}
		if r.ctl != 0 {
			errs = append(errs, d.MemFree(r.ctl))
		}
		if r.ctx != 0 {
			errs = append(errs, d.PrimaryCtxRelease(r.dev))
		}
		if r.host != nil {
			errs = append(errs, d.MemFreeHost(r.host))
		}
		if r.mod != 0 {
			errs = append(errs, d.ModuleUnload(r.mod))
		}
		return errors.Join(errs...)
	})
}

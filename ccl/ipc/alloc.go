package ipc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/tensor"
)

// Limits of the kernels (kernels.cu: MAX_RANKS, MAX_BLOCKS).
const (
	MaxRanks  = 8
	maxBlocks = 512
	// barBytes is one barrier array: a u32 slot per (block, rank).
	barBytes = maxBlocks * MaxRanks * 4
	// barInBytes is the start barrier's array: a u64 slot per (block,
	// rank), the flag and the call's digest (kernels.cu).
	barInBytes = maxBlocks * MaxRanks * 8
	// align is the alignment of every region of an allocation.
	align = 256
)

// ErrOrder: workers allocated or used IPC memory in different orders or
// sizes. It wraps ccl.ErrMismatch.
var ErrOrder = fmt.Errorf("%w: IPC memory allocated in a different order or size across workers", ccl.ErrMismatch)

// Config describes one rank of the allocator.
type Config struct {
	Rank, Size int
	Ordinal    int // this rank's CUDA device
	Driver     *cuda.Driver
	// Exec runs fn on the thread that owns the rank's GPU, with its stream.
	Exec func(fn func(stream uintptr) error) error
	// Control is a host communicator over the same ranks; allocations
	// exchange their handles and check their order through it.
	Control ccl.Comm
	// Memory is the device memory the allocator uses; nil means
	// CUDAMemory on Driver and Exec.
	Memory Memory
}

// region offsets inside one allocation (all aligned):
// [data][scratch][bar_in][bar_mid][bar_out][counters]
type layout struct {
	data, scratch, barIn, barMid, barOut, counters, total int64
}

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }

func layoutFor(size int64, n int) layout {
	var l layout
	l.scratch = roundUp(max(size, 1), align)
	// Two-shot: each rank publishes its reduced slice, at most
	// ceil(vectors/n) 16-byte vectors.
	l.barIn = l.scratch + roundUp((size+15)/16/int64(n)*16+16, align)
	l.barMid = l.barIn + barInBytes
	l.barOut = l.barMid + barBytes
	l.counters = l.barOut + barBytes
	l.total = l.counters + roundUp(maxBlocks*4, align)
	return l
}

// raw is one device allocation of this rank (one IPC handle).
type raw struct {
	ptr    cuda.DevicePtr
	lay    layout
	handle cuda.IpcMemHandle
}

// Buffer is one IPC allocation as every rank sees it: the TVM-style
// memory object (num_workers, worker_id, remote data pointers, barrier
// arrays). The barrier flag is not a host counter: each thread block keeps
// its own counter in Counters, so the kernels' arguments never change
// between calls.
type Buffer struct {
	a    *Allocator
	own  *raw
	Size int64 // usable data bytes
	Seq  uint64
	// Per rank (index = rank), addresses valid on this rank's device.
	Data, Scratch, BarrierIn, BarrierMid, BarrierOut []uint64
	Counters                                         uint64 // this rank's per-block flag counters
	freed                                            bool
}

// NumWorkers and WorkerID name the ranks of the allocation.
func (b *Buffer) NumWorkers() int { return b.a.cfg.Size }
func (b *Buffer) WorkerID() int   { return b.a.cfg.Rank }

// Allocator hands out IPC memory for one communicator's ranks. Alloc is
// collective: every rank must call it at the same point of its program
// with the same size; a difference is reported on every rank (ErrOrder),
// never a hang. Free is local: memory goes to this rank's pool and is
// reused by a later Alloc of the same size class (which is again
// collective and zeroes the barriers, so ranks need not free in the same
// order). Memory returns to the driver only at Close.
type Allocator struct {
	cfg Config
	pid int

	mu     sync.Mutex
	seq    uint64
	pool   map[int64][]*raw
	all    []*raw                               // every allocation of this rank
	opened map[cuda.IpcMemHandle]cuda.DevicePtr // peers' allocations mapped here
	live   map[uint64]*Buffer                   // by data address
	peerOn map[int]bool                         // peer devices with access enabled
	closed bool
}

// NewAllocator makes this rank's allocator (no collective call).
func NewAllocator(cfg Config) (*Allocator, error) {
	switch {
	case cfg.Size < 1 || cfg.Size > MaxRanks:
		return nil, fmt.Errorf("%w: IPC memory supports 1 to %d ranks, got %d", ccl.ErrBadArgs, MaxRanks, cfg.Size)
	case cfg.Rank < 0 || cfg.Rank >= cfg.Size:
		return nil, fmt.Errorf("%w: rank %d of %d", ccl.ErrBadArgs, cfg.Rank, cfg.Size)
	case cfg.Memory == nil && (cfg.Driver == nil || cfg.Exec == nil), cfg.Control == nil:
		return nil, fmt.Errorf("%w: IPC allocator needs device memory (a driver and a device executor) and a control communicator", ccl.ErrBadArgs)
	case cfg.Control.Size() != cfg.Size || cfg.Control.Rank() != cfg.Rank:
		return nil, fmt.Errorf("%w: control communicator is rank %d of %d, allocator rank %d of %d", ccl.ErrBadArgs, cfg.Control.Rank(), cfg.Control.Size(), cfg.Rank, cfg.Size)
	}
	if cfg.Memory == nil {
		cfg.Memory = &CUDAMemory{Driver: cfg.Driver, Exec: cfg.Exec}
	}
	return &Allocator{cfg: cfg, pid: os.Getpid(), pool: map[int64][]*raw{}, opened: map[cuda.IpcMemHandle]cuda.DevicePtr{},
		live: map[uint64]*Buffer{}, peerOn: map[int]bool{}}, nil
}

// record is one rank's part of an allocation exchange.
const recordBytes = 128

type record struct {
	status  byte // 0 ok, 1 this rank failed locally
	ordinal int32
	pid     int64
	seq     uint64
	size    int64
	ptr     uint64
	handle  cuda.IpcMemHandle
	gpu     GPUShare // the all-reducer's set-up only
}

func (r *record) encode(b []byte) {
	clear(b[:recordBytes])
	b[0] = r.status
	binary.LittleEndian.PutUint32(b[4:], uint32(r.ordinal))
	binary.LittleEndian.PutUint64(b[8:], uint64(r.pid))
	binary.LittleEndian.PutUint64(b[16:], r.seq)
	binary.LittleEndian.PutUint64(b[24:], uint64(r.size))
	binary.LittleEndian.PutUint64(b[32:], r.ptr)
	copy(b[40:104], r.handle[:])
	r.gpu.Encode(b[104:128])
}

func decodeRecord(b []byte) record {
	var r record
	r.status = b[0]
	r.ordinal = int32(binary.LittleEndian.Uint32(b[4:]))
	r.pid = int64(binary.LittleEndian.Uint64(b[8:]))
	r.seq = binary.LittleEndian.Uint64(b[16:])
	r.size = int64(binary.LittleEndian.Uint64(b[24:]))
	r.ptr = binary.LittleEndian.Uint64(b[32:])
	copy(r.handle[:], b[40:104])
	r.gpu = DecodeGPUShare(b[104:128])
	return r
}

// exchange all-gathers one record per rank over the control communicator.
func exchange(ctx context.Context, control ccl.Comm, mine record) ([]record, error) {
	n := control.Size()
	in := tensor.MustNew(tensor.Uint8, tensor.Shape{recordBytes})
	out := tensor.MustNew(tensor.Uint8, tensor.Shape{int64(recordBytes * n)})
	mine.encode(in.Bytes())
	if err := control.AllGather(ctx, in, out); err != nil {
		return nil, err
	}
	rs := make([]record, n)
	for i := range rs {
		rs[i] = decodeRecord(out.Bytes()[i*recordBytes:])
	}
	return rs, nil
}

// checkOrder reports how the ranks' records disagree, if they do.
func checkOrder(rs []record, me int) error {
	for r, x := range rs {
		if x.status != 0 {
			return fmt.Errorf("ipc: rank %d: rank %d failed to allocate its part (allocation #%d)", me, r, rs[me].seq)
		}
	}
	for r, x := range rs {
		if x.seq != rs[0].seq || x.size != rs[0].size {
			return fmt.Errorf("%w: rank %d: allocation #%d of %d bytes on rank 0, #%d of %d bytes on rank %d", ErrOrder, me, rs[0].seq, rs[0].size, x.seq, x.size, r)
		}
	}
	return nil
}

// Alloc makes an IPC allocation of size data bytes on every rank.
func (a *Allocator) Alloc(ctx context.Context, size int64) (*Buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: negative IPC allocation size %d", ccl.ErrBadArgs, size)
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ccl.ErrClosed
	}
	a.seq++
	seq := a.seq
	lay := layoutFor(size, a.cfg.Size)
	var r *raw
	if free := a.pool[lay.total]; len(free) > 0 {
		r, a.pool[lay.total] = free[len(free)-1], free[:len(free)-1]
	}
	a.mu.Unlock()

	mine := record{ordinal: int32(a.cfg.Ordinal), pid: int64(a.pid), seq: seq, size: size}
	// Zero everything (data, barriers, counters) and wait for it BEFORE
	// the handles go out: a peer may signal as soon as it has them.
	lerr := func() error {
		m := a.cfg.Memory
		if r == nil {
			p, h, err := m.Alloc(lay.total)
			if err != nil {
				return err
			}
			r = &raw{ptr: cuda.DevicePtr(p), lay: lay, handle: h}
			a.mu.Lock()
			a.all = append(a.all, r)
			a.mu.Unlock()
		}
		return m.Zero(uint64(r.ptr), lay.total)
	}()
	if lerr != nil {
		mine.status = 1
	} else {
		mine.ptr, mine.handle = uint64(r.ptr), r.handle
	}
	rs, err := exchange(ctx, a.cfg.Control, mine)
	if err == nil && lerr != nil {
		err = fmt.Errorf("ipc: rank %d: allocate %d bytes: %w", a.cfg.Rank, size, lerr)
	}
	if err == nil {
		err = checkOrder(rs, a.cfg.Rank)
	}
	var b *Buffer
	if err == nil {
		b, err = a.open(r, rs, size, seq)
	}
	if err != nil {
		if r != nil {
			a.mu.Lock()
			a.pool[lay.total] = append(a.pool[lay.total], r)
			a.mu.Unlock()
		}
		return nil, err
	}
	return b, nil
}

// open maps every peer's part of an allocation on this rank.
func (a *Allocator) open(own *raw, rs []record, size int64, seq uint64) (*Buffer, error) {
	n := a.cfg.Size
	b := &Buffer{a: a, own: own, Size: size, Seq: seq,
		Data: make([]uint64, n), Scratch: make([]uint64, n), BarrierIn: make([]uint64, n), BarrierMid: make([]uint64, n), BarrierOut: make([]uint64, n)}
	lay := own.lay
	err := func() error {
		for q, x := range rs {
			var base uint64
			switch {
			case q == a.cfg.Rank:
				base = uint64(own.ptr)
			case x.pid == int64(a.pid):
				// Same process (threaded session): one address space; the
				// pointer works once peer access is on (or on the same GPU).
				if int(x.ordinal) != a.cfg.Ordinal && !a.peerOn[int(x.ordinal)] {
					if err := a.cfg.Memory.EnablePeer(int(x.ordinal)); err != nil {
						return err
					}
					a.peerOn[int(x.ordinal)] = true
				}
				base = x.ptr
			default:
				a.mu.Lock()
				p, ok := a.opened[x.handle]
				a.mu.Unlock()
				if !ok {
					op, err := a.cfg.Memory.Open(x.handle)
					if err != nil {
						return fmt.Errorf("open rank %d's IPC handle: %w", q, err)
					}
					p = cuda.DevicePtr(op)
					a.mu.Lock()
					a.opened[x.handle] = p
					a.mu.Unlock()
				}
				base = uint64(p)
			}
			b.Data[q] = base + uint64(lay.data)
			b.Scratch[q] = base + uint64(lay.scratch)
			b.BarrierIn[q] = base + uint64(lay.barIn)
			b.BarrierMid[q] = base + uint64(lay.barMid)
			b.BarrierOut[q] = base + uint64(lay.barOut)
		}
		return nil
	}()
	if err != nil {
		return nil, fmt.Errorf("ipc: rank %d: %w", a.cfg.Rank, err)
	}
	b.Counters = uint64(own.ptr) + uint64(lay.counters)
	a.mu.Lock()
	a.live[b.Data[a.cfg.Rank]] = b
	a.mu.Unlock()
	return b, nil
}

// Lookup finds the live IPC allocation whose data region holds the device
// address p, and p's offset in it.
func (a *Allocator) Lookup(p uint64) (*Buffer, int64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for base, b := range a.live {
		if p >= base && p < base+uint64(max(b.Size, 1)) {
			return b, int64(p - base), true
		}
	}
	return nil, 0, false
}

// Free returns b's memory to this rank's pool (not to the driver: peers
// keep their mappings until Close). Safe from any goroutine; a second
// Free is a no-op.
func (a *Allocator) Free(b *Buffer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.freed || a.closed {
		return
	}
	b.freed = true
	delete(a.live, b.Data[a.cfg.Rank])
	a.pool[b.own.lay.total] = append(a.pool[b.own.lay.total], b.own)
}

// Stats counts this rank's allocations.
type Stats struct {
	Allocations int   // device allocations made
	Pooled      int   // of those, free in the pool
	Live        int   // Buffers not freed
	Bytes       int64 // device bytes held
	PeerMapped  int   // peer allocations opened here
}

func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Stats{Allocations: len(a.all), Live: len(a.live), PeerMapped: len(a.opened)}
	for _, r := range a.all {
		s.Bytes += r.lay.total
	}
	for _, f := range a.pool {
		s.Pooled += len(f)
	}
	return s
}

// Close unmaps peers' memory and frees this rank's. Every rank must call
// it (after its last collective on this memory); it waits for all ranks
// first, so no peer still reads memory that is freed.
func (a *Allocator) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	var errs []error
	m := a.cfg.Memory
	if err := m.Sync(); err != nil {
		errs = append(errs, err)
	}
	if err := a.cfg.Control.Barrier(ctx); err != nil {
		errs = append(errs, fmt.Errorf("ipc: rank %d: close: waiting for peers: %w", a.cfg.Rank, err))
	}
	for _, p := range a.opened {
		errs = append(errs, m.Close(uint64(p)))
	}
	for _, r := range a.all {
		errs = append(errs, m.Free(uint64(r.ptr)))
	}
	if len(a.peerOn) > 0 {
		errs = append(errs, m.ReleasePeers())
	}
	a.opened, a.all, a.pool, a.live = nil, nil, nil, nil
	return errors.Join(errs...)
}

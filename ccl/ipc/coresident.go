package ipc

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/gpu/cuda"
)

// Ranks that share a GPU (docs/ipc.md, "Ranks sharing a GPU").
//
// A kernel whose blocks spin until a peer's blocks arrive (every barrier
// of kernels.cu, every wait of a plan kernel) needs those peer blocks to
// run at the same time. Between GPUs they always do. On one GPU:
//
//   - Without the MPS daemon the processes' contexts time-slice: a
//     spinning kernel holds the GPU until its slice ends, then the peer's
//     context runs. Calls complete, slowly (milliseconds a call), and no
//     grid size matters.
//   - Under MPS the ranks' kernels run side by side with no time-slicing
//     between them: if one rank's grid fills the multiprocessors, the
//     peer's blocks it waits for are never scheduled, and the call waits
//     for its timeout. Nor may the waiting grids of some ranks leave the
//     other ranks no whole multiprocessor: a rank reaches its all-reduce
//     only after its own kernels before it (a decoder's products: 512
//     threads and up to 160 KiB of shared memory a block) ran, and those
//     need room beside the waiting blocks. So every rank's spinning grid
//     has at most one block per multiprocessor of its share (the
//     device's multiprocessors / ranks on it, and at most the SMs its
//     context may use where the driver reports an execution affinity: a
//     context made with one; driver 580 reports none for
//     CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, docs/ipc.md). The blocks of k-1
//     waiting ranks then touch at most (k-1)/k of the multiprocessors.
//     With occupancy x share blocks a rank (the cap before), 2 ranks of
//     Llama-3-8B's tensor-parallel decode on one H200 timed out in 5 of
//     5 runs (the all-reduce's blocks on every multiprocessor, the peer's
//     product waiting for room); with one a multiprocessor, 4 of 4 ran.

// ErrNotCoResident is wrapped by the error for ranks that share a GPU
// under MPS when not even one block of each rank's kernel fits at once.
var ErrNotCoResident = fmt.Errorf("%w: the ranks sharing a GPU cannot run their kernels at the same time", ccl.ErrBadArgs)

// GPUShare is what a rank tells its peers about its GPU.
type GPUShare struct {
	UUID [16]byte // the device (all zero: unknown, shared with nobody)
	MPS  bool     // contexts on the device are shared through the MPS daemon
	// SMs is the device's multiprocessor count, ActiveSMs those this
	// rank's context may use (0: all).
	SMs, ActiveSMs int
	// BlocksPerSM is the occupancy of the rank's spinning kernels at
	// their launch shape (the least over them).
	BlocksPerSM int
}

// Sharing is how the ranks are placed on GPUs.
type Sharing struct {
	// PerGPU[q] is the number of ranks on rank q's GPU (1: alone).
	PerGPU []int
	// MPS: some GPU is shared by several ranks and all of them run under
	// MPS; TimeSliced: some GPU is shared and a rank on it is not under
	// MPS (its contexts time-slice).
	MPS, TimeSliced bool
	// Blocks is the most blocks a spinning grid of any rank may have so
	// that the grids of every rank sharing a GPU under MPS are resident
	// together and leave each rank whole multiprocessors for its other
	// kernels: one a multiprocessor of its share; 0 when no GPU is shared
	// under MPS (no limit).
	Blocks int
}

// Shared reports whether some GPU holds several ranks.
func (s Sharing) Shared() bool { return s.MPS || s.TimeSliced }

// OneGPU reports whether every rank runs on rank me's GPU (one rank
// alone, or all of them sharing it). Kernels then meet their peers with
// GPU-scope accesses: every rank's multiprocessors meet in that GPU's L2.
func (s Sharing) OneGPU(me int) bool {
	return me >= 0 && me < len(s.PerGPU) && s.PerGPU[me] == len(s.PerGPU)
}

// PlaceRanks works out the placement from every rank's GPUShare (the
// same on every rank, so every rank computes the same limit). It fails
// with ErrNotCoResident, naming the GPU's ranks, when ranks share a GPU
// under MPS and one of them cannot have even one block resident.
func PlaceRanks(gs []GPUShare) (Sharing, error) {
	s := Sharing{PerGPU: make([]int, len(gs))}
	key := func(q int) any {
		if gs[q].UUID == ([16]byte{}) {
			return q // unknown device: alone
		}
		return gs[q].UUID
	}
	on := map[any][]int{}
	for q := range gs {
		on[key(q)] = append(on[key(q)], q)
	}
	var errs []error
	for q := range gs {
		ranks := on[key(q)]
		k := len(ranks)
		s.PerGPU[q] = k
		if k == 1 {
			continue
		}
		mps := true
		for _, p := range ranks {
			mps = mps && gs[p].MPS
		}
		if !mps {
			s.TimeSliced = true
			continue
		}
		s.MPS = true
		g := gs[q]
		sms := g.SMs / k
		if g.ActiveSMs > 0 {
			sms = min(sms, g.ActiveSMs)
		}
		// One block a multiprocessor of the share (see the top of this file).
		if g.BlocksPerSM < 1 || sms < 1 {
			errs = append(errs, fmt.Errorf("%w: rank %d shares its GPU with ranks %v under MPS: %d blocks of its kernel fit per multiprocessor and it may use %d of %d multiprocessors (%d ranks on the GPU); run fewer ranks per GPU or raise CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
				ErrNotCoResident, q, ranks, g.BlocksPerSM, g.ActiveSMs, g.SMs, k))
			continue
		}
		if s.Blocks == 0 || sms < s.Blocks {
			s.Blocks = sms
		}
	}
	if len(errs) > 0 {
		return s, errors.Join(errs...)
	}
	return s, nil
}

// shareDriver is what DescribeGPU asks of the driver.
type shareDriver interface {
	DeviceAttribute(dev cuda.Device, attr int) (int, error)
	DeviceUUID(dev cuda.Device) ([16]byte, error)
	CtxSMCount() (int, error)
	OccupancyMaxActiveBlocksPerMultiprocessor(f cuda.Function, blockSize int, sharedBytes int64) (int, error)
}

// Kernel is a loaded kernel and its launch shape, for DescribeGPU.
type Kernel struct {
	Fn      cuda.Function
	Threads int
}

// DescribeGPU is this rank's GPUShare: dev's UUID and multiprocessors,
// whether it is under MPS (a driver without the attribute counts as no
// MPS), the SMs the current context may use, and the least occupancy of
// the kernels. Call it on the device's thread with its context current.
func DescribeGPU(d shareDriver, dev cuda.Device, kernels []Kernel) (GPUShare, error) {
	var g GPUShare
	var err error
	if g.UUID, err = d.DeviceUUID(dev); err != nil {
		return g, err
	}
	if g.SMs, err = d.DeviceAttribute(dev, cuda.AttrMultiprocessorCount); err != nil {
		return g, err
	}
	if v, err := d.DeviceAttribute(dev, cuda.AttrMPSEnabled); err == nil {
		g.MPS = v != 0
	}
	if n, err := d.CtxSMCount(); err == nil && n > 0 && n < g.SMs {
		g.ActiveSMs = n
	}
	for i, k := range kernels {
		n, err := d.OccupancyMaxActiveBlocksPerMultiprocessor(k.Fn, k.Threads, 0)
		if err != nil {
			return g, err
		}
		if i == 0 || n < g.BlocksPerSM {
			g.BlocksPerSM = n
		}
	}
	return g, nil
}

// Encode writes g into 24 bytes: uuid, flags, SMs, active SMs, blocks
// per SM.
func (g GPUShare) Encode(b []byte) {
	clear(b[:GPUShareBytes])
	copy(b[:16], g.UUID[:])
	if g.MPS {
		b[16] = 1
	}
	putU16(b[18:], g.SMs)
	putU16(b[20:], g.ActiveSMs)
	putU16(b[22:], g.BlocksPerSM)
}

// GPUShareBytes is the size of an encoded GPUShare.
const GPUShareBytes = 24

// DecodeGPUShare reads what Encode wrote.
func DecodeGPUShare(b []byte) GPUShare {
	var g GPUShare
	copy(g.UUID[:], b[:16])
	g.MPS = b[16] != 0
	g.SMs, g.ActiveSMs, g.BlocksPerSM = getU16(b[18:]), getU16(b[20:]), getU16(b[22:])
	return g
}

func putU16(b []byte, v int) {
	v = min(max(v, 0), 0xffff)
	b[0], b[1] = byte(v), byte(v>>8)
}

func getU16(b []byte) int { return int(b[0]) | int(b[1])<<8 }

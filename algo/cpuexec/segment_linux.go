package cpuexec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/internal/sys/segment"
	"github.com/chorus-rt/chorus/internal/sys/shmem"
)

// Control segment layout. Every field that different ranks write sits on
// its own 64-byte line; the per-rank blocks are 512 bytes apart.
const (
	magic   = 0x43455845_4e414c50 // "PLANEXEC"
	version = 1

	hdrSize   = 4096
	rankBlock = 512
	slotSize  = 64

	offMagic   = 0
	offVersion = 8
	offRanks   = 12
	offSlots   = 16
	offHash    = 32  // [32]byte plan hash
	offJoined  = 128 // u32: ranks that mapped the segment
	offFailed  = 256 // u32: non-zero once a call failed
	offFailBy  = 260 // u32: 1 + the rank that failed first

	// per-rank block
	rbArrive   = 0   // u64: barriers this rank arrived at
	rbBell     = 64  // u32: futex word, bumped to wake the rank's waiters
	rbSleepers = 128 // u32: the rank's goroutines asleep on the bell
	rbDesc     = 192 // two descriptors (call parity), descBytes each
	descBytes  = 64
)

// ctlSegment is one rank's mapping of the control segment.
type ctlSegment struct {
	mem    []byte
	n      int
	slots0 int // offset of the slot area
}

func ctlSize(n, nslots int) int { return hdrSize + n*rankBlock + nslots*slotSize }

func (s *ctlSegment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s *ctlSegment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }
func (s *ctlSegment) rb(r int) int        { return hdrSize + r*rankBlock }
func (s *ctlSegment) arrive(r int) *uint64 {
	return s.u64(s.rb(r) + rbArrive)
}
func (s *ctlSegment) bell(r int) *uint32     { return s.u32(s.rb(r) + rbBell) }
func (s *ctlSegment) sleepers(r int) *uint32 { return s.u32(s.rb(r) + rbSleepers) }
func (s *ctlSegment) desc(r, parity int) []byte {
	off := s.rb(r) + rbDesc + parity*descBytes
	return s.mem[off : off+descBytes]
}
func (s *ctlSegment) slot(i int) *uint64 { return s.u64(s.slots0 + i*slotSize) }

// ring wakes rank r's sleeping goroutines. A sleeper announces itself
// before its last check of its condition and the writer published before
// it reads the count, so one of the two sees the other.
func (s *ctlSegment) ring(r int) {
	if atomic.LoadUint32(s.sleepers(r)) != 0 {
		atomic.AddUint32(s.bell(r), 1)
		shmem.FutexWake(s.bell(r))
	}
}

func (s *ctlSegment) failed() bool { return atomic.LoadUint32(s.u32(offFailed)) != 0 }

// failedBy is the rank that failed first (-1 if unknown).
func (s *ctlSegment) failedBy() int { return int(atomic.LoadUint32(s.u32(offFailBy))) - 1 }

// fail marks the executor failed and wakes every rank.
func (s *ctlSegment) fail(rank int) {
	atomic.CompareAndSwapUint32(s.u32(offFailBy), 0, uint32(rank+1))
	atomic.StoreUint32(s.u32(offFailed), 1)
	for r := range s.n {
		atomic.AddUint32(s.bell(r), 1)
		shmem.FutexWake(s.bell(r))
	}
}

func (s *ctlSegment) close() error {
	if s.mem == nil {
		return nil
	}
	err := shmem.Unmap(s.mem)
	s.mem = nil
	return err
}

func segmentPath(id []byte) string { return segment.Path("chorus-plan-", id) }

// createFile, awaitFile and mapFile are the shared rendezvous
// (internal/sys/segment) with this package's errors.
func createFile(path string, size int, hdr []byte) (*os.File, error) {
	f, err := segment.Create(path, size, hdr)
	if err != nil {
		return nil, fmt.Errorf("cpuexec: %w", err)
	}
	return f, nil
}

func awaitFile(ctx context.Context, path string, deadline time.Time, what string) (*os.File, error) {
	f, err := segment.Await(ctx, path, deadline, ccl.ErrTimeout, what)
	if err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("cpuexec: %w", err)
	}
	return f, err
}

func mapFile(f *os.File, size int) ([]byte, error) {
	mem, err := segment.Map(f, size)
	if errors.Is(err, segment.ErrSize) {
		return nil, fmt.Errorf("cpuexec: %w (ranks disagree on the plan or sizes)", err)
	}
	return mem, err
}

// openControl creates (rank 0) or opens the control segment and checks
// that every rank loaded the same plan. It does not wait for the others.
func openControl(ctx context.Context, cfg ccl.Config, pr *program) (_ *ctlSegment, err error) {
	path := segmentPath(cfg.ID)
	size := ctlSize(cfg.Size, pr.nslots)
	deadline := time.Now().Add(cfg.TimeoutOrDefault())
	var f *os.File
	if cfg.Rank == 0 {
		hdr := make([]byte, 64)
		binary.LittleEndian.PutUint64(hdr[offMagic:], magic)
		binary.LittleEndian.PutUint32(hdr[offVersion:], version)
		binary.LittleEndian.PutUint32(hdr[offRanks:], uint32(cfg.Size))
		binary.LittleEndian.PutUint32(hdr[offSlots:], uint32(pr.nslots))
		copy(hdr[offHash:], pr.hash[:])
		f, err = createFile(path, size, hdr)
	} else {
		f, err = awaitFile(ctx, path, deadline, "the executor segment")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if cfg.Rank == 0 {
		// On an error below, the name goes with it (NewExecutor removes
		// it otherwise).
		defer func() {
			if err != nil {
				os.Remove(path)
			}
		}()
	}
	// Compare the header before trusting the size.
	var hdr [64]byte
	if _, err = f.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf("cpuexec: read segment header: %w", err)
	}
	switch {
	case binary.LittleEndian.Uint64(hdr[offMagic:]) != magic || binary.LittleEndian.Uint32(hdr[offVersion:]) != version:
		return nil, fmt.Errorf("cpuexec: segment %s: bad magic or version", path)
	case int(binary.LittleEndian.Uint32(hdr[offRanks:])) != cfg.Size:
		return nil, fmt.Errorf("%w: rank 0 joined with %d ranks, rank %d with %d", ccl.ErrMismatch, binary.LittleEndian.Uint32(hdr[offRanks:]), cfg.Rank, cfg.Size)
	case string(hdr[offHash:offHash+32]) != string(pr.hash[:]):
		return nil, fmt.Errorf("%w: rank %d loaded a different plan than rank 0", ccl.ErrMismatch, cfg.Rank)
	}
	mem, err := mapFile(f, size)
	if err != nil {
		return nil, err
	}
	return &ctlSegment{mem: mem, n: cfg.Size, slots0: hdrSize + cfg.Size*rankBlock}, nil
}

// dataPath names generation gen of the data segment.
func dataPath(id []byte, gen int) string { return fmt.Sprintf("%s-d%d", segmentPath(id), gen) }

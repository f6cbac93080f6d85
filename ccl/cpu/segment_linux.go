package cpu

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
	shmseg "github.com/chorus-rt/chorus/internal/sys/segment"
	"github.com/chorus-rt/chorus/internal/sys/shmem"
)

// Segment layout. All offsets are multiples of 128 so that words written by
// different ranks never share a cache line.
const (
	magic   = 0x4c43432d43484f52 // "ROHC-CCL"
	version = 2                  // 2: 16-byte descriptors

	hdrSize  = 4096
	ctrlSize = 512 // per rank
	mboxHdr  = 256 // per ordered pair

	// header fields
	offMagic    = 0
	offVersion  = 8
	offRanks    = 12
	offSlot     = 16
	offMbox     = 24
	offJoined   = 128 // u32, ranks that mapped the segment
	offFailed   = 256 // u32, non-zero once the communicator failed
	offBell     = 384 // u32 futex word, bumped after every publication
	offSleepers = 512 // u32, ranks asleep on the bell
	// The first failure's cause, for the ErrFailed of later calls: a
	// claim word (the first rank to fail wins it), then what happened,
	// published by the cause word written last.
	offCauseClaim   = 640 // u32
	offCauseSeq     = 648 // u64: the collective's sequence number
	offCauseMissing = 656 // u64: bit r: rank r had not arrived (ranks < 64)
	offCause        = 664 // u64: 1<<63 | reason<<40 | kind<<32 | rank

	// per-rank control block fields
	ctlArrive = 0 // u64: syncs this rank has arrived at
	// Two descriptors (one per slot parity), 16 bytes each, next to the
	// arrival counter: a peer that sees the counter move has both in the
	// same 64-byte cache line (bytes 8..40 of the control block).
	ctlDesc = 8
	// Single-copy (process_vm_readv) rendezvous, written once at Join on
	// a line of their own: pid, address of a probe word, probe verdict.
	ctlPid   = 128 // u64
	ctlProbe = 136 // u64
	ctlCMA   = 144 // u32: 1 this rank read every peer's probe, 2 it could not
	// Shared tensor arena (internal/sys/shmarena), written once at Join: its
	// descriptor number, size (0: this rank has none) and token, then
	// whether this rank mapped every peer's arena (1) or not (2).
	ctlArenaFD    = 152 // u64
	ctlArenaSize  = 160 // u64
	ctlArenaToken = 168 // u64
	ctlShm        = 176 // u32
	// Buffers published for a single-copy collective (u64 addresses).
	ctlSendAddr = 256
	ctlRecvAddr = 264
	// The same buffers' offsets in this rank's arena, plus one (0: not in
	// the arena).
	ctlSendOff = 272
	ctlRecvOff = 280

	// per-pair mailbox fields (written by the receiver unless noted)
	mbPosted   = 0   // u64: messages the receiver has posted
	mbSize     = 8   // u64: byte size the receiver expects
	mbDType    = 16  // u32: dtype the receiver expects
	mbAccepted = 64  // u64: messages the sender accepted (sender)
	mbRejected = 72  // u64: message the sender rejected (sender)
	mbReady    = 128 // u64: chunks written, cumulative (sender)
	mbAck      = 192 // u64: chunks consumed, cumulative (receiver)
)

// segment is one rank's mapping of the communicator's shared memory.
type segment struct {
	mem       []byte
	n         int
	slotBytes int
	mboxBytes int
	slotsOff  int
	mboxOff   int
}

func segmentSize(n, slot, mbox int) int {
	return hdrSize + n*ctrlSize + 2*n*slot + n*n*(mboxHdr+mbox)
}

func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.mem[off])) }

func (s *segment) ctrl(r int) int { return hdrSize + r*ctrlSize }

// slot returns rank r's slot of parity p.
func (s *segment) slot(p, r int) []byte {
	off := s.slotsOff + (p*s.n+r)*s.slotBytes
	return s.mem[off : off+s.slotBytes : off+s.slotBytes]
}

func (s *segment) mbox(src, dst int) int { return s.mboxOff + (src*s.n+dst)*(mboxHdr+s.mboxBytes) }

func (s *segment) mboxData(src, dst int) []byte {
	off := s.mbox(src, dst) + mboxHdr
	return s.mem[off : off+s.mboxBytes : off+s.mboxBytes]
}

func segmentPath(id []byte) string { return shmseg.Path("chorus-ccl-", id) }

// openSegment creates (rank 0) or opens (others) the segment and waits
// until every rank has mapped it; rank 0 then removes its name.
func openSegment(ctx context.Context, cfg ccl.Config, opts Options) (*segment, error) {
	path := segmentPath(cfg.ID)
	size := segmentSize(cfg.Size, opts.SlotBytes, opts.MailboxBytes)
	deadline := time.Now().Add(cfg.TimeoutOrDefault())
	var f *os.File
	var err error
	if cfg.Rank == 0 {
		f, err = createSegment(path, size, cfg.Size, opts)
	} else {
		f, err = awaitSegment(ctx, path, deadline)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if cfg.Rank == 0 {
		// Rank 0 removes the name once every rank mapped it, and on every
		// error, so a failed join leaves nothing in /dev/shm.
		defer os.Remove(path)
	}
	mem, err := shmseg.Map(f, size)
	if errors.Is(err, shmseg.ErrSize) {
		return nil, fmt.Errorf("ccl/cpu: %w (ranks disagree on size or options)", err)
	}
	if err != nil {
		return nil, err
	}
	s := &segment{mem: mem, n: cfg.Size, slotBytes: opts.SlotBytes, mboxBytes: opts.MailboxBytes}
	s.slotsOff = hdrSize + cfg.Size*ctrlSize
	s.mboxOff = s.slotsOff + 2*cfg.Size*opts.SlotBytes
	if cfg.Rank != 0 {
		if err := s.validate(); err != nil {
			shmem.Unmap(mem)
			return nil, fmt.Errorf("ccl/cpu: segment %s: %w", path, err)
		}
	}
	atomic.AddUint32(s.u32(offJoined), 1)
	s.ring()
	// Everyone waits for everyone; rank 0 then removes the name.
	for atomic.LoadUint32(s.u32(offJoined)) < uint32(cfg.Size) {
		if err := ctx.Err(); err != nil {
			s.fail()
			s.close()
			return nil, err
		}
		if time.Now().After(deadline) {
			s.fail()
			defer s.close() // after the message reads the joined count
			return nil, fmt.Errorf("%w: only %d of %d ranks joined within %v", ccl.ErrTimeout, atomic.LoadUint32(s.u32(offJoined)), cfg.Size, cfg.TimeoutOrDefault())
		}
		v := atomic.LoadUint32(s.u32(offBell))
		atomic.AddUint32(s.u32(offSleepers), 1)
		if atomic.LoadUint32(s.u32(offJoined)) < uint32(cfg.Size) {
			shmem.FutexWait(s.u32(offBell), v, 10*time.Millisecond)
		}
		atomic.AddUint32(s.u32(offSleepers), ^uint32(0))
	}
	return s, nil
}

func createSegment(path string, size, n int, opts Options) (*os.File, error) {
	var h [32]byte
	binary.LittleEndian.PutUint64(h[offMagic:], magic)
	binary.LittleEndian.PutUint32(h[offVersion:], version)
	binary.LittleEndian.PutUint32(h[offRanks:], uint32(n))
	binary.LittleEndian.PutUint64(h[offSlot:], uint64(opts.SlotBytes))
	binary.LittleEndian.PutUint64(h[offMbox:], uint64(opts.MailboxBytes))
	// The name appears only once the header is complete.
	f, err := shmseg.Create(path, size, h[:])
	if err != nil {
		return nil, fmt.Errorf("ccl/cpu: %w", err)
	}
	return f, nil
}

func awaitSegment(ctx context.Context, path string, deadline time.Time) (*os.File, error) {
	f, err := shmseg.Await(ctx, path, deadline, ccl.ErrTimeout, "the communicator segment")
	if err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("ccl/cpu: %w", err)
	}
	return f, err
}

func (s *segment) validate() error {
	h := s.mem
	switch {
	case binary.LittleEndian.Uint64(h[offMagic:]) != magic:
		return errors.New("bad magic")
	case binary.LittleEndian.Uint32(h[offVersion:]) != version:
		return errors.New("unsupported version")
	case int(binary.LittleEndian.Uint32(h[offRanks:])) != s.n:
		return fmt.Errorf("made for %d ranks, this rank says %d", binary.LittleEndian.Uint32(h[offRanks:]), s.n)
	case int(binary.LittleEndian.Uint64(h[offSlot:])) != s.slotBytes || int(binary.LittleEndian.Uint64(h[offMbox:])) != s.mboxBytes:
		return errors.New("ranks disagree on slot or mailbox sizes")
	}
	return nil
}

// ring wakes sleepers after a publication. A sleeper announces itself
// (sleepers++) before its last check of the condition, and the publisher
// published before it reads sleepers, so one of them sees the other: the
// bell is bumped only when someone may be asleep, keeping the shared word
// off the fast path.
func (s *segment) ring() {
	if atomic.LoadUint32(s.u32(offSleepers)) != 0 {
		atomic.AddUint32(s.u32(offBell), 1)
		shmem.FutexWake(s.u32(offBell))
	}
}

func (s *segment) failed() bool { return atomic.LoadUint32(s.u32(offFailed)) != 0 }

func (s *segment) fail() {
	atomic.StoreUint32(s.u32(offFailed), 1)
	s.ring()
}

// Reasons a rank failed the communicator.
const (
	causeTimeout  = 1 // ranks never arrived
	causeCanceled = 2 // the rank's context ended (its worker was aborted)
	causeCopy     = 3 // a single-copy read of a peer failed
	causeMid      = 4 // AllReduceSplit's mid failed
)

// failWith records why rank failed the communicator (when it is the
// first to), then fails it.
func (s *segment) failWith(rank int, kind ccl.Kind, seq uint64, reason uint64, missing []int) {
	if atomic.CompareAndSwapUint32(s.u32(offCauseClaim), 0, 1) {
		var mask uint64
		for _, r := range missing {
			if r < 64 {
				mask |= 1 << r
			}
		}
		atomic.StoreUint64(s.u64(offCauseSeq), seq)
		atomic.StoreUint64(s.u64(offCauseMissing), mask)
		atomic.StoreUint64(s.u64(offCause), 1<<63|reason<<40|uint64(kind)<<32|uint64(uint32(rank)))
	}
	s.fail()
}

// cause describes the first failure, or "" if none was recorded.
func (s *segment) cause() string {
	v := atomic.LoadUint64(s.u64(offCause))
	if v == 0 {
		return ""
	}
	rank, kind, reason := int(uint32(v)), ccl.Kind(v>>32&0xff), v>>40&0xff
	seq := atomic.LoadUint64(s.u64(offCauseSeq))
	switch reason {
	case causeTimeout:
		mask := atomic.LoadUint64(s.u64(offCauseMissing))
		var m []int
		for r := range 64 {
			if mask&(1<<r) != 0 {
				m = append(m, r)
			}
		}
		return fmt.Sprintf("rank %d timed out in %s #%d waiting for ranks %v", rank, kind, seq, m)
	case causeCanceled:
		return fmt.Sprintf("rank %d was canceled in %s #%d", rank, kind, seq)
	case causeCopy:
		return fmt.Sprintf("rank %d could not read a peer's buffer in %s #%d", rank, kind, seq)
	case causeMid:
		return fmt.Sprintf("rank %d's work between the halves of %s #%d failed", rank, kind, seq)
	}
	return fmt.Sprintf("rank %d failed in %s #%d", rank, kind, seq)
}

func (s *segment) close() error {
	if s.mem == nil {
		return nil
	}
	err := shmem.Unmap(s.mem)
	s.mem = nil
	return err
}

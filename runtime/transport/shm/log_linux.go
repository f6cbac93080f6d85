package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
	"github.com/chorus-rt/chorus/runtime/transport"
)

// Log segment layout. All offsets are from the start of the mapping, which
// is page aligned.
//
//	0      header: magic u64, version u32, consumers u32, slots u64,
//	       total u64, spin u64, id u64, yield u32
//	128    producer line: prodClosed u32, prodWaiting u32, spaceSeq u32
//	       (futex the producer sleeps on while the log is full)
//	256    consumer i at 256 + i*256: pos u64 (slots consumed, free
//	       running; the consumer's own line), then at +128 waiting u32,
//	       dataSeq u32 (futex the consumer sleeps on), closed u32,
//	       attached u32 (written rarely, read by the producer on every
//	       publication)
//	slotsOff (page aligned) slots of 128 bytes
//
// An entry fills one or more consecutive slots (wrapping around). Every
// slot begins with a tag word: the entry's sequence number (from 1) in its
// first slot, 0 in the others. A consumer that waits for entry s polls the
// tag of the slot where s will begin: stale slots hold smaller sequence
// numbers or 0, never s, so whatever the producer wrote there before
// (also the payload of a longer entry of an earlier lap) cannot be taken
// for it. The first slot continues with to i32 (the consumer index, or
// LogAll) and n u32 (the payload length, or logRedirect) and the first
// payload bytes; later slots hold payload after their tag.
const (
	logMagic   = 0x31474f4c53524843 // "CHRSLOG1"
	logVersion = 1

	lgMagic     = 0
	lgVersion   = 8
	lgConsumers = 12
	lgSlots     = 16
	lgTotal     = 24
	lgSpin      = 32
	lgID        = 40
	lgYield     = 48

	lgProdClosed  = 128
	lgProdWaiting = 132
	lgSpaceSeq    = 136

	lgCons      = 256
	consSize    = 256
	consPos     = 0
	consWaiting = 128
	consDataSeq = 132
	consClosed  = 136
	consAttach  = 140

	slotSize  = 128
	firstHead = 16 // tag, to, n
	contHead  = 8  // tag

	// maxEntrySlots bounds one entry; larger frames go through the
	// consumers' own connections (PutRedirect).
	maxEntrySlots = 8

	// logRedirect in n: the frame is the next one on the consumer's own
	// connection.
	logRedirect = 1<<32 - 1
)

// Log limits.
const (
	// LogMaxInline is the largest frame a log entry holds (eight slots).
	LogMaxInline = slotSize - firstHead + (maxEntrySlots-1)*(slotSize-contHead)
	// LogSlots is the number of 128-byte slots of a log: 1 MiB, at
	// least 1024 entries of the largest kind and 8192 of the usual (a
	// session command is one slot). A controller that runs further ahead
	// of a worker waits for it, as it would for a full ring (whose 1 MiB
	// holds about as many commands).
	LogSlots = 8192
	// MaxLogConsumers bounds the consumers of one log.
	MaxLogConsumers = 4096
	// LogAll addresses an entry to every consumer.
	LogAll = -1
)

// entrySlots is the number of slots an entry with n payload bytes fills.
func entrySlots(n int) uint64 {
	if n <= slotSize-firstHead {
		return 1
	}
	rest := n - (slotSize - firstHead)
	return 1 + uint64((rest+slotSize-contHead-1)/(slotSize-contHead))
}

func logSlotsOff(consumers int) uint64 {
	end := uint64(lgCons + consumers*consSize)
	return (end + 4095) &^ 4095
}

func logSize(consumers int) uint64 { return logSlotsOff(consumers) + LogSlots*slotSize }

// logWords are the shared words of a log segment, seen from either end.
type logWords struct {
	mem         []byte
	slots       []byte
	nslots      uint64
	prodClosed  *uint32
	prodWaiting *uint32
	spaceSeq    *uint32
}

func newLogWords(m []byte, consumers int) logWords {
	off := logSlotsOff(consumers)
	return logWords{
		mem:         m,
		slots:       m[off : off+LogSlots*slotSize : off+LogSlots*slotSize],
		nslots:      LogSlots,
		prodClosed:  u32at(m, lgProdClosed),
		prodWaiting: u32at(m, lgProdWaiting),
		spaceSeq:    u32at(m, lgSpaceSeq),
	}
}

func u32at(m []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }
func u64at(m []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&m[off])) }

// slot returns slot number i (free running) of the log.
func (l *logWords) slot(i uint64) []byte {
	o := (i % l.nslots) * slotSize
	return l.slots[o : o+slotSize : o+slotSize]
}

// consumer is one consumer's shared words.
type consumer struct {
	pos      *uint64
	waiting  *uint32
	dataSeq  *uint32
	closed   *uint32
	attached *uint32
}

func consumerAt(m []byte, i int) consumer {
	b := lgCons + i*consSize
	return consumer{
		pos:      u64at(m, b+consPos),
		waiting:  u32at(m, b+consWaiting),
		dataSeq:  u32at(m, b+consDataSeq),
		closed:   u32at(m, b+consClosed),
		attached: u32at(m, b+consAttach),
	}
}

// LogWriter is the producer's end of a broadcast log: one segment that a
// controller appends commands to and that every worker reads, each entry
// addressed to one worker or to all. A broadcast is then one write, which
// every worker's core reads from the same cache line, instead of one
// write per worker's connection (each a cache-line hand-off to that
// worker's core, all of them on the path of every session round).
//
// Put and PutRedirect are for one goroutine at a time; Abort and Close may
// be called from any goroutine, at any time.
type LogWriter struct {
	logWords
	cons     []consumer
	next     uint64 // next free slot (free running)
	seq      uint64 // entries published
	minPos   uint64 // the slowest consumer's position, as last loaded
	slowest  int    // a consumer at minPos
	onWait   func(consumer int) (end func())
	budget   time.Duration
	putCalls guard
	life
	poller
	wakeFn func(*uint32)
	id     uint64
	race   *raceSync
}

// CreateLog makes a log segment for consumers readers and returns the
// producer's end with the segment's memfd, which the caller hands to every
// consumer (OpenLog) and closes once they have it. Options' SpinDuration
// and Yield apply to every waiter of the log; RingSize is not used.
func CreateLog(consumers int, opts Options) (w *LogWriter, memfd *os.File, err error) {
	if consumers < 1 || consumers > MaxLogConsumers {
		return nil, nil, fmt.Errorf("shm: CreateLog: %d consumers (want 1 to %d)", consumers, MaxLogConsumers)
	}
	_, spin, err := opts.normalize()
	if err != nil {
		return nil, nil, err
	}
	total := logSize(consumers)
	m, f, err := newSegment("chorus-shm-log", total)
	if err != nil {
		return nil, nil, err
	}
	id := rand.Uint64()
	binary.LittleEndian.PutUint32(m[lgVersion:], logVersion)
	binary.LittleEndian.PutUint32(m[lgConsumers:], uint32(consumers))
	binary.LittleEndian.PutUint64(m[lgSlots:], LogSlots)
	binary.LittleEndian.PutUint64(m[lgTotal:], total)
	binary.LittleEndian.PutUint64(m[lgSpin:], uint64(spin))
	binary.LittleEndian.PutUint64(m[lgID:], id)
	if opts.Yield {
		binary.LittleEndian.PutUint32(m[lgYield:], 1)
	}
	atomic.StoreUint64(u64at(m, lgMagic), logMagic)
	w = &LogWriter{
		logWords: newLogWords(m, consumers),
		budget:   spin,
		poller:   poller{spin: spin, yield: opts.Yield, pauses: shmem.RelaxPauses(1)},
		id:       id,
		race:     raceAttach(id),
	}
	for i := range consumers {
		w.cons = append(w.cons, consumerAt(m, i))
	}
	w.wakeFn = w.wakeWord
	return w, f, nil
}

// OnWait sets f, which a Put that must wait for space calls first, with
// the slowest consumer (the one it waits for); the func f returns (if not
// nil) is called when the wait ends. Its owner uses it to put that wait
// under a deadline: Abort ends it. Not for use during a Put.
func (w *LogWriter) OnWait(f func(consumer int) (end func())) { w.onWait = f }

// Put appends frame (at most LogMaxInline bytes) for consumer to, or for
// every consumer (LogAll), and wakes the consumers that sleep. It waits
// while the log is full. On failure it returns the index of the consumer
// that caused it (one that closed its end, or corrupted its position), or
// -1.
func (w *LogWriter) Put(to int, frame []byte) (int, error) {
	if len(frame) > LogMaxInline {
		return -1, fmt.Errorf("%w: %d bytes in a log entry (max %d)", transport.ErrFrameTooLarge, len(frame), LogMaxInline)
	}
	return w.put(to, frame, uint32(len(frame)))
}

// PutRedirect appends an entry that tells consumer to (or every consumer)
// that its next frame comes through its own connection: for frames larger
// than LogMaxInline, which the producer sends there after this call, so
// that a frame larger than that connection's ring is read while it is
// written.
func (w *LogWriter) PutRedirect(to int) (int, error) { return w.put(to, nil, logRedirect) }

func (w *LogWriter) put(to int, frame []byte, n uint32) (int, error) {
	if to < LogAll || to >= len(w.cons) {
		return -1, fmt.Errorf("shm: log entry for consumer %d of %d", to, len(w.cons))
	}
	if !w.enter(&w.putCalls) {
		return -1, transport.ErrClosed
	}
	defer w.putCalls.n.Add(-1)
	if p := w.abortErr.Load(); p != nil {
		return -1, *p
	}
	k := entrySlots(len(frame))
	if i, err := w.reserve(k); err != nil {
		return i, err
	}
	first := w.slot(w.next)
	rest := frame[min(len(frame), slotSize-firstHead):]
	for j := uint64(1); j < k; j++ {
		s := w.slot(w.next + j)
		storeRelease(u64at(s, 0), 0)
		rest = rest[copy(s[contHead:], rest):]
	}
	binary.LittleEndian.PutUint32(first[8:], uint32(int32(to)))
	binary.LittleEndian.PutUint32(first[12:], n)
	copy(first[firstHead:], frame)
	w.seq++
	w.race.release(0)
	// The tag last: a consumer that sees it sees the entry (TSO on
	// amd64, a release store elsewhere).
	storeRelease(u64at(first, 0), w.seq)
	w.next += k
	// No fence between the store and the loads (Conn.wait says why that
	// is safe): a consumer that announced itself before is woken.
	for i := range w.cons {
		if atomic.LoadUint32(w.cons[i].waiting) != 0 {
			bump(w.cons[i].dataSeq)
		}
	}
	return -1, nil
}

// reserve waits until k slots past next are free.
func (w *LogWriter) reserve(k uint64) (int, error) {
	if w.next+k-w.minPos <= w.nslots {
		return -1, nil
	}
	if i, err := w.loadMin(); err != nil {
		return i, err
	}
	if w.next+k-w.minPos <= w.nslots {
		return -1, nil
	}
	if w.onWait != nil {
		if end := w.onWait(w.slowest); end != nil {
			defer end()
		}
	}
	bad := -1
	ready := func() bool {
		i, err := w.loadMin()
		if err != nil {
			bad = i
			return true
		}
		return w.next+k-w.minPos <= w.nslots
	}
	check := func() error {
		if w.closed.Load() {
			return transport.ErrClosed
		}
		if p := w.abortErr.Load(); p != nil {
			return *p
		}
		for i := range w.cons {
			if atomic.LoadUint32(w.cons[i].closed) != 0 {
				bad = i
				return fmt.Errorf("%w: log consumer %d closed its end", transport.ErrPeerGone, i)
			}
		}
		return nil
	}
	if err := w.wait(&w.budget, w.spaceSeq, w.prodWaiting, ready, check, nil, w.wakeFn); err != nil {
		return bad, err
	}
	return w.loadMin()
}

// loadMin refreshes the slowest consumer's position.
func (w *LogWriter) loadMin() (int, error) {
	m, slow := w.next, 0
	for i := range w.cons {
		p := atomic.LoadUint64(w.cons[i].pos)
		if p > w.next || p < w.minPos {
			return i, fmt.Errorf("%w (log consumer %d)", errCorrupt, i)
		}
		if p < m {
			m, slow = p, i
		}
	}
	w.minPos, w.slowest = m, slow
	return -1, nil
}

func (w *LogWriter) wakeAll() {
	bump(w.spaceSeq)
	for i := range w.cons {
		bump(w.cons[i].dataSeq)
	}
}

// Abort makes a blocked and every later Put return an error wrapping
// transport.ErrPeerGone and err, and tells the consumers that no entry
// follows the ones published (they read those first).
func (w *LogWriter) Abort(err error) {
	first, leave := w.abort(err, "log")
	if !first {
		return
	}
	defer leave()
	atomic.StoreUint32(w.prodClosed, 1)
	w.wakeAll()
}

// Close marks the log closed for the consumers (they read the entries
// published before, then get transport.ErrPeerGone), waits for calls in
// flight (a blocked Put returns transport.ErrClosed) and unmaps the
// segment. A second Close returns nil.
func (w *LogWriter) Close() error {
	if !w.closed.CompareAndSwap(false, true) {
		return nil
	}
	w.wakeAll()
	w.drain(&w.putCalls)
	atomic.StoreUint32(w.prodClosed, 1)
	w.wakeAll()
	raceDetach(w.id, w.race)
	m := w.mem
	w.logWords = logWords{}
	w.cons = nil
	if err := syscall.Munmap(m); err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}

// LogReader is one consumer's end of a log.
//
// Next is for one goroutine at a time; Abort and Close may be called from
// any goroutine, at any time.
type LogReader struct {
	logWords
	me        consumer
	index     int32
	next      uint64 // slot of the next entry (free running)
	seq       uint64 // entries consumed
	buf       []byte
	budget    time.Duration
	nextCalls guard
	life
	poller
	wakeFn func(*uint32)
	id     uint64
	race   *raceSync
}

// OpenLog attaches consumer index to a log made by CreateLog. It takes
// ownership of f and closes it before returning. It validates the segment
// and returns an error, never a fault, for a file that is not a sealed
// log of the expected layout. Each consumer index can be opened once.
func OpenLog(f *os.File, index int) (*LogReader, error) {
	if f == nil {
		return nil, errors.New("shm: OpenLog: nil file")
	}
	defer f.Close()
	var h [64]byte
	size, err := readSegment(f, h[:], int64(len(h)), "log")
	if err != nil {
		return nil, err
	}
	if got := binary.LittleEndian.Uint64(h[lgMagic:]); got != logMagic {
		return nil, fmt.Errorf("shm: bad log magic %#x", got)
	}
	if got := binary.LittleEndian.Uint32(h[lgVersion:]); got != logVersion {
		return nil, fmt.Errorf("shm: log version %d, want %d", got, logVersion)
	}
	consumers := int(binary.LittleEndian.Uint32(h[lgConsumers:]))
	slots := binary.LittleEndian.Uint64(h[lgSlots:])
	total := binary.LittleEndian.Uint64(h[lgTotal:])
	spin := time.Duration(binary.LittleEndian.Uint64(h[lgSpin:]))
	switch {
	case consumers < 1 || consumers > MaxLogConsumers:
		return nil, fmt.Errorf("shm: bad log consumer count %d", consumers)
	case index < 0 || index >= consumers:
		return nil, fmt.Errorf("shm: log consumer %d of %d", index, consumers)
	case slots != LogSlots:
		return nil, fmt.Errorf("shm: log has %d slots, want %d", slots, LogSlots)
	case total != logSize(consumers) || uint64(size) != total:
		return nil, fmt.Errorf("shm: log size %d does not match header (%d)", size, total)
	case spin < 0 || spin > MaxSpin:
		return nil, fmt.Errorf("shm: bad spin duration %v", spin)
	}
	m, err := mapSegment(f, total)
	if err != nil {
		return nil, err
	}
	me := consumerAt(m, index)
	if !atomic.CompareAndSwapUint32(me.attached, 0, 1) {
		syscall.Munmap(m)
		return nil, fmt.Errorf("shm: log consumer %d already opened", index)
	}
	id := binary.LittleEndian.Uint64(h[lgID:])
	r := &LogReader{
		logWords: newLogWords(m, consumers),
		me:       me,
		index:    int32(index),
		budget:   spin,
		poller:   poller{spin: spin, yield: binary.LittleEndian.Uint32(h[lgYield:]) != 0, pauses: shmem.RelaxPauses(1)},
		id:       id,
		race:     raceAttach(id),
	}
	// Resume where this consumer's position says (0 for a new log).
	r.next = atomic.LoadUint64(me.pos)
	if r.next != 0 {
		syscall.Munmap(m)
		raceDetach(id, r.race)
		return nil, fmt.Errorf("shm: log consumer %d was used before", index)
	}
	r.wakeFn = r.wakeWord
	return r, nil
}

// Next returns the next entry addressed to this consumer: its frame, in a
// buffer that the next call reuses, or, for an entry made by PutRedirect,
// redirect true (the frame is the next one on this consumer's own
// connection). Entries for other consumers are passed over. It returns
// ctx.Err() if ctx is done before an entry has arrived, and an error
// wrapping transport.ErrPeerGone once the producer closed or aborted the
// log and every entry published before has been read.
func (r *LogReader) Next(ctx context.Context) (frame []byte, redirect bool, err error) {
	if !r.enter(&r.nextCalls) {
		return nil, false, transport.ErrClosed
	}
	defer r.nextCalls.n.Add(-1)
	if ctx == nil {
		ctx = context.Background()
	}
	for {
		if p := r.abortErr.Load(); p != nil {
			return nil, false, *p
		}
		first := r.slot(r.next)
		tag := u64at(first, 0)
		if atomic.LoadUint64(tag) != r.seq+1 {
			if err := r.waitEntry(ctx, tag); err != nil {
				return nil, false, err
			}
			continue
		}
		r.race.acquire(0)
		to := int32(binary.LittleEndian.Uint32(first[8:]))
		n := binary.LittleEndian.Uint32(first[12:])
		redirect = n == logRedirect
		size := 0
		if !redirect {
			if n > LogMaxInline {
				err := fmt.Errorf("%w: log entry of %d bytes (max %d)", errCorrupt, n, LogMaxInline)
				r.abortErr.CompareAndSwap(nil, &err)
				return nil, false, err
			}
			size = int(n)
		}
		k := entrySlots(size)
		mine := to == LogAll || to == r.index
		if mine && !redirect {
			r.buf = append(r.buf[:0], first[firstHead:firstHead+min(size, slotSize-firstHead)]...)
			for j := uint64(1); j < k; j++ {
				s := r.slot(r.next + j)
				left := size - len(r.buf)
				r.buf = append(r.buf, s[contHead:contHead+min(left, slotSize-contHead)]...)
			}
		}
		r.seq++
		r.next += k
		// The position tells the producer these slots are free: only
		// after the payload was copied out.
		storeRelease(r.me.pos, r.next)
		if atomic.LoadUint32(r.prodWaiting) != 0 {
			bump(r.spaceSeq)
		}
		if mine {
			if redirect {
				return nil, true, nil
			}
			return r.buf, false, nil
		}
	}
}

// waitEntry waits until the tag reads the next sequence number.
func (r *LogReader) waitEntry(ctx context.Context, tag *uint64) error {
	want := r.seq + 1
	done := ctx.Done()
	ready := func() bool { return atomic.LoadUint64(tag) == want }
	check := func() error {
		if r.closed.Load() {
			return transport.ErrClosed
		}
		if p := r.abortErr.Load(); p != nil {
			return *p
		}
		if done != nil {
			select {
			case <-done:
				return ctx.Err()
			default:
			}
		}
		if atomic.LoadUint32(r.prodClosed) != 0 {
			// The producer publishes before it sets the flag.
			if ready() {
				return nil
			}
			return errPeerClosed
		}
		return nil
	}
	var wctx context.Context
	if done != nil {
		wctx = ctx
	}
	return r.wait(&r.budget, r.me.dataSeq, r.me.waiting, ready, check, wctx, r.wakeFn)
}

// Abort makes a blocked and every later Next return an error wrapping
// transport.ErrPeerGone and err, and tells the producer this consumer is
// gone (a Put waiting for its slots fails).
func (r *LogReader) Abort(err error) {
	first, leave := r.abort(err, "log")
	if !first {
		return
	}
	defer leave()
	atomic.StoreUint32(r.me.closed, 1)
	bump(r.me.dataSeq)
	bump(r.spaceSeq)
}

// Close marks this consumer gone for the producer, waits for calls in
// flight (a blocked Next returns transport.ErrClosed) and unmaps the
// segment. A second Close returns nil.
func (r *LogReader) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	bump(r.me.dataSeq)
	r.drain(&r.nextCalls)
	atomic.StoreUint32(r.me.closed, 1)
	bump(r.spaceSeq)
	raceDetach(r.id, r.race)
	m := r.mem
	r.logWords = logWords{}
	r.me = consumer{}
	if err := syscall.Munmap(m); err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}

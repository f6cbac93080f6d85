package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
	"github.com/chorus-rt/chorus/runtime/transport"
)

// Segment layout. All offsets are from the start of the mapping, which is
// page aligned; every shared word is naturally aligned.
//
//	0     header: magic u64, version u32, dataOff u32, ringSize u64,
//	      totalSize u64, spinNanos u64, id u64, attached u32
//	128   ring 0 control (controller -> worker), 512 bytes
//	640   ring 1 control (worker -> controller), 512 bytes
//	4096  ring 0 data (ringSize bytes), then ring 1 data
//
// Ring control block, one 128-byte line per group so that the producer's
// and the consumer's hot words never share a cache line:
//
//	+0    tail u64: bytes published by the producer (free-running)
//	+8    ack u64: the producer's latest acknowledgement (Ack), on the
//	      tail's line so that one load tells the consumer about both
//	+128  head u64: bytes consumed by the consumer (free-running)
//	+256  consWaiting u32, prodWaiting u32, prodClosed u32, consClosed u32
//	      (written rarely, read on the fast path)
//	+384  dataSeq u32 (futex the consumer sleeps on), spaceSeq u32 (futex
//	      the producer sleeps on)
//
// A frame in a ring is a little-endian u32 length followed by the payload.
// The producer never publishes part of a length word.
const (
	magic   = 0x314d485353524843 // "CHRSSHM1"
	version = 2

	offMagic    = 0
	offVersion  = 8
	offDataOff  = 12
	offRingSize = 16
	offTotal    = 24
	offSpin     = 32
	offID       = 40
	offAttached = 48
	offYield    = 52

	headerSize = 128
	ctlSize    = 512
	dataOff    = 4096

	ctlTail        = 0
	ctlAck         = 8
	ctlHead        = 128
	ctlConsWaiting = 256
	ctlProdWaiting = 260
	ctlProdClosed  = 264
	ctlConsClosed  = 268
	ctlDataSeq     = 384
	ctlSpaceSeq    = 388

	lenSize = 4

	// sleepSlice bounds one futex sleep, so that a missed notification
	// (there should be none) costs at most this much.
	sleepSlice = 50 * time.Millisecond
	// firstSlice bounds a waiter's first futex sleep after it announced
	// itself: publishers do not fence between their publication and
	// their look at the announcement (see wait), so a publication still
	// in the publisher's store buffer when the waiter re-checked may go
	// unannounced; it is visible long before this, and the waiter's next
	// check finds it.
	firstSlice = 50 * time.Microsecond
	// fastPolls is how many times a waiter checks the index back to back
	// (about a microsecond) before it starts to look at the clock and to
	// let other goroutines run between checks.
	fastPolls = 512
	// minSpin is the least polling budget the adaptation goes down to.
	minSpin = 2 * time.Microsecond
)

func segmentSize(ringSize uint64) uint64 { return dataOff + 2*ringSize }

// ring is one direction of the segment, seen from either end.
type ring struct {
	data        []byte
	size, mask  uint64
	tail, head  *uint64
	ack         *uint64
	consWaiting *uint32
	prodWaiting *uint32
	prodClosed  *uint32
	consClosed  *uint32
	dataSeq     *uint32
	spaceSeq    *uint32
}

func newRing(m []byte, idx int, size uint64) ring {
	ctl := headerSize + idx*ctlSize
	u32 := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&m[ctl+off])) }
	start := dataOff + uint64(idx)*size
	return ring{
		data:        m[start : start+size : start+size],
		size:        size,
		mask:        size - 1,
		tail:        (*uint64)(unsafe.Pointer(&m[ctl+ctlTail])),
		head:        (*uint64)(unsafe.Pointer(&m[ctl+ctlHead])),
		ack:         (*uint64)(unsafe.Pointer(&m[ctl+ctlAck])),
		consWaiting: u32(ctlConsWaiting),
		prodWaiting: u32(ctlProdWaiting),
		prodClosed:  u32(ctlProdClosed),
		consClosed:  u32(ctlConsClosed),
		dataSeq:     u32(ctlDataSeq),
		spaceSeq:    u32(ctlSpaceSeq),
	}
}

// put copies p into the ring at stream position pos, wrapping around.
func (r *ring) put(pos uint64, p []byte) {
	n := copy(r.data[pos&r.mask:], p)
	if n < len(p) {
		copy(r.data, p[n:])
	}
}

// get copies len(p) bytes at stream position pos out of the ring.
func (r *ring) get(pos uint64, p []byte) {
	n := copy(p, r.data[pos&r.mask:])
	if n < len(p) {
		copy(p[n:], r.data)
	}
}

// bump increments a futex word and wakes whoever sleeps on it.
func bump(seq *uint32) {
	atomic.AddUint32(seq, 1)
	futexWake(seq)
}

// guard counts the calls in flight of one kind, so that Close can wait for
// them before it unmaps the segment. Padded to keep the sender's and the
// receiver's counters on separate cache lines.
type guard struct {
	n atomic.Int32
	_ [124]byte
}

// Conn is one end of a shared-memory connection. It implements
// transport.Conn: one goroutine may Send and Flush while another Recvs;
// Abort and Close may be called from any goroutine, at any time, also
// concurrently with blocked calls (Close wakes them, waits for them to
// return, and only then unmaps the segment).
type Conn struct {
	// Sender state (owned by the goroutine calling Send/Flush).
	sendCalls guard
	tx        ring
	txTail    uint64        // write position (may be ahead of the published tail)
	txPub     uint64        // last published tail
	txHead    uint64        // last head seen
	txFrame   uint64        // end of the last complete frame written
	txSpin    time.Duration // current polling budget of space waits
	onWait    func() (end func())
	_         [64]byte

	// Receiver state (owned by the goroutine calling Recv).
	recvCalls guard
	rx        ring
	rxHead    uint64        // read position (may be ahead of the published head)
	rxPub     uint64        // last published head
	rxTail    uint64        // last tail seen
	rlen      int           // length of the frame being read, -1 before its header
	rbuf      []byte        // frame being read; len = bytes received so far
	rdone     bool          // rbuf holds a complete frame that was returned
	rerr      error         // sticky error (corrupt stream)
	rxSpin    time.Duration // current polling budget of data waits
	_         [64]byte

	// Shared between goroutines.
	life
	mem []byte
	poller
	wakeFn func(*uint32) // c.wakeWord, made once (a method value allocates)
	id     uint64
	race   *raceSync
	txIdx  int
	rxIdx  int
}

// Create makes a new segment for one controller<->worker connection and
// returns the controller's end together with the segment's memfd. The memfd
// is to be handed to the worker (for example in exec.Cmd.ExtraFiles, which
// makes it fd 3 in the child) and belongs to the caller, who closes it once
// the worker has started; the Conn does not need it.
func Create(opts Options) (c *Conn, memfd *os.File, err error) {
	ringSize, spin, err := opts.normalize()
	if err != nil {
		return nil, nil, err
	}
	total := segmentSize(ringSize)
	m, f, err := newSegment("chorus-shm", total)
	if err != nil {
		return nil, nil, err
	}
	id := rand.Uint64()
	binary.LittleEndian.PutUint32(m[offVersion:], version)
	binary.LittleEndian.PutUint32(m[offDataOff:], dataOff)
	binary.LittleEndian.PutUint64(m[offRingSize:], ringSize)
	binary.LittleEndian.PutUint64(m[offTotal:], total)
	binary.LittleEndian.PutUint64(m[offSpin:], uint64(spin))
	binary.LittleEndian.PutUint64(m[offID:], id)
	if opts.Yield {
		binary.LittleEndian.PutUint32(m[offYield:], 1)
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&m[offMagic])), magic)
	c = newConn(m, ringSize, spin, id, 0)
	c.yield = opts.Yield
	return c, f, nil
}

// Open attaches the worker's end to a segment made by Create. It takes
// ownership of f and closes it before returning (the mapping does not need
// it). It validates the segment and returns an error, never a fault, for a
// file that is not a sealed segment of the expected layout. A segment can be
// opened once.
func Open(f *os.File) (*Conn, error) {
	if f == nil {
		return nil, errors.New("shm: Open: nil file")
	}
	defer f.Close()
	var h [headerSize]byte
	size, err := readSegment(f, h[:], dataOff, "segment")
	if err != nil {
		return nil, err
	}
	if got := binary.LittleEndian.Uint64(h[offMagic:]); got != magic {
		return nil, fmt.Errorf("shm: bad segment magic %#x", got)
	}
	if got := binary.LittleEndian.Uint32(h[offVersion:]); got != version {
		return nil, fmt.Errorf("shm: segment version %d, want %d", got, version)
	}
	ringSize := binary.LittleEndian.Uint64(h[offRingSize:])
	total := binary.LittleEndian.Uint64(h[offTotal:])
	spin := time.Duration(binary.LittleEndian.Uint64(h[offSpin:]))
	switch {
	case binary.LittleEndian.Uint32(h[offDataOff:]) != dataOff:
		return nil, errors.New("shm: bad segment data offset")
	case ringSize < MinRingSize || ringSize > MaxRingSize || ringSize&(ringSize-1) != 0:
		return nil, fmt.Errorf("shm: bad segment ring size %d", ringSize)
	case total != segmentSize(ringSize) || uint64(size) != total:
		return nil, fmt.Errorf("shm: segment size %d does not match header (%d)", size, total)
	case spin < 0 || spin > MaxSpin:
		return nil, fmt.Errorf("shm: bad spin duration %v", spin)
	}
	m, err := mapSegment(f, total)
	if err != nil {
		return nil, err
	}
	if !atomic.CompareAndSwapUint32((*uint32)(unsafe.Pointer(&m[offAttached])), 0, 1) {
		syscall.Munmap(m)
		return nil, errors.New("shm: segment already opened")
	}
	id := binary.LittleEndian.Uint64(h[offID:])
	c := newConn(m, ringSize, spin, id, 1)
	c.yield = binary.LittleEndian.Uint32(h[offYield:]) != 0
	return c, nil
}

func newConn(m []byte, ringSize uint64, spin time.Duration, id uint64, side int) *Conn {
	c := &Conn{mem: m, poller: poller{spin: spin}, txSpin: spin, rxSpin: spin, id: id, rlen: -1, txIdx: side, rxIdx: 1 - side}
	c.wakeFn = c.wakeWord
	c.tx = newRing(m, c.txIdx, ringSize)
	c.rx = newRing(m, c.rxIdx, ringSize)
	// Resume from the shared indices (both are zero for a new segment).
	c.txTail = atomic.LoadUint64(c.tx.tail)
	c.txPub, c.txFrame = c.txTail, c.txTail
	c.txHead = atomic.LoadUint64(c.tx.head)
	c.rxHead = atomic.LoadUint64(c.rx.head)
	c.rxPub, c.rxTail = c.rxHead, c.rxHead
	c.race = raceAttach(id)
	c.pauses = shmem.RelaxPauses(1)
	return c
}

// stateErr reports why the connection can no longer be used, or nil.
func (c *Conn) stateErr() error {
	if c.closed.Load() {
		return transport.ErrClosed
	}
	if p := c.abortErr.Load(); p != nil {
		return *p
	}
	return nil
}

var (
	errPeerClosed  = fmt.Errorf("%w: peer closed the connection: %w", transport.ErrPeerGone, io.EOF)
	errPeerClosedM = fmt.Errorf("%w: peer closed the connection in the middle of a frame: %w", transport.ErrPeerGone, io.ErrUnexpectedEOF)
	errCorrupt     = fmt.Errorf("%w: shared ring indices are corrupt", transport.ErrPeerGone)
)

// Send copies frame into the ring. It does not publish it unless the ring
// fills up, in which case it publishes what is there, wakes the peer and
// waits for space.
func (c *Conn) Send(frame []byte) error {
	if !c.enter(&c.sendCalls) {
		return transport.ErrClosed
	}
	defer c.sendCalls.n.Add(-1)
	return c.sendLocked(frame)
}

// sendLocked is Send inside the sendCalls guard.
func (c *Conn) sendLocked(frame []byte) error {
	if p := c.abortErr.Load(); p != nil {
		return *p
	}
	if len(frame) > transport.MaxFrame {
		return fmt.Errorf("%w: %d bytes (max %d)", transport.ErrFrameTooLarge, len(frame), transport.MaxFrame)
	}
	r := &c.tx
	if err := c.reserve(lenSize); err != nil {
		return err
	}
	if off := c.txTail & r.mask; off+lenSize <= r.size {
		binary.LittleEndian.PutUint32(r.data[off:], uint32(len(frame)))
	} else {
		var b [lenSize]byte
		binary.LittleEndian.PutUint32(b[:], uint32(len(frame)))
		r.put(c.txTail, b[:])
	}
	c.txTail += lenSize
	for len(frame) > 0 {
		free := r.size - (c.txTail - c.txHead)
		if free == 0 {
			if err := c.reserve(min(uint64(len(frame)), r.size/2)); err != nil {
				return err
			}
			continue
		}
		n := min(free, uint64(len(frame)))
		r.put(c.txTail, frame[:n])
		c.txTail += n
		frame = frame[n:]
	}
	c.txFrame = c.txTail
	return nil
}

// reserve makes sure at least want bytes of the ring are free, publishing
// and waiting for the consumer if needed.
func (c *Conn) reserve(want uint64) error {
	r := &c.tx
	if r.size-(c.txTail-c.txHead) >= want {
		return nil
	}
	if err := c.loadHead(); err != nil {
		return err
	}
	if r.size-(c.txTail-c.txHead) >= want {
		return nil
	}
	c.publish()
	if c.onWait != nil {
		if end := c.onWait(); end != nil {
			defer end()
		}
	}
	ready := func() bool {
		return c.loadHead() != nil || r.size-(c.txTail-c.txHead) >= want
	}
	check := func() error {
		if err := c.stateErr(); err != nil {
			return err
		}
		if atomic.LoadUint32(r.consClosed) != 0 {
			return errPeerClosed
		}
		return nil
	}
	if err := c.wait(&c.txSpin, r.spaceSeq, r.prodWaiting, ready, check, nil); err != nil {
		return err
	}
	return c.loadHead()
}

// OnWait sets f, which a Send or Flush that must wait for room in the
// send ring calls first; the func f returns (if not nil) is called when
// the wait ends. Its owner uses it to put that wait under a deadline, as
// LogWriter.OnWait: Abort ends it. Not for use during a Send.
func (c *Conn) OnWait(f func() (end func())) { c.onWait = f }

// loadHead refreshes the cached consumer index of the send ring.
func (c *Conn) loadHead() error {
	h := atomic.LoadUint64(c.tx.head)
	if h > c.txPub || c.txPub-h > c.tx.size {
		return errCorrupt
	}
	c.txHead = h
	return nil
}

// publish makes everything written so far visible to the consumer and wakes
// it if it announced that it sleeps.
func (c *Conn) publish() {
	c.publishTo(c.txTail)
}

func (c *Conn) publishTo(pos uint64) {
	if pos == c.txPub {
		return
	}
	r := &c.tx
	c.race.release(c.txIdx)
	storeRelease(r.tail, pos)
	c.txPub = pos
	// No fence between the store and the load (wait says why that is
	// safe): a consumer that announced itself before is woken.
	if atomic.LoadUint32(r.consWaiting) != 0 {
		bump(r.dataSeq)
	}
}

// Ack publishes the frames sent so far, then v as this end's
// acknowledgement, and wakes the peer if it sleeps. An acknowledgement is
// a reply without payload that costs the peer one load (Acked, RecvOrAck)
// instead of reading and decoding a frame. v must grow from call to call;
// the peer sees the latest value only.
func (c *Conn) Ack(v uint64) error {
	if !c.enter(&c.sendCalls) {
		return transport.ErrClosed
	}
	defer c.sendCalls.n.Add(-1)
	if p := c.abortErr.Load(); p != nil {
		return *p
	}
	if atomic.LoadUint32(c.tx.consClosed) != 0 {
		return errPeerClosed
	}
	r := &c.tx
	if c.txTail != c.txPub {
		c.race.release(c.txIdx)
		storeRelease(r.tail, c.txTail)
		c.txPub = c.txTail
	}
	// No fence between the store and the load, as in publishTo.
	storeRelease(r.ack, v)
	if atomic.LoadUint32(r.consWaiting) != 0 {
		bump(r.dataSeq)
	}
	return nil
}

// Acked returns the peer's latest acknowledgement (0 before any). A
// caller that then finds no frame Pending has seen every frame the peer
// sent before that acknowledgement.
func (c *Conn) Acked() uint64 { return atomic.LoadUint64(c.rx.ack) }

// Flush publishes the frames sent so far and wakes the peer if it sleeps.
func (c *Conn) Flush() error {
	if !c.enter(&c.sendCalls) {
		return transport.ErrClosed
	}
	defer c.sendCalls.n.Add(-1)
	if p := c.abortErr.Load(); p != nil {
		return *p
	}
	if atomic.LoadUint32(c.tx.consClosed) != 0 {
		return errPeerClosed
	}
	c.publish()
	return nil
}

// Recv returns the next frame, in a buffer that is reused by the next Recv.
// It returns ctx.Err() if ctx is done before a whole frame has arrived (at
// once if ctx is already done); the part read so far is kept, and the frame
// is delivered by a later Recv.
func (c *Conn) Recv(ctx context.Context) ([]byte, error) {
	frame, _, err := c.recv(ctx, 0)
	return frame, err
}

// RecvOrAck is Recv that also returns when the peer's acknowledgement
// (Ack) reaches want, with a nil frame and the acknowledgement: whichever
// comes first. Frames the peer sent before that acknowledgement are
// returned first. want 0 is Recv.
func (c *Conn) RecvOrAck(ctx context.Context, want uint64) (frame []byte, ack uint64, err error) {
	return c.recv(ctx, want)
}

func (c *Conn) recv(ctx context.Context, want uint64) ([]byte, uint64, error) {
	if !c.enter(&c.recvCalls) {
		return nil, 0, transport.ErrClosed
	}
	defer c.recvCalls.n.Add(-1)
	if p := c.abortErr.Load(); p != nil {
		return nil, 0, *p
	}
	if c.rerr != nil {
		return nil, 0, c.rerr
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if done := ctx.Done(); done != nil {
		select {
		case <-done:
			return nil, 0, ctx.Err()
		default:
		}
	}
	if c.rdone {
		c.rdone = false
		c.rbuf = c.rbuf[:0]
		c.rlen = -1
	}
	r := &c.rx
	for {
		need := uint64(lenSize)
		if c.rlen >= 0 {
			need = 1
		}
		avail := c.rxTail - c.rxHead
		if avail < need {
			// The acknowledgement is loaded before the tail: frames
			// published before it are then seen, and returned first.
			var ack uint64
			if want != 0 && c.rlen < 0 {
				ack = atomic.LoadUint64(r.ack)
			}
			if err := c.loadTail(); err != nil {
				return nil, 0, err
			}
			if avail = c.rxTail - c.rxHead; avail < need {
				if want != 0 && c.rlen < 0 && ack >= want {
					c.publishHead()
					return nil, ack, nil
				}
				if err := c.waitData(ctx, need, want); err != nil {
					return nil, 0, err
				}
				continue
			}
		}
		if c.rlen < 0 {
			var n uint32
			if off := c.rxHead & r.mask; off+lenSize <= r.size {
				n = binary.LittleEndian.Uint32(r.data[off:])
			} else {
				var b [lenSize]byte
				r.get(c.rxHead, b[:])
				n = binary.LittleEndian.Uint32(b[:])
			}
			c.rxHead += lenSize
			avail -= lenSize
			if n > transport.MaxFrame {
				c.publishHead()
				c.rerr = fmt.Errorf("%w: peer sent a %d-byte frame (max %d)", transport.ErrFrameTooLarge, n, transport.MaxFrame)
				return nil, 0, c.rerr
			}
			c.rlen = int(n)
			// Drop a huge buffer left by an earlier frame, and allocate
			// up front only what the ring bounds; larger frames grow
			// the buffer as their bytes arrive.
			if cap(c.rbuf) > 16<<20 && c.rlen < cap(c.rbuf)/4 {
				c.rbuf = nil
			}
			if c.rlen > cap(c.rbuf) && uint64(c.rlen) <= r.size {
				c.rbuf = make([]byte, 0, c.rlen)
			}
		}
		if k := min(avail, uint64(c.rlen-len(c.rbuf))); k > 0 {
			c.grow(int(k))
			l := len(c.rbuf)
			c.rbuf = c.rbuf[:l+int(k)]
			r.get(c.rxHead, c.rbuf[l:])
			c.rxHead += k
		}
		if len(c.rbuf) == c.rlen {
			c.publishHead()
			c.rdone = true
			return c.rbuf, 0, nil
		}
	}
}

// grow makes room for k more bytes in rbuf, at most doubling the buffer
// beyond what has actually arrived.
func (c *Conn) grow(k int) {
	l := len(c.rbuf)
	if cap(c.rbuf)-l >= k {
		return
	}
	nc := max(l+k, min(c.rlen, 2*cap(c.rbuf)), min(c.rlen, 4096))
	nb := make([]byte, l, nc)
	copy(nb, c.rbuf)
	c.rbuf = nb
}

// loadTail refreshes the cached producer index of the receive ring.
func (c *Conn) loadTail() error {
	t := atomic.LoadUint64(c.rx.tail)
	if t < c.rxHead || t-c.rxHead > c.rx.size {
		c.rerr = errCorrupt
		return errCorrupt
	}
	if t != c.rxTail {
		c.race.acquire(c.rxIdx)
		c.rxTail = t
	}
	return nil
}

// publishHead hands the space consumed so far back to the producer and
// wakes it if it announced that it sleeps.
func (c *Conn) publishHead() {
	if c.rxHead == c.rxPub {
		return
	}
	r := &c.rx
	atomic.StoreUint64(r.head, c.rxHead)
	c.rxPub = c.rxHead
	if atomic.LoadUint32(r.prodWaiting) != 0 {
		bump(r.spaceSeq)
	}
}

// waitData waits until at least need unread bytes are published or, if
// ackWant is not 0, the peer's acknowledgement reaches it.
func (c *Conn) waitData(ctx context.Context, need, ackWant uint64) error {
	c.publishHead()
	r := &c.rx
	done := ctx.Done()
	ready := func() bool {
		if ackWant != 0 && atomic.LoadUint64(r.ack) >= ackWant {
			return true
		}
		t := atomic.LoadUint64(r.tail)
		return t-c.rxHead >= need
	}
	check := func() error {
		if err := c.stateErr(); err != nil {
			return err
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
			if atomic.LoadUint64(r.tail)-c.rxHead >= need {
				return nil
			}
			if c.rlen >= 0 {
				return errPeerClosedM
			}
			return errPeerClosed
		}
		return nil
	}
	var wctx context.Context
	if done != nil {
		wctx = ctx
	}
	if err := c.wait(&c.rxSpin, r.dataSeq, r.consWaiting, ready, check, wctx); err != nil {
		return err
	}
	return c.loadTail()
}

// wait blocks until ready reports true or check reports an error: it polls
// ready, first back to back, then with runtime.Gosched between polls, for up
// to *budget; then it sleeps on the futex word seq after announcing it in
// flag.
//
// The budget adapts between minSpin and c.spin: it doubles when polling
// succeeds and halves when the waiter had to sleep, so a peer that answers
// slowly (a worker computing for a millisecond, or one that needs the very
// CPU the poller is burning) costs little polling, while a ping-pong between
// two awake processes stays in the sub-microsecond polling regime.
//
// The poll loop deliberately does not call sched_yield: on this kernel
// (EEVDF scheduler) every yield while another task is runnable pushes the
// yielding thread's deadline back by a full slice, and measured round trips
// next to CPU-bound processes went from a few microseconds to 1-2 ms with
// even one sched_yield per wait. Without it, a peer waiting for the poller's
// CPU is delayed by at most the (adapting) budget.
//
// No wake-up is lost for longer than firstSlice: the sleeper reads seq,
// sets flag (an atomic exchange: a full barrier), re-checks ready and
// sleeps only while seq still has the value read. A publisher makes the
// condition true with a plain store, then reads flag and, if set,
// increments seq and wakes. The publisher does not fence between the two:
// the fence waited for the store buffer to drain, i.e. for every line the
// frames were written to to come over from the cores of the consumers
// polling them, on the path every round of a session waits for (17% of a
// controller's CPU at 8 process workers on the 16-core host, 0.45 us per
// broadcast). Without it, the publisher's load of flag may read 0 while
// its store is still in its store buffer and the sleeper's re-check misses
// the store: only a publication in flight while the sleeper announced
// itself, and a store leaves the store buffer within a few hundred
// nanoseconds (an interrupt or VM exit drains it too). So after the
// announcement the waiter polls for about 2 us more (shmem.Grace), the
// first sleep lasts at most firstSlice, and the re-check after it sees
// any such publication; a publication later than that loads the
// flag after the announcement was visible, and wakes the sleeper. Abort
// and Close increment seq too after setting their state, so check sees
// it.
//
// If ctx is not nil, its cancellation wakes the sleeper at once (through
// context.AfterFunc, registered only when it actually sleeps).
func (c *Conn) wait(budget *time.Duration, seq, flag *uint32, ready func() bool, check func() error, ctx context.Context) error {
	return c.poller.wait(budget, seq, flag, ready, check, ctx, c.wakeFn)
}

// poller is how one end polls before it sleeps: the most it polls
// (spin), and what it does between polls.
type poller struct {
	spin   time.Duration
	yield  bool   // sched_yield between polls (Options.Yield)
	pauses uint32 // shmem.Relax between polls
}

// wait is Conn.wait; wake(seq) wakes the sleeper when ctx is done.
func (c *poller) wait(budget *time.Duration, seq, flag *uint32, ready func() bool, check func() error, ctx context.Context, wake func(*uint32)) error {
	if c.spin > 0 {
		for range fastPolls {
			if ready() {
				return nil
			}
		}
		start := time.Now()
		for {
			if ready() {
				*budget = min(c.spin, max(2**budget, minSpin))
				return nil
			}
			if err := check(); err != nil {
				return err
			}
			if time.Since(start) >= *budget {
				break
			}
			switch {
			case c.yield:
				schedYield()
			default:
				shmem.Relax(c.pauses)
			}
		}
		if !c.yield {
			// A yielding poller costs its peers little, so only a busy
			// poller backs off.
			*budget = max(*budget/2, minSpin)
		}
	}
	var stop func() bool
	defer func() {
		atomic.StoreUint32(flag, 0)
		if stop != nil {
			stop()
		}
	}()
	slice := firstSlice
	for {
		s := atomic.LoadUint32(seq)
		atomic.StoreUint32(flag, 1)
		if ready() {
			return nil
		}
		if err := check(); err != nil {
			return err
		}
		if slice == firstSlice && shmem.Grace(ready) {
			return nil
		}
		if ctx != nil && stop == nil {
			stop = context.AfterFunc(ctx, func() { wake(seq) })
		}
		waitSleep(seq, s, slice)
		slice = sleepSlice
	}
}

// wakeAll bumps every futex word of the segment, waking local waiters (so
// they notice Abort or Close) and the peer's (so it notices the closed
// flags).
func (c *Conn) wakeAll() {
	bump(c.rx.dataSeq)
	bump(c.tx.spaceSeq)
	bump(c.tx.dataSeq)
	bump(c.rx.spaceSeq)
}

// Abort makes every blocked and later Send, Flush and Recv return an error
// that wraps transport.ErrPeerGone and err. It also marks the segment closed,
// so that a peer that is still alive stops too.
func (c *Conn) Abort(err error) {
	first, leave := c.abort(err, "connection")
	if !first {
		return
	}
	defer leave()
	atomic.StoreUint32(c.tx.prodClosed, 1)
	atomic.StoreUint32(c.rx.consClosed, 1)
	c.wakeAll()
}

// Close publishes the complete frames sent but not yet flushed, marks the
// segment closed for the peer, and unmaps it. Calls blocked in Send or Recv
// are woken and return transport.ErrClosed; Close waits for them (and for
// any other call in flight) before unmapping. Later calls return
// transport.ErrClosed; a second Close returns nil.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.wakeAll()
	c.drain(&c.sendCalls, &c.recvCalls)
	if c.abortErr.Load() == nil && c.txFrame > c.txPub {
		c.publishTo(c.txFrame)
	}
	atomic.StoreUint32(c.tx.prodClosed, 1)
	atomic.StoreUint32(c.rx.consClosed, 1)
	c.wakeAll()
	raceDetach(c.id, c.race)
	m := c.mem
	c.mem = nil
	c.tx, c.rx = ring{}, ring{}
	if err := syscall.Munmap(m); err != nil {
		return os.NewSyscallError("munmap", err)
	}
	return nil
}

// Pending reports whether bytes of a frame not yet returned by Recv are in
// the ring, without waiting. Like Recv, it is for the receiving goroutine.
func (c *Conn) Pending() bool {
	if c.rlen >= 0 && !c.rdone {
		return true // a frame is partly read
	}
	return atomic.LoadUint64(c.rx.tail) != c.rxHead
}

// FlushAll is Flush on every connection of cs at once: the frames sent on
// each are published with plain release stores, then the sleeping peers
// are woken, with no fence (wait says why that is safe). A controller
// broadcasting to N workers thus waits for no cache-line transfer (a
// locked instruction after each store waited for N in a row: the
// measured cause of process-session latency growing with the worker
// count; one fence after them still cost 0.45 us at 8 workers). It stops at
// the first connection that cannot be flushed and returns its index with
// the error; connections before it were flushed.
func FlushAll(cs []*Conn) (int, error) {
	if i, err := enterAll(cs); err != nil {
		return i, err
	}
	defer leave(cs)
	return flushAll(cs)
}

// SendAll is Send of the same frame on every connection of cs, then
// FlushAll, with one entry per connection instead of one per call: the
// locked instructions of Send's entry and exit drain the store buffer, so
// each waited for the cache-line transfers of the frame written into the
// ring before it, and a broadcast to N workers paid N transfers in a row.
// It stops at the first connection that fails and returns its index with
// the error; nothing is published then.
func SendAll(cs []*Conn, frame []byte) (int, error) {
	if i, err := enterAll(cs); err != nil {
		return i, err
	}
	defer leave(cs)
	for i, c := range cs {
		if err := c.sendLocked(frame); err != nil {
			return i, err
		}
	}
	return flushAll(cs)
}

func enterAll(cs []*Conn) (int, error) {
	for i, c := range cs {
		if !c.enter(&c.sendCalls) {
			leave(cs[:i])
			return i, transport.ErrClosed
		}
	}
	return len(cs), nil
}

// flushAll is FlushAll inside the connections' sendCalls guards.
func flushAll(cs []*Conn) (int, error) {
	for i, c := range cs {
		if p := c.abortErr.Load(); p != nil {
			return i, *p
		}
		if atomic.LoadUint32(c.tx.consClosed) != 0 {
			return i, errPeerClosed
		}
	}
	for _, c := range cs {
		if c.txTail != c.txPub {
			c.race.release(c.txIdx)
			storeRelease(c.tx.tail, c.txTail)
		}
	}
	// No fence (wait says why that is safe): a consumer that announced
	// itself before is woken.
	for _, c := range cs {
		if c.txTail != c.txPub {
			c.txPub = c.txTail
			if atomic.LoadUint32(c.tx.consWaiting) != 0 {
				bump(c.tx.dataSeq)
			}
		}
	}
	return len(cs), nil
}

func leave(cs []*Conn) {
	for _, c := range cs {
		c.sendCalls.n.Add(-1)
	}
}

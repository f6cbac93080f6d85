package hier

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/internal/sys/pollread"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/tensor"
)

// Name is the backend's name.
const Name = "cpu-hier"

// The sizes below are the measured choices (docs/multi-host.md); they
// were environment variables while the comparisons ran. Tests in this
// package vary them; every rank must have the same (checked in every
// agreement round).
//
// smallMax: allreduces up to this size are gathered (every input to
// every rank); larger ones take RHD or the ring. It was 64 KiB before:
// on the 16-core host's namespaces RHD and the ring were 1.2-2.4x faster
// than gathering at 32-64 KiB with 1 and 2 ranks per host on 4 hosts,
// and on 2 hosts with 2 (docs/multi-host.md). rhdMax: larger than
// smallMax up to this, recursive halving-doubling; above, the ring.
// chunkBytes: the ring's chunk. multiRingMin: allreduces from this size
// up take the multi-ring path where it applies, smaller ones the leader
// path (on the 2-vCPU VM the multi-ring was 10-25% slower at 256 KiB and
// faster from 1 MiB, docs/multi-host.md); a communicator keeps the value
// it was joined with.
var (
	smallMax     = 16 << 10
	rhdMax       = 128 << 10
	chunkBytes   = 1 << 20
	multiRingMin = 1 << 20
	// pipeBytes: a multi-ring allreduce larger than half of this runs in
	// groups of at most pipeBytes (0: one group), the first and the last
	// a quarter of it (cpu.PipeCuts), the host's reduction and copies of
	// one group overlapping the rings of another (multiring.go). A power
	// of two; a communicator keeps the value it was joined with.
	pipeBytes = 8 << 20
	// flushBytes: a message on a TLS link is flushed every flushBytes,
	// so that its first records are on the wire while the rest is
	// encrypted.
	flushBytes = LinkBuffer
)

const dataMagic = "CHHD"

// Backend is the cpu-hier backend.
type Backend struct {
	// CPU are the options of each host's ccl/cpu communicator.
	CPU cpu.Options
}

func init() {
	if err := ccl.Register(&Backend{}); err != nil {
		panic(err)
	}
}

func (*Backend) Name() string { return Name }

// NewID returns a nonce; the controller completes it with MakeID.
func (*Backend) NewID() ([]byte, error) {
	id := make([]byte, 16)
	_, err := rand.Read(id)
	return id, err
}

// peer is the link to one rank of another host.
type peer struct {
	rank    int
	stripe  int // the leader ring's stripe this link carries (stripe.go)
	c       net.Conn
	out, in uint64 // messages sent and received
	hdr     [hdrBytes]byte
	small   []byte // header and data of a small message
	r       *bufio.Reader
	poll    *pollread.Reader // under r (poll.go); nil: the link cannot poll

	// bare: a plaintext link straight on the socket (no link buffer). A
	// header that sendHdr starts waits in held and leaves with the first
	// bytes of its message in one writev (bufs), so that neither the
	// header nor the tensor's bytes are copied or cost a system call of
	// their own.
	bare bool
	held []byte
	vec  [2][]byte
	bufs net.Buffers
}

// newPeer wraps the link to rank. A plaintext link leaves the link
// buffer that its TLS set-up used (net/link Config.Buffer): every
// write then goes straight from the tensor to the socket, and large reads
// straight from the socket into the tensor, instead of through a second
// buffer (one copy more per byte received, and per byte of a message's
// first write).
func newPeer(rank int, conn net.Conn, plain bool) (*peer, error) {
	p := &peer{rank: rank, c: conn}
	var rd io.Reader = conn
	switch x := conn.(type) {
	case *sealedConn:
		p.poll = x.poll // its records are read through it
	case interface{ NetConn() net.Conn }:
		p.poll = link.Poller(x) // TLS reads its records through it
	}
	if plain {
		raw, r, poll, err := unbuffered(conn)
		if err != nil {
			return nil, err
		}
		p.c, p.bare, rd, p.poll = raw, true, r, poll
	}
	p.r = bufio.NewReaderSize(rd, 64<<10)
	return p, nil
}

// unbuffered takes c out of its link buffer (link.Unbuffer): the socket,
// a reader of it that first returns what the buffer had read ahead, and
// the poller under that reader (nil: the socket cannot poll).
func unbuffered(c net.Conn) (raw net.Conn, r io.Reader, poll *pollread.Reader, err error) {
	raw, left, err := link.Unbuffer(c)
	if err != nil {
		return nil, nil, nil, err
	}
	r = raw
	if pr, err := pollread.New(raw); err == nil {
		poll, r = pr, pr
	}
	if len(left) > 0 {
		r = io.MultiReader(bytes.NewReader(left), r)
	}
	return raw, r, poll, nil
}

// inlineMax: messages up to this size are written in one piece, and an
// exchange sends them before it receives, without a goroutine (the
// peer's socket receive buffer holds them even while it sends too).
const inlineMax = 32 << 10

// Comm is one rank of a cpu-hier communicator.
type Comm struct {
	rank, n  int
	hostOf   []int // rank -> host index 0..K-1
	hostLo   []int // host index -> first rank; hostLo[K] = n
	me, k    int   // my host index, number of hosts
	lrank, l int   // rank and size inside my host
	local    *cpu.Comm
	peers    []*peer // by rank; nil on my host
	timeout  time.Duration
	seq      uint64

	mu      sync.Mutex // guards closed against Abort
	closed  bool
	failed  atomic.Bool
	failErr atomic.Pointer[error]

	desc, table *tensor.Tensor // scratch for agreement
	carried     bool           // the last agreement carried every rank's input (carry.go)
	carryMax    int            // carryMaxBytes at Join
	carryBuf    []byte         // a carried agreement message
	bruckBuf    []byte         // a Bruck round's message (bruck.go)
	recLen      []int          // agreeBruck: each rank's record length

	testSmallMax int            // tests: the smallMax this rank's descriptors state, if not 0
	testTuning   *[4]int        // tests: the tuning this rank's descriptors state, if set
	block        int            // bytes per rank in the agreement table
	tmp          []byte         // scratch of the rings and RHD
	gathered     *tensor.Tensor // scratch of gathered allreduces (gatherScratch)

	path     byte   // pathLeader or pathMulti (large allreduces)
	pathWhy  string // Path's answer
	multiMin int    // multiRingMin at Join
	pipe     int    // pipeBytes at Join

	stripes   int       // the leader ring's stripes (stripe.go)
	stripeMin int       // stripeMinBytes at Join
	extra     [][]*peer // extra[s-1][r]: stripe s's link to rank r (neighbouring leaders only)
	tmps      [][]byte  // scratch of stripes 1..

	spin    time.Duration // reads' polling budget (poll.go); 0: none
	spinNow time.Duration // the budget the links have now; -1: unset
}

var _ ccl.Comm = (*Comm)(nil)
var _ ccl.Aborter = (*Comm)(nil)

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.n }

// Hosts is the number of hosts the communicator spans.
func (c *Comm) Hosts() int { return c.k }

// Join connects this rank to the communicator: the shared-memory
// communicator of its host and a link to every rank of the other hosts.
func (b *Backend) Join(ctx context.Context, cfg ccl.Config) (ccl.Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Device != (tensor.Device{}) && cfg.Device.Kind != tensor.CPU {
		return nil, fmt.Errorf("%w: cpu-hier works on host memory, not %v", ccl.ErrBadArgs, cfg.Device)
	}
	t, err := parseID(cfg.ID, cfg.Size)
	if err != nil {
		return nil, err
	}
	c := &Comm{rank: cfg.Rank, n: cfg.Size, timeout: cfg.TimeoutOrDefault(), hostOf: make([]int, cfg.Size), peers: make([]*peer, cfg.Size)}
	prev := -1
	for r, g := range t.members {
		if h := t.hosts[g]; h != prev {
			c.hostLo = append(c.hostLo, r)
			prev = h
		}
		c.hostOf[r] = len(c.hostLo) - 1
	}
	c.k = len(c.hostLo)
	c.hostLo = append(c.hostLo, c.n)
	c.me = c.hostOf[c.rank]
	c.lrank, c.l = c.rank-c.hostLo[c.me], c.hostLo[c.me+1]-c.hostLo[c.me]
	c.choosePath()
	c.multiMin, c.pipe = multiRingMin, pipeBytes
	c.carryMax = carryMaxBytes
	if err := c.chooseStripes(); err != nil {
		return nil, err
	}
	if err := c.chooseSpin(); err != nil {
		return nil, fmt.Errorf("%w: ccl/hier: %w", ccl.ErrBadArgs, err)
	}
	if c.k > 1 && c.stripes > 1 && c.stripeLinks() {
		c.extra = make([][]*peer, c.stripes-1)
		for s := range c.extra {
			c.extra[s] = make([]*peer, c.n)
		}
	}
	inline := agreeInlineMax
	if testInlineMax != nil {
		inline = testInlineMax(c.rank)
	}
	if inline > MaxInline {
		return nil, fmt.Errorf("%w: ccl/hier: an agreement inline maximum of %d bytes: at most %d", ccl.ErrBadArgs, inline, MaxInline)
	}
	c.block = descBytes + max(0, inline)
	c.desc = tensor.MustNew(tensor.Uint8, tensor.Shape{int64(c.block)})
	c.table = tensor.MustNew(tensor.Uint8, tensor.Shape{int64(c.n * c.block)})
	jctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if c.l > 1 || c.k == 1 {
		lc, err := (&cpu.Backend{Options: b.CPU}).Join(jctx, ccl.Config{ID: ccl.SubID(cfg.ID, "hier-local/"+strconv.Itoa(c.me)), Rank: c.lrank, Size: c.l, Timeout: c.timeout})
		if err != nil {
			return nil, fmt.Errorf("ccl/hier: rank %d: join host communicator: %w", c.rank, err)
		}
		c.local = lc.(*cpu.Comm)
	}
	if c.k > 1 {
		if err := c.connect(jctx, cfg.ID, t); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// connect makes the links to every rank of the other hosts: this rank
// dials the lower ranks and waits for the higher ones.
func (c *Comm) connect(ctx context.Context, id []byte, t *table) error {
	if err := ensureEndpoint(); err != nil {
		return err
	}
	key := commKey(id)
	var wg sync.WaitGroup
	errs := make([]error, c.n)
	for r := range c.n {
		if c.hostOf[r] == c.me {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.linkTo(ctx, key, t.addrs[t.members[r]], r); err != nil {
				errs[r] = fmt.Errorf("rank %d (%s): %w", r, t.addrs[t.members[r]], err)
				return
			}
		}()
	}
	wg.Wait()
	var missing []int
	for r, err := range errs {
		if err != nil {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		if ctx.Err() != nil {
			return &ccl.TimeoutError{Kind: 0, Rank: c.rank, Missing: missing, After: c.timeout}
		}
		return fmt.Errorf("ccl/hier: rank %d: links: %w", c.rank, errors.Join(errs...))
	}
	return nil
}

// Close closes the links and the host communicator.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.eachLink(func(p *peer) { closeLink(p.c) })
	if c.local != nil {
		return c.local.Close()
	}
	return nil
}

// Abort fails the communicator now: links closed, host communicator
// failed, so every blocked and later call returns an error.
func (c *Comm) Abort(reason error) error {
	c.fail(fmt.Errorf("%w: aborted: %v", ccl.ErrFailed, reason))
	return nil
}

// fail records the first failure and makes every rank notice: remote
// ranks through their links closing, local ranks through shared memory.
func (c *Comm) fail(err error) {
	if !c.failed.CompareAndSwap(false, true) {
		return
	}
	c.failErr.Store(&err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.eachLink(func(p *peer) { closeLink(p.c) })
	if c.local != nil {
		c.local.Fail()
	}
}

func (c *Comm) usable() error {
	if c.closed {
		return ccl.ErrClosed
	}
	if c.failed.Load() {
		return fmt.Errorf("%w: rank %d: an earlier collective failed (%v); create a new communicator", ccl.ErrFailed, c.rank, *c.failErr.Load())
	}
	return nil
}

// guard runs one collective: it checks the communicator, makes ctx end
// the collective's link I/O, and fails the communicator on any error.
func (c *Comm) guard(ctx context.Context, kind ccl.Kind, body func() error) error {
	c.seq++
	if err := c.usable(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		c.eachLink(func(p *peer) { _ = p.c.SetDeadline(time.Unix(1, 0)) })
	})
	err := body()
	if !stop() && err != nil && ctx.Err() != nil {
		if c.failed.Load() {
			// Aborted (Abort, then the cancel): the reason first.
			err = fmt.Errorf("ccl/hier: rank %d: %s #%d: %w (%v)", c.rank, kind, c.seq, *c.failErr.Load(), ctx.Err())
		} else {
			err = fmt.Errorf("ccl/hier: rank %d: %s #%d: %w", c.rank, kind, c.seq, ctx.Err())
		}
	}
	if err != nil && !errors.Is(err, errAgreed) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
			err = &ccl.TimeoutError{Kind: kind, Seq: c.seq, Rank: c.rank, Missing: c.remoteRanks(), After: c.timeout}
		}
		c.fail(err)
	}
	var ae agreedErr
	if errors.As(err, &ae) {
		err = ae.err
	}
	return err
}

// errAgreed marks errors every rank reached together (mismatched or bad
// arguments): the communicator stays usable after them.
var errAgreed = errors.New("agreed")

type agreedErr struct{ err error }

func (e agreedErr) Error() string        { return e.err.Error() }
func (e agreedErr) Is(target error) bool { return target == errAgreed }
func (e agreedErr) Unwrap() error        { return e.err }

func (c *Comm) remoteRanks() []int {
	var out []int
	for r, p := range c.peers {
		if p != nil {
			out = append(out, r)
		}
	}
	return out
}

// Link messages: a 24-byte header (magic, kind, dtype, status, counter,
// byte count) and the bytes. Every header is checked against what this
// rank expects; a peer that disagrees breaks the protocol and fails the
// communicator.
const hdrBytes = 24

func (c *Comm) send(p *peer, kind ccl.Kind, dt tensor.DType, status byte, data []byte) error {
	h := c.header(p, kind, dt, status, len(data))
	_ = p.c.SetWriteDeadline(time.Now().Add(c.timeout))
	if len(data) <= inlineMax {
		// One write, one TLS record, one packet.
		p.small = append(append(p.small[:0], h...), data...)
		if _, err := p.c.Write(p.small); err != nil {
			return c.linkErr(p, err)
		}
		return c.flush(p)
	}
	p.hold(h)
	piece := chunkBytes
	if !p.bare {
		piece = min(piece, flushBytes)
	}
	for off := 0; off < len(data); off += piece {
		_ = p.c.SetWriteDeadline(time.Now().Add(c.timeout))
		if err := p.write(data[off:min(len(data), off+piece)]); err != nil {
			return c.linkErr(p, err)
		}
		if !p.bare && off+piece < len(data) {
			if err := c.flush(p); err != nil {
				return err
			}
		}
	}
	return c.flush(p)
}

// hold starts a message with its header h (p.hdr), which write or flush
// sends before anything else: on a bare link in one writev with the
// message's first bytes; on a TLS link as its own record into the link
// buffer, which sends it with the data in one system call.
func (p *peer) hold(h []byte) {
	p.held = h
}

// write sends b after a held header, in one writev on a bare link (two
// writes under the race detector: race_off.go).
func (p *peer) write(b []byte) error {
	if raceBuild && p.bare {
		b = bytes.Clone(b) // race_off.go says why
	}
	if p.held != nil {
		h := p.held
		p.held = nil
		if p.bare && !raceBuild {
			p.vec = [2][]byte{h, b}
			p.bufs = p.vec[:] // WriteTo consumes its slice, not vec
			_, err := p.bufs.WriteTo(p.c)
			p.vec = [2][]byte{} // no reference to the tensor
			return err
		}
		if _, err := p.c.Write(h); err != nil {
			return err
		}
	}
	if len(b) == 0 {
		return nil
	}
	_, err := p.c.Write(b)
	return err
}

// header fills p's next message header.
func (c *Comm) header(p *peer, kind ccl.Kind, dt tensor.DType, status byte, n int) []byte {
	p.out++
	h := p.hdr[:]
	copy(h, dataMagic)
	h[4], h[5], h[6], h[7] = byte(kind), byte(dt), status, 0
	binary.LittleEndian.PutUint64(h[8:], p.out)
	binary.LittleEndian.PutUint64(h[16:], uint64(n))
	return h
}

// sendHdr starts a message of n bytes that sendChunk streams; the
// header waits in the link's buffer for the first chunk.
func (c *Comm) sendHdr(p *peer, kind ccl.Kind, dt tensor.DType, n int) error {
	p.hold(c.header(p, kind, dt, 0, n))
	return nil
}

// sendChunk writes part of a message started by sendHdr and flushes it.
func (c *Comm) sendChunk(p *peer, b []byte) error {
	_ = p.c.SetWriteDeadline(time.Now().Add(c.timeout))
	if err := p.write(b); err != nil {
		return c.linkErr(p, err)
	}
	return c.flush(p)
}

// flush sends a held header and what the link's buffer holds
// (link.Config.Buffer).
func (c *Comm) flush(p *peer) error {
	if p.held != nil {
		_ = p.c.SetWriteDeadline(time.Now().Add(c.timeout))
		if err := p.write(nil); err != nil {
			return c.linkErr(p, err)
		}
	}
	if err := flushConn(p.c); err != nil {
		return c.linkErr(p, err)
	}
	return nil
}

// recvHdr reads a header and checks it; size < 0 accepts any size.
func (c *Comm) recvHdr(p *peer, kind ccl.Kind, size int) (dt tensor.DType, status byte, n int, err error) {
	var h [hdrBytes]byte
	_ = p.c.SetReadDeadline(time.Now().Add(c.timeout))
	if _, err := io.ReadFull(p.r, h[:]); err != nil {
		return 0, 0, 0, c.linkErr(p, err)
	}
	p.in++
	n64 := binary.LittleEndian.Uint64(h[16:])
	switch {
	case string(h[:4]) != dataMagic:
		err = fmt.Errorf("bad magic")
	case ccl.Kind(h[4]) != kind:
		err = fmt.Errorf("rank %d sent %s, rank %d expects %s", p.rank, ccl.Kind(h[4]), c.rank, kind)
	case binary.LittleEndian.Uint64(h[8:]) != p.in:
		err = fmt.Errorf("message %d from rank %d, expected %d", binary.LittleEndian.Uint64(h[8:]), p.rank, p.in)
	case size >= 0 && n64 != uint64(size):
		err = fmt.Errorf("rank %d sent %d bytes, rank %d expects %d", p.rank, n64, c.rank, size)
	case n64 > 1<<40:
		err = fmt.Errorf("rank %d announced %d bytes", p.rank, n64)
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w: ccl/hier: rank %d: link protocol: %v", ccl.ErrFailed, c.rank, err)
	}
	return tensor.DType(h[5]), h[6], int(n64), nil
}

// recvInto reads len(dst) bytes into dst, calling each (if set) on every
// piece of about chunkBytes as it arrives so that work overlaps the
// transfer.
func (c *Comm) recvInto(p *peer, dst []byte, each func(lo, hi int) error) error {
	return c.recvPieces(p, dst, chunkBytes, each)
}

// recvPieces is recvInto with pieces of about piece bytes.
func (c *Comm) recvPieces(p *peer, dst []byte, piece int, each func(lo, hi int) error) error {
	// Pieces are a multiple of 16 bytes, so of every element size.
	piece = max(16, piece&^15)
	for off := 0; off < len(dst); {
		hi := min(len(dst), off+piece)
		_ = p.c.SetReadDeadline(time.Now().Add(c.timeout))
		into := dst[off:hi]
		if raceBuild && p.bare {
			into = make([]byte, hi-off) // race_off.go says why
		}
		if _, err := io.ReadFull(p.r, into); err != nil {
			return c.linkErr(p, err)
		}
		if raceBuild && p.bare {
			copy(dst[off:hi], into)
		}
		if each != nil {
			if err := each(off, hi); err != nil {
				return err
			}
		}
		off = hi
	}
	return nil
}

func (c *Comm) recv(p *peer, kind ccl.Kind, dst []byte, each func(lo, hi int) error) error {
	if _, _, _, err := c.recvHdr(p, kind, len(dst)); err != nil {
		return err
	}
	return c.recvInto(p, dst, each)
}

func (c *Comm) linkErr(p *peer, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err // guard turns it into a TimeoutError or ctx's error
	}
	if c.failed.Load() {
		return fmt.Errorf("%w: rank %d: %v", ccl.ErrFailed, c.rank, *c.failErr.Load())
	}
	if p.stripe > 0 {
		return fmt.Errorf("%w: ccl/hier: rank %d: link to rank %d (stripe %d): %v", ccl.ErrFailed, c.rank, p.rank, p.stripe, err)
	}
	return fmt.Errorf("%w: ccl/hier: rank %d: link to rank %d: %v", ccl.ErrFailed, c.rank, p.rank, err)
}

// exchange sends out to every peer in to (concurrently) while receiving
// from every peer in from, in order, through recvFn.
func (c *Comm) exchange(to []*peer, send func(p *peer) error, from []*peer, recvFn func(p *peer) error) error {
	return c.exchangeN(to, send, from, recvFn, inlineMax+1)
}

// exchangeN is exchange for messages of at most size bytes: small ones
// are sent inline first, then received in order; larger ones are sent
// from one goroutine per peer while the caller receives in order.
// Sending small messages from goroutines too, and receiving large ones
// from every peer at once, were measured and not kept: 1-16 KiB
// allreduces on 4 hosts took 40-90% longer with the former, the latter
// was within noise (docs/multi-host.md).
func (c *Comm) exchangeN(to []*peer, send func(p *peer) error, from []*peer, recvFn func(p *peer) error, size int) error {
	if size <= inlineMax {
		for _, p := range to {
			if err := send(p); err != nil {
				c.fail(err)
				return err
			}
		}
		for _, p := range from {
			if err := recvFn(p); err != nil {
				c.fail(err)
				return err
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, len(to))
	for i, p := range to {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = send(p); errs[i] != nil {
				c.fail(errs[i])
			}
		}()
	}
	var rerr error
	for _, p := range from {
		if rerr = recvFn(p); rerr != nil {
			c.fail(rerr)
			break
		}
	}
	wg.Wait()
	if rerr != nil {
		return rerr
	}
	return errors.Join(errs...)
}

// closeLink closes a link without waiting on its peer: TLS sends a
// close_notify first, which would block for seconds on a peer that does
// not read.
func closeLink(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	c.Close()
}

// scratch returns n bytes of reusable scratch, 8-byte aligned for any
// dtype's reductions (at least 64 bytes, so that Go's tiny allocator,
// which aligns a few bytes only to their size, never hands it out).
func (c *Comm) scratch(n int) []byte {
	if cap(c.tmp) < n {
		c.tmp = make([]byte, max(n, 64))
	}
	return c.tmp[:n]
}

// gatherScratch returns n bytes (a uint8 view) of a tensor kept across
// calls, for the inputs of a gathered allreduce. A new tensor per call
// cost more than the collective at 16-64 KiB in process sessions: from
// 64 KiB up tensors come from the shared tensor arena (tensor
// SetHostAllocator), whose blocks are mapped and cleared when allocated.
func (c *Comm) gatherScratch(n int) *tensor.Tensor {
	if c.gathered == nil || int(c.gathered.NumBytes()) < n {
		c.gathered = tensor.MustNew(tensor.Uint8, tensor.Shape{int64(n)})
	}
	return view(c.gathered, 0, n)
}

// mate is the link to this rank's counterpart on host h (the rank of
// the same local rank there): the other leaders for a leader, the other
// rings' members on the multi-ring path.
func (c *Comm) mate(h int) *peer { return c.peers[c.hostLo[h]+c.lrank] }

// leaders are the links to the other hosts' leaders (leaders only).
func (c *Comm) leaders() []*peer {
	var out []*peer
	for h := range c.k {
		if h != c.me {
			out = append(out, c.peers[c.hostLo[h]])
		}
	}
	return out
}

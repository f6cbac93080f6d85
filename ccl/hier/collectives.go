package hier

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// kindAgree tags the leaders' descriptor exchange on the links.
const kindAgree ccl.Kind = 64

// descBytes: a rank's descriptor in the agreement round: bad-arguments
// flag, path, stripes, the collective's kind, dtype, op, root and count,
// the gathered maximum (smallMax), the multi-ring minimum, the stripe
// minimum, and the tuning (rhdMax, chunkBytes, ringMinChunk,
// ringInlineMax).
const descBytes = 72

// tuneNames name the tuning's sizes, in the descriptor's order.
var tuneNames = [4]string{"an RHD maximum", "a ring chunk", "a least ring chunk", "a ring inline maximum"}

// tuning is what the process's tuning says now: whether a size takes RHD
// (rhdMax), whether striped rings are balanced (ringMinChunk,
// ringInlineMax) and how the balanced ring numbers its chunks
// (chunkBytes, ringMinChunk). Ranks that differ would break the link
// protocol in the middle of a collective, so every agreement compares
// them.
func (c *Comm) tuning() [4]int {
	if c.testTuning != nil {
		return *c.testTuning
	}
	return [4]int{rhdMax, chunkBytes, ringMinChunk, ringInlineMax}
}

// putDesc fills a descriptor; c's settings that every rank must share
// travel with it.
func (c *Comm) putDesc(b []byte, d ccl.Desc, bad bool) {
	clear(b[:descBytes])
	if bad {
		b[0] = 1
	}
	b[1], b[2], b[3] = c.path, byte(c.stripes), c.pipeByte()
	binary.LittleEndian.PutUint64(b[24:], uint64(c.multiMin))
	binary.LittleEndian.PutUint64(b[32:], uint64(c.stripeMin))
	b[4], b[5], b[6] = byte(d.Kind), byte(d.DType), byte(d.Op)
	binary.LittleEndian.PutUint32(b[8:], uint32(d.Root))
	small := smallMax
	if c.testSmallMax != 0 {
		small = c.testSmallMax
	}
	binary.LittleEndian.PutUint32(b[12:], uint32(min(small, math.MaxUint32)))
	binary.LittleEndian.PutUint64(b[16:], uint64(d.Count))
	for i, v := range c.tuning() {
		binary.LittleEndian.PutUint64(b[40+8*i:], uint64(v))
	}
}

func getDesc(b []byte) (ccl.Desc, bool) {
	return ccl.Desc{Kind: ccl.Kind(b[4]), DType: tensor.DType(b[5]), Op: reduce.Op(b[6]),
		Root: int32(binary.LittleEndian.Uint32(b[8:])), Count: int64(binary.LittleEndian.Uint64(b[16:]))}, b[0] != 0
}

// view is t's bytes [off, off+n) as a uint8 tensor.
func view(t *tensor.Tensor, off, n int) *tensor.Tensor {
	v, err := t.View(int64(off), tensor.Uint8, tensor.Shape{int64(n)})
	if err != nil {
		panic(fmt.Sprintf("ccl/hier: internal view [%d, %d) of %d bytes: %v", off, off+n, t.NumBytes(), err))
	}
	return v
}

// gatherHosts makes every rank's block of blk bytes (src, a uint8
// tensor) known to every rank in all (n*blk bytes, rank order): through
// shared memory inside the host, between the leaders over the links,
// then a broadcast inside the host. kind tags the link messages.
func (c *Comm) gatherHosts(ctx context.Context, kind ccl.Kind, src, all *tensor.Tensor, blk int) error {
	mine := view(all, c.hostLo[c.me]*blk, c.l*blk)
	if c.l > 1 {
		if err := c.local.AllGather(ctx, src, mine); err != nil {
			return err
		}
	} else {
		copy(mine.Bytes(), src.Bytes())
	}
	if c.lrank == 0 && c.k > 1 {
		if err := c.gatherLeaders(kind, all.Bytes(), blk); err != nil {
			return err
		}
	}
	if c.l > 1 {
		return c.local.Broadcast(ctx, all, all, 0)
	}
	return nil
}

// gatherLeaders makes every host's block of ab (blk bytes per rank, in
// rank order) known to every leader: the agreement in Bruck rounds from
// bruckFrom hosts (bruck.go), anything else at once.
func (c *Comm) gatherLeaders(kind ccl.Kind, ab []byte, blk int) error {
	if kind == kindAgree && c.inRounds() {
		return c.gatherBruck(kind, ab, blk)
	}
	hostBytes := func(h int) []byte { return ab[c.hostLo[h]*blk : c.hostLo[h+1]*blk] }
	ls := c.leaders()
	return c.exchangeN(ls, func(p *peer) error {
		return c.send(p, kind, 0, 0, hostBytes(c.me))
	}, ls, func(p *peer) error {
		return c.recv(p, kind, hostBytes(c.hostOf[p.rank]), nil)
	}, c.l*blk)
}

// agreeInlineMax is the payload that rides with every rank's descriptor in
// the agreement round: allreduces up to this size finish in that one
// round (descriptors and data gathered together, reduced in rank order).
// A communicator keeps the value it was joined with (0 to MaxInline;
// below 0 counts as 0). It sizes every agreement message, so ranks on
// different hosts must have the same: a join whose ranks differ fails
// with ccl.ErrMismatch (the acceptor of each link compares the
// dialer's, from its hello).
var agreeInlineMax = 4096

// MaxInline bounds agreeInlineMax: every rank keeps a table of one block per
// rank, each agreeInlineMax bytes and a descriptor.
const MaxInline = 1 << 20

// testInlineMax, when set (tests only), stands in for agreeInlineMax by rank
// at Join: ranks of one test process that differ as processes could.
var testInlineMax func(rank int) int

// agree compares every rank's descriptor; all ranks reach the same
// verdict. local is this rank's own argument error; payload (at most
// agreeInlineMax bytes, else ignored) travels along and is found at
// c.inline(r) afterwards.
func (c *Comm) agree(ctx context.Context, d ccl.Desc, local error, payload []byte) error {
	c.pollFor(0)
	b := c.desc.Bytes()
	c.putDesc(b, d, local != nil)
	c.carried = false
	if len(payload) <= c.block-descBytes {
		copy(b[descBytes:], payload)
	}
	if c.n == c.k && c.k > 1 {
		if err := c.agreeOnePerHost(payload, c.carries(len(payload), local)); err != nil {
			return err
		}
	} else if err := c.gatherHosts(ctx, kindAgree, c.desc, c.table, c.block); err != nil {
		return err
	}
	if local != nil {
		return agreedErr{fmt.Errorf("ccl/hier: rank %d: %s: %w", c.rank, d.Kind, local)}
	}
	descs := make([]ccl.Desc, c.n)
	tb := c.table.Bytes()
	for r := range c.n {
		dr, bad := getDesc(tb[r*c.block:])
		if bad {
			return agreedErr{fmt.Errorf("%w: rank %d: %s: rank %d passed bad arguments", ccl.ErrMismatch, c.rank, d.Kind, r)}
		}
		descs[r] = dr
		if p := tb[r*c.block+1]; p != c.path {
			return agreedErr{fmt.Errorf("%w: rank %d: %s: rank %d takes the %s path, rank %d the %s path (the paths differ between their processes)",
				ccl.ErrMismatch, c.rank, d.Kind, r, pathName(p), c.rank, pathName(c.path))}
		}
		if m, my := binary.LittleEndian.Uint32(tb[r*c.block+12:]), binary.LittleEndian.Uint32(b[12:]); m != my {
			return agreedErr{fmt.Errorf("%w: rank %d: %s: rank %d gathers allreduces up to %d bytes, rank %d up to %d (the gathered maximum differs between their processes)",
				ccl.ErrMismatch, c.rank, d.Kind, r, m, c.rank, my)}
		}
		if m := binary.LittleEndian.Uint64(tb[r*c.block+24:]); m != uint64(c.multiMin) {
			return agreedErr{fmt.Errorf("%w: rank %d: %s: rank %d has a multi-ring minimum of %d bytes, rank %d of %d (the multi-ring minimum differs between their processes)",
				ccl.ErrMismatch, c.rank, d.Kind, r, m, c.rank, c.multiMin)}
		}
		if p, my := tb[r*c.block+3], c.pipeByte(); p != my {
			return agreedErr{fmt.Errorf("%w: rank %d: %s: rank %d pipelines multi-ring allreduces in groups of %s, rank %d of %s (the pipeline group size differs between their processes)",
				ccl.ErrMismatch, c.rank, d.Kind, r, pipeName(p), c.rank, pipeName(my))}
		}
		if s := int(tb[r*c.block+2]); s != c.stripes {
			return agreedErr{fmt.Errorf("%w: rank %d: %s: rank %d runs the leader ring in %d stripes, rank %d in %d (the stripes differ between their processes)",
				ccl.ErrMismatch, c.rank, d.Kind, r, s, c.rank, c.stripes)}
		}
		if m := binary.LittleEndian.Uint64(tb[r*c.block+32:]); m != uint64(c.stripeMin) {
			return agreedErr{fmt.Errorf("%w: rank %d: %s: rank %d stripes the leader ring from %d bytes, rank %d from %d (the stripe minimum differs between their processes)",
				ccl.ErrMismatch, c.rank, d.Kind, r, m, c.rank, c.stripeMin)}
		}
		for i := range tuneNames {
			// Against this rank's own descriptor (b), as smallMax above.
			if m, my := binary.LittleEndian.Uint64(tb[r*c.block+40+8*i:]), binary.LittleEndian.Uint64(b[40+8*i:]); m != my {
				return agreedErr{fmt.Errorf("%w: rank %d: %s: rank %d has %s of %d bytes, rank %d of %d (it differs between their processes)",
					ccl.ErrMismatch, c.rank, d.Kind, r, tuneNames[i], m, c.rank, my)}
			}
		}
	}
	if err := ccl.Compare(descs); err != nil {
		return agreedErr{fmt.Errorf("ccl/hier: rank %d: %w", c.rank, err)}
	}
	c.pollFor(int(d.Count) * d.DType.Size())
	return nil
}

// pipeByte is the descriptor's pipe byte: the bit length of c.pipe (a
// power of two or 0).
func (c *Comm) pipeByte() byte { return byte(bits.Len(uint(c.pipe))) }

// pipeName says what a descriptor's pipe byte (bits.Len of pipeBytes)
// means.
func pipeName(p byte) string {
	if p == 0 {
		return "the whole message (0)"
	}
	return byteSize(1 << (p - 1))
}

// inline is rank r's payload of the last agreement (n bytes).
func (c *Comm) inline(r, n int) []byte {
	off := r*c.block + descBytes
	return c.table.Bytes()[off : off+n]
}

// AllReduce reduces send over all ranks into recv.
func (c *Comm) AllReduce(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	if c.k == 1 {
		return c.local.AllReduce(ctx, send, recv, op)
	}
	return c.guard(ctx, ccl.KindAllReduce, func() error {
		a, local := ccl.CheckAllReduce(ccl.KindAllReduce, send, recv, op, c.n)
		if local != nil {
			a.Desc = ccl.Desc{Kind: ccl.KindAllReduce, Op: op}
			if send != nil {
				a.Desc.DType, a.Desc.Count = send.DType(), send.NumElements()
			}
		}
		if err := c.agree(ctx, a.Desc, local, a.Send); err != nil {
			return err
		}
		// Everyone may already have every input: reduce in rank order.
		if n := len(a.Send); c.carried {
			return reduceRows(op, a.DType, a.Recv, c.gathered.Bytes(), n, c.n)
		} else if n <= c.block-descBytes {
			ins := make([][]byte, c.n)
			for r := range ins {
				ins[r] = c.inline(r, n)
			}
			if n == 0 {
				return nil
			}
			return reduce.Reduce(op, a.DType, a.Recv, ins...)
		}
		return c.allReduce(ctx, a, send, recv, op)
	})
}

// allReduce moves the data of an agreed allreduce.
func (c *Comm) allReduce(ctx context.Context, a ccl.Args, send, recv *tensor.Tensor, op reduce.Op) error {
	size := len(a.Send)
	if size == 0 {
		return nil
	}
	if size <= c.gatherMax() {
		// Everyone gets every input and reduces them in rank order.
		all := c.gatherScratch(c.n * size)
		if err := c.gatherHosts(ctx, ccl.KindAllReduce, view(send, 0, size), all, size); err != nil {
			return err
		}
		return reduceRows(op, a.DType, a.Recv, all.Bytes(), size, c.n)
	}
	if c.path == pathMulti && size >= c.multiMin {
		return c.multiRing(ctx, a, send, recv, op)
	}
	sum := op
	if op == reduce.Avg {
		sum = reduce.Sum
	}
	// The leaders' algorithms read this rank's contribution from src and
	// write dst; with one rank per host that is the caller's send buffer
	// (no copy into recv first).
	src := a.Send
	if c.l > 1 {
		if err := c.local.AllReduce(ctx, send, recv, sum); err != nil {
			return err
		}
		src = a.Recv
	}
	if c.lrank == 0 {
		if err := c.hostsAllReduce(a.Recv, src, a.DType, sum, len(a.Recv)); err != nil {
			return err
		}
		if op == reduce.Avg {
			if err := reduce.Divide(a.DType, a.Recv, c.n); err != nil {
				return err
			}
		}
	}
	if c.l > 1 {
		return c.local.Broadcast(ctx, recv, recv, 0)
	}
	return nil
}

// reduceRows reduces the n ranks' inputs of size bytes each, in rank
// order in all, into dst.
func reduceRows(op reduce.Op, dt tensor.DType, dst, all []byte, size, n int) error {
	ins := make([][]byte, n)
	for r := range ins {
		ins[r] = all[r*size : (r+1)*size]
	}
	return reduce.Reduce(op, dt, dst, ins...)
}

// hostsAllReduce reduces src across this rank's counterparts (the same
// local rank) on every host into dst (src may be dst; both len(dst)
// bytes, part of a message of total bytes): the leaders on the leader
// path, local rank j's ring on the multi-ring path.
func (c *Comm) hostsAllReduce(dst, src []byte, dt tensor.DType, op reduce.Op, total int) error {
	switch {
	case c.useRHD(len(dst)):
		return c.rhd(dst, src, dt, op)
	case c.striped(len(dst), total):
		return c.stripedRing(dst, src, dt, op)
	}
	return c.ring(dst, src, dt, op)
}

// Ring pipelining: a segment (1/k of the message) travels in chunks of
// at most chunkBytes, and at least ringMinChunks of them (down to
// ringMinChunk bytes), so that even a few-MiB message keeps every link
// busy while chunks are reduced and forwarded.
const ringMinChunks = 4

// ringMinChunk is the smallest ring chunk.
var ringMinChunk = 32 << 10

// reducePieceBytes: the ring's reduce-scatter receives and reduces a chunk in
// pieces of this many bytes, so that the bytes the kernel has just copied into the
// scratch are still in the core's cache when the reduction reads them,
// and the scratch stays small; a 1 MiB chunk is as large as the L2 cache
// of the 2-vCPU VM's cores.
var reducePieceBytes = 128 << 10

// reducePiece is reducePieceBytes in whole elements of es bytes.
func reducePiece(es int) int { return max(es, reducePieceBytes/es*es) }

// ringChunk is the chunk of a ring over segments of seg bytes, in
// elements of es bytes.
func ringChunk(seg, es int) int {
	b := min(chunkBytes, max(seg/ringMinChunks, ringMinChunk))
	return max(1, b/es)
}

// ring: a pipelined ring between the leaders: k-1 reduce-scatter steps,
// then k-1 allgather steps, each moving one segment to the next leader.
// The steps are not separated: a sender goroutine streams chunk c of step
// t as soon as this rank has received (and, in the reduce-scatter,
// reduced) chunk c of step t-1, while this goroutine receives, so every
// link carries data continuously in both directions and the reductions
// overlap the transfers. Every step is one link message (the 24-byte
// header, checked by the receiver, then the segment's chunks).
//
// Received chunks of the reduce-scatter land in scratch, reducePieceBytes
// bytes at a time, each piece reduced with this rank's contribution (src)
// into dst while it is in cache; allgather chunks land in dst directly.
// Segment j is reduced along the ring in one order and then copied to
// every leader, so every rank gets the same bits.
func (c *Comm) ring(dst, src []byte, dt tensor.DType, op reduce.Op) error {
	k := c.k
	return c.ringOn(0, c.mate((c.me+1)%k), c.mate((c.me+k-1)%k), dst, src, dt, op)
}

// ringPlan is the layout of a ring over k leaders seen from leader h:
// the message (elems elements of es bytes) is cut into k segments of per
// elements, each travelling in nch chunks of ce elements; step t (of
// 2(k-1): the reduce-scatter, then the allgather) sends segment
// sendSeg(t) to the next leader and receives segment recvSeg(t) from the
// previous one.
type ringPlan struct{ k, h, es, elems, per, ce, nch int }

// newRingPlan lays out a ring over n bytes whose chunks are chunk(seg)
// elements for segments of seg bytes.
func newRingPlan(k, h, n, es int, chunk func(seg, es int) int) ringPlan {
	elems := n / es
	per := (elems + k - 1) / k
	ce := chunk(per*es, es)
	return ringPlan{k: k, h: h, es: es, elems: elems, per: per, ce: ce, nch: max(1, (per+ce-1)/ce)}
}

func (pl ringPlan) steps() int { return 2 * (pl.k - 1) }

// segment is segment j of b.
func (pl ringPlan) segment(b []byte, j int) []byte {
	return b[min(pl.elems, j*pl.per)*pl.es : min(pl.elems, (j+1)*pl.per)*pl.es]
}

// chunk is chunk i of segment j of b.
func (pl ringPlan) chunk(b []byte, j, i int) []byte {
	hi := min(pl.elems, (j+1)*pl.per)
	lo := min(hi, j*pl.per+i*pl.ce)
	return b[lo*pl.es : min(hi, lo+pl.ce)*pl.es]
}

func (pl ringPlan) segBytes(j int) int {
	return (min(pl.elems, (j+1)*pl.per) - min(pl.elems, j*pl.per)) * pl.es
}

func (pl ringPlan) mod(x int) int { return ((x % pl.k) + pl.k) % pl.k }

func (pl ringPlan) sendSeg(t int) int {
	if t < pl.k-1 {
		return pl.mod(pl.h - t)
	}
	return pl.mod(pl.h + 1 - (t - (pl.k - 1)))
}

func (pl ringPlan) recvSeg(t int) int {
	if t < pl.k-1 {
		return pl.mod(pl.h - t - 1)
	}
	return pl.mod(pl.h - (t - (pl.k - 1)))
}

// from is what step t sends from: the input at step 0, then what this
// rank received and reduced.
func (pl ringPlan) from(dst, src []byte, t int) []byte {
	if t == 0 {
		return src
	}
	return dst
}

// reduces reports whether step t is the reduce-scatter's.
func (pl ringPlan) reduces(t int) bool { return t < pl.k-1 }

func (pl ringPlan) kind(t int) ccl.Kind {
	if pl.reduces(t) {
		return ccl.KindAllReduce
	}
	return ccl.KindAllGather
}

// ringOn is ring over stripe s's links to the next and the previous
// rank, with stripe s's scratch (stripe.go runs several at once).
func (c *Comm) ringOn(s int, next, prev *peer, dst, src []byte, dt tensor.DType, op reduce.Op) error {
	pl := newRingPlan(c.k, c.me, len(dst), dt.Size(), ringChunk)
	if pl.per*pl.es <= ringInlineMax {
		return c.ringInline(s, next, prev, pl, dst, src, dt, op)
	}
	steps, nch := pl.steps(), pl.nch
	tmp := c.scratchOf(s, min(pl.ce*pl.es, reducePiece(pl.es)))
	ready := make(chan struct{}, steps*nch) // one token per received chunk, in order
	stop := make(chan struct{})             // closed when the receiver fails
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		serr = c.ringSend(next, steps, nch, ready, stop, func(t int) (ccl.Kind, int) {
			return pl.kind(t), pl.segBytes(pl.sendSeg(t))
		}, func(t, i int) []byte {
			return pl.chunk(pl.from(dst, src, t), pl.sendSeg(t), i)
		})
		if serr != nil {
			c.fail(serr)
		}
	}()
	rerr := func() error {
		for t := range steps {
			j := pl.recvSeg(t)
			if _, _, _, err := c.recvHdr(prev, pl.kind(t), pl.segBytes(j)); err != nil {
				return err
			}
			for i := range nch {
				if err := c.recvChunk(prev, pl, t, i, dst, src, tmp, dt, op); err != nil {
					return err
				}
				if testRingHook != nil {
					testRingHook(c, s, t, i)
				}
				ready <- struct{}{}
			}
		}
		return nil
	}()
	if rerr != nil {
		// Only on failure: a receiver that is done has handed the sender
		// every token it will wait for.
		close(stop)
		c.fail(rerr)
	}
	wg.Wait()
	// The one that failed the communicator first (the other, if any,
	// followed from it).
	return c.firstErr([]error{rerr, serr})
}

// recvChunk receives chunk i of step t's segment from p: in the
// reduce-scatter into tmp, a piece at a time, each reduced with this
// rank's contribution (src) into dst; in the allgather into dst.
func (c *Comm) recvChunk(p *peer, pl ringPlan, t, i int, dst, src, tmp []byte, dt tensor.DType, op reduce.Op) error {
	j := pl.recvSeg(t)
	out := pl.chunk(dst, j, i)
	if len(out) == 0 {
		return nil
	}
	if !pl.reduces(t) {
		return c.recvInto(p, out, nil)
	}
	mine := pl.chunk(src, j, i)
	for lo := 0; lo < len(out); lo += len(tmp) {
		hi := min(len(out), lo+len(tmp))
		in := tmp[:hi-lo]
		if err := c.recvInto(p, in, nil); err != nil {
			return err
		}
		if err := reduce.Reduce(op, dt, out[lo:hi], mine[lo:hi], in); err != nil {
			return err
		}
	}
	return nil
}

// testRingHook, when set (tests only), runs after every chunk a ring
// receives: chunk i of step t on stripe s (stripes run concurrently).
var testRingHook func(c *Comm, s, t, i int)

// ringInlineMax: a ring whose segments are at most this many bytes
// (0: never) runs on one goroutine per ring,
// which sends a step's segment in one write and then receives the
// next: no hand-off between a receiving and a sending goroutine, whose
// wake-up costs more than a small segment's transfer. It is safe
// without a separate sender for the same reason as inlineMax: the
// next rank's socket receive buffer holds one segment even while that
// rank is writing its own.
var ringInlineMax = inlineMax

// ringInline is ringOn for segments of at most ringInlineMax bytes.
func (c *Comm) ringInline(s int, next, prev *peer, pl ringPlan, dst, src []byte, dt tensor.DType, op reduce.Op) error {
	tmp := c.scratchOf(s, min(ringInlineMax, len(dst)))
	err := func() error {
		for t := range pl.steps() {
			if err := c.send(next, pl.kind(t), 0, 0, pl.segment(pl.from(dst, src, t), pl.sendSeg(t))); err != nil {
				return err
			}
			j := pl.recvSeg(t)
			out := pl.segment(dst, j)
			if !pl.reduces(t) {
				if err := c.recv(prev, pl.kind(t), out, nil); err != nil {
					return err
				}
			} else {
				in := tmp[:len(out)]
				if err := c.recv(prev, pl.kind(t), in, nil); err != nil {
					return err
				}
				if err := reduce.Reduce(op, dt, out, pl.segment(src, j), in); err != nil {
					return err
				}
			}
			if testRingHook != nil {
				testRingHook(c, s, t, 0)
			}
		}
		return nil
	}()
	if err != nil {
		c.fail(err)
	}
	return err
}

// ringSend streams the ring's steps to p: step t's header, then its
// chunks; chunk i of step t >= 1 waits for the receiver's token of chunk
// i of step t-1 (tokens arrive in order, nch per step).
func (c *Comm) ringSend(p *peer, steps, nch int, ready, stop <-chan struct{}, head func(t int) (ccl.Kind, int), chunk func(t, i int) []byte) error {
	got := 0
	for t := range steps {
		kind, n := head(t)
		if err := c.sendHdr(p, kind, 0, n); err != nil {
			return err
		}
		for i := range nch {
			for t > 0 && got < (t-1)*nch+i+1 {
				select {
				case <-ready:
					got++
				case <-stop:
					return nil // the receiver failed; its error is the one returned
				}
			}
			if b := chunk(t, i); len(b) > 0 {
				if err := c.sendChunk(p, b); err != nil {
					return err
				}
			}
		}
		if n == 0 {
			if err := c.flush(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// rhd: recursive halving (reduce-scatter) then doubling (allgather)
// between a power-of-two number of leaders.
func (c *Comm) rhd(buf, src []byte, dt tensor.DType, op reduce.Op) error {
	es := dt.Size()
	lo, hi := 0, len(buf)/es // my range, in elements
	type span struct{ lo, hi, plo, phi int }
	var steps []span
	tmp := c.scratch((len(buf)/es/2 + 1) * es)
	for mask := c.k / 2; mask >= 1; mask /= 2 {
		partner := c.mate(c.me ^ mask)
		mid := lo + (hi-lo)/2
		keepLo, keepHi, giveLo, giveHi := lo, mid, mid, hi
		if c.me&mask != 0 {
			keepLo, keepHi, giveLo, giveHi = mid, hi, lo, mid
		}
		keep, give := buf[keepLo*es:keepHi*es], buf[giveLo*es:giveHi*es]
		mine := keep
		if len(steps) == 0 {
			// First step: this rank's contribution is still in src.
			give, mine = src[giveLo*es:giveHi*es], src[keepLo*es:keepHi*es]
		}
		t := tmp[:len(keep)]
		// Steps of at most inlineMax run on this goroutine (send, then
		// receive), larger ones send from another.
		err := c.exchangeN([]*peer{partner}, func(p *peer) error {
			return c.send(p, ccl.KindReduceScatter, dt, 0, give)
		}, []*peer{partner}, func(p *peer) error {
			if _, _, _, err := c.recvHdr(p, ccl.KindReduceScatter, len(t)); err != nil {
				return err
			}
			// In pieces, reduced while the next arrives.
			return c.recvPieces(p, t, reducePiece(es), func(a, b int) error {
				return reduce.Reduce(op, dt, keep[a:b], mine[a:b], t[a:b])
			})
		}, max(len(give), len(t)))
		if err != nil {
			return err
		}
		steps = append(steps, span{keepLo, keepHi, giveLo, giveHi})
		lo, hi = keepLo, keepHi
	}
	for i := len(steps) - 1; i >= 0; i-- {
		st := steps[i]
		partner := c.mate(c.me ^ (c.k >> (i + 1)))
		mine, theirs := buf[st.lo*es:st.hi*es], buf[st.plo*es:st.phi*es]
		err := c.exchangeN([]*peer{partner}, func(p *peer) error {
			return c.send(p, ccl.KindAllGather, dt, 0, mine)
		}, []*peer{partner}, func(p *peer) error {
			return c.recv(p, ccl.KindAllGather, theirs, nil)
		}, max(len(mine), len(theirs)))
		if err != nil {
			return err
		}
	}
	return nil
}

// ReduceScatter reduces send over all ranks; rank r keeps block r. It
// reduces the whole buffer (through a temporary) and keeps its block.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error {
	if c.k == 1 {
		return c.local.ReduceScatter(ctx, send, recv, op)
	}
	return c.guard(ctx, ccl.KindReduceScatter, func() error {
		a, local := ccl.CheckAllReduce(ccl.KindReduceScatter, send, recv, op, c.n)
		if local != nil {
			a.Desc = ccl.Desc{Kind: ccl.KindReduceScatter, Op: op}
			if send != nil {
				a.Desc.DType, a.Desc.Count = send.DType(), send.NumElements()
			}
		}
		if err := c.agree(ctx, a.Desc, local, nil); err != nil {
			return err
		}
		tmp, err := tensor.New(send.DType(), send.Shape())
		if err != nil {
			return err
		}
		ta := a
		ta.Recv = tmp.Bytes()
		if err := c.allReduce(ctx, ta, send, tmp, op); err != nil {
			return err
		}
		blk := len(a.Recv)
		copy(a.Recv, ta.Recv[c.rank*blk:(c.rank+1)*blk])
		return nil
	})
}

// AllGather concatenates every rank's send into recv.
func (c *Comm) AllGather(ctx context.Context, send, recv *tensor.Tensor) error {
	if c.k == 1 {
		return c.local.AllGather(ctx, send, recv)
	}
	return c.guard(ctx, ccl.KindAllGather, func() error {
		a, local := ccl.CheckAllGather(send, recv, c.n)
		if local != nil {
			a.Desc = ccl.Desc{Kind: ccl.KindAllGather}
			if send != nil {
				a.Desc.DType, a.Desc.Count = send.DType(), send.NumElements()
			}
		}
		if err := c.agree(ctx, a.Desc, local, nil); err != nil {
			return err
		}
		if len(a.Send) == 0 {
			return nil
		}
		return c.gatherHosts(ctx, ccl.KindAllGather, view(send, 0, len(a.Send)), view(recv, 0, len(a.Recv)), len(a.Send))
	})
}

func (c *Comm) Broadcast(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	if c.k == 1 {
		return c.local.Broadcast(ctx, send, recv, root)
	}
	return c.guard(ctx, ccl.KindBroadcast, func() error {
		a, local := ccl.CheckRooted(ccl.KindBroadcast, send, recv, root, c.rank, c.n)
		if local != nil {
			a.Desc = ccl.Desc{Kind: ccl.KindBroadcast, Root: int32(root)}
		}
		if err := c.agree(ctx, a.Desc, local, nil); err != nil {
			return err
		}
		return c.broadcast(ctx, send, recv, root, len(a.Recv))
	})
}

// broadcast moves root's send into every rank's recv (size bytes).
func (c *Comm) broadcast(ctx context.Context, send, recv *tensor.Tensor, root, size int) error {
	if size == 0 {
		return nil
	}
	rh := c.hostOf[root]
	if c.me == rh {
		if c.l > 1 {
			if err := c.local.Broadcast(ctx, send, recv, root-c.hostLo[rh]); err != nil {
				return err
			}
		} else if send != recv {
			copy(recv.Bytes(), send.Bytes())
		}
	}
	if c.lrank == 0 {
		rb := recv.Bytes()[:size]
		if c.me == rh {
			if err := c.exchange(c.leaders(), func(p *peer) error {
				return c.send(p, ccl.KindBroadcast, 0, 0, rb)
			}, nil, nil); err != nil {
				return err
			}
		} else if err := c.recv(c.peers[c.hostLo[rh]], ccl.KindBroadcast, rb, nil); err != nil {
			return err
		}
	}
	if c.me != rh && c.l > 1 {
		return c.local.Broadcast(ctx, recv, recv, 0)
	}
	return nil
}

// Scatter broadcasts root's whole buffer (through a temporary) and every
// rank keeps its part.
func (c *Comm) Scatter(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	if c.k == 1 {
		return c.local.Scatter(ctx, send, recv, root)
	}
	return c.guard(ctx, ccl.KindScatter, func() error {
		a, local := ccl.CheckRooted(ccl.KindScatter, send, recv, root, c.rank, c.n)
		if local != nil {
			a.Desc = ccl.Desc{Kind: ccl.KindScatter, Root: int32(root)}
		}
		if err := c.agree(ctx, a.Desc, local, nil); err != nil {
			return err
		}
		blk := int(a.Count) * a.DType.Size()
		if blk == 0 {
			return nil
		}
		all := tensor.MustNew(tensor.Uint8, tensor.Shape{int64(c.n * blk)})
		var src *tensor.Tensor
		if c.rank == root {
			src = view(send, 0, c.n*blk)
		}
		if err := c.broadcast(ctx, src, all, root, c.n*blk); err != nil {
			return err
		}
		copy(a.Recv, all.Bytes()[c.rank*blk:(c.rank+1)*blk])
		return nil
	})
}

// Gather allgathers (through a temporary on non-roots).
func (c *Comm) Gather(ctx context.Context, send, recv *tensor.Tensor, root int) error {
	if c.k == 1 {
		return c.local.Gather(ctx, send, recv, root)
	}
	return c.guard(ctx, ccl.KindGather, func() error {
		a, local := ccl.CheckRooted(ccl.KindGather, send, recv, root, c.rank, c.n)
		if local != nil {
			a.Desc = ccl.Desc{Kind: ccl.KindGather, Root: int32(root)}
		}
		if err := c.agree(ctx, a.Desc, local, nil); err != nil {
			return err
		}
		blk := len(a.Send)
		if blk == 0 {
			return nil
		}
		var all *tensor.Tensor
		if c.rank == root {
			all = view(recv, 0, c.n*blk)
		} else {
			all = tensor.MustNew(tensor.Uint8, tensor.Shape{int64(c.n * blk)})
		}
		return c.gatherHosts(ctx, ccl.KindGather, view(send, 0, blk), all, blk)
	})
}

// Barrier returns once every rank has called it.
func (c *Comm) Barrier(ctx context.Context) error {
	if c.k == 1 {
		return c.local.Barrier(ctx)
	}
	return c.guard(ctx, ccl.KindBarrier, func() error {
		return c.agree(ctx, ccl.Desc{Kind: ccl.KindBarrier}, nil, nil)
	})
}

// Send delivers t to peer (same host: shared memory; else the link,
// after the receiver confirmed dtype and size).
func (c *Comm) Send(ctx context.Context, t *tensor.Tensor, peer int) error {
	if err := ccl.CheckPeer(peer, c.rank, c.n); err != nil {
		return err
	}
	if c.hostOf[peer] == c.me {
		return c.local.Send(ctx, t, peer-c.hostLo[c.me])
	}
	if t == nil {
		return fmt.Errorf("%w: send tensor is nil", ccl.ErrBadArgs)
	}
	data, err := t.HostBytes()
	if err != nil {
		return fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
	}
	return c.guard(ctx, ccl.KindSend, func() error {
		c.pollFor(len(data))
		p := c.peers[peer]
		if err := c.send(p, ccl.KindSend, t.DType(), 0, u64(len(data))); err != nil {
			return err
		}
		_, st, _, err := c.recvHdr(p, ccl.KindRecv, 0)
		if err != nil {
			return err
		}
		if st != 0 {
			return agreedErr{fmt.Errorf("%w: rank %d sends %s of %d bytes, rank %d expects something else", ccl.ErrMismatch, c.rank, t.DType(), len(data), peer)}
		}
		return c.send(p, ccl.KindSend, t.DType(), 0, data)
	})
}

func u64(n int) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(n)) }

// Recv receives into t from peer.
func (c *Comm) Recv(ctx context.Context, t *tensor.Tensor, peer int) error {
	if err := ccl.CheckPeer(peer, c.rank, c.n); err != nil {
		return err
	}
	if c.hostOf[peer] == c.me {
		return c.local.Recv(ctx, t, peer-c.hostLo[c.me])
	}
	if t == nil {
		return fmt.Errorf("%w: recv tensor is nil", ccl.ErrBadArgs)
	}
	data, err := t.HostBytes()
	if err != nil {
		return fmt.Errorf("%w: %v", ccl.ErrBadArgs, err)
	}
	return c.guard(ctx, ccl.KindRecv, func() error {
		c.pollFor(len(data))
		p := c.peers[peer]
		dt, _, _, err := c.recvHdr(p, ccl.KindSend, 8)
		if err != nil {
			return err
		}
		var sz [8]byte
		if err := c.recvInto(p, sz[:], nil); err != nil {
			return err
		}
		n := binary.LittleEndian.Uint64(sz[:])
		if dt != t.DType() || n != uint64(len(data)) {
			if err := c.send(p, ccl.KindRecv, 0, 1, nil); err != nil {
				return err
			}
			return agreedErr{fmt.Errorf("%w: rank %d expected %s of %d bytes from rank %d, which sends %s of %d bytes", ccl.ErrMismatch, c.rank, t.DType(), len(data), peer, dt, n)}
		}
		if err := c.send(p, ccl.KindRecv, 0, 0, nil); err != nil {
			return err
		}
		return c.recv(p, ccl.KindSend, data, nil)
	})
}

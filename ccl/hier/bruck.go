package hier

import (
	"encoding/binary"
	"fmt"

	"github.com/chorus-rt/chorus/ccl"
)

// The agreement between the leaders in rounds. Every collective starts
// with the agreement round, which makes every host's descriptors (and
// inline or carried payloads) known to every leader. Sent to every other
// leader at once (an all-to-all), that is k-1 messages per leader per
// call. From bruckFrom (8) hosts on, the leaders
// run Bruck et al.'s allgather instead: ceil(log2 k) rounds of one
// message each. In the round of distance d (1, 2, 4, ... < k), leader me
// sends the blocks of hosts me, me+1, ..., me+cnt-1 (mod k; cnt = min(d,
// k-d)) to leader me-d, and receives those of hosts me+d, ...,
// me+d+cnt-1 from leader me+d; after it, it holds min(2d, k) hosts'
// blocks. It moves the same bytes as the all-to-all ((k-1) blocks in and
// out) in fewer messages (3 instead of 7 on 8 hosts), one round after
// another.
//
// Measured (the 16-core host's namespaces, 10 Gbit/s tbf,
// TLS, two calls, the all-to-all build right before; docs/multi-host.md):
// on 8 hosts rounds made 1-4 KiB allreduces 1.14-1.52x faster and the
// agreement before a 64 KiB RHD 1.05-1.39x; on 4 hosts they were no
// faster (1 KiB 0.83-0.93x, 4 KiB 0.93-1.22x): a message costs the
// sender little next to a round's latency until there are many of them.
// Inputs carried in the rounds were slower (16 KiB: 0.60-0.84x; each
// round waits for the last one's bytes), and so were gathers of data
// after them: from 8 hosts the agreement runs in rounds and carries no
// input, only inline allreduces are gathered (gatherMax), and the
// gathers of data (allgathers) stay all-to-all.

// bruckFrom: the leaders' agreement runs in Bruck rounds from this many
// hosts on. Every rank decides alike from the
// communicator's layout (the id); tests lower it to run the rounds on
// two or three hosts.
var bruckFrom = 8

// inRounds says whether this communicator's agreement runs in Bruck
// rounds (and so carries nothing and gathers only inline allreduces).
func (c *Comm) inRounds() bool { return c.k >= bruckFrom }

// bruckRound is one round: send the blocks of cnt hosts from this host
// on to to, receive cnt hosts' blocks from host me+d on from from.
type bruckRound struct {
	d, cnt   int
	to, from *peer
}

// bruckRounds are this leader's rounds.
func (c *Comm) bruckRounds() []bruckRound {
	var rs []bruckRound
	for d := 1; d < c.k; d *= 2 {
		rs = append(rs, bruckRound{d: d, cnt: min(d, c.k-d), to: c.mate((c.me + c.k - d) % c.k), from: c.mate((c.me + d) % c.k)})
	}
	return rs
}

// hostSpan is the bytes of hosts a, a+1, ..., a+cnt-1 (mod k) in a
// host-ordered table of blk bytes per rank: one piece, or two where the
// hosts wrap around.
func (c *Comm) hostSpan(tb []byte, blk, a, cnt int) [][]byte {
	if a+cnt <= c.k {
		return [][]byte{tb[c.hostLo[a]*blk : c.hostLo[a+cnt]*blk]}
	}
	return [][]byte{tb[c.hostLo[a]*blk : c.hostLo[c.k]*blk], tb[:c.hostLo[a+cnt-c.k]*blk]}
}

func spanBytes(bs [][]byte) int {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	return n
}

// gatherBruck is the leaders' part of gatherHosts in Bruck rounds: tb
// holds this host's block (blk bytes per rank) and gets every other
// host's.
func (c *Comm) gatherBruck(kind ccl.Kind, tb []byte, blk int) error {
	for _, rd := range c.bruckRounds() {
		out, in := c.hostSpan(tb, blk, c.me, rd.cnt), c.hostSpan(tb, blk, (c.me+rd.d)%c.k, rd.cnt)
		if len(out) > 1 {
			c.bruckBuf = append(append(c.bruckBuf[:0], out[0]...), out[1]...)
			out = [][]byte{c.bruckBuf}
		}
		size := spanBytes(in)
		err := c.exchangeN([]*peer{rd.to}, func(p *peer) error {
			return c.send(p, kind, 0, 0, out[0])
		}, []*peer{rd.from}, func(p *peer) error {
			if _, _, _, err := c.recvHdr(p, kind, size); err != nil {
				return err
			}
			for _, b := range in {
				if err := c.recvInto(p, b, nil); err != nil {
					return err
				}
			}
			return nil
		}, max(len(out[0]), size))
		if err != nil {
			return err
		}
	}
	return nil
}

// The agreement in Bruck rounds with one rank per host (rank r is host
// r). A round's message holds cnt records, one per rank, each a 4-byte
// length and what agreeOnePerHost's message for that rank holds without
// carrying: a descriptor and an inline payload. No input is carried: from
// bruckFrom hosts only inline allreduces are gathered (gatherMax).
const recHdrBytes = 4

// gatherMax: allreduces of at most this many bytes are gathered (every
// input to every rank, reduced in rank order). From bruckFrom hosts that
// is only those that ride in the agreement (agreeInlineMax); larger ones take
// RHD or the ring. On 8 hosts a 16 KiB allreduce took 225 us by RHD and
// 239-258 us carried in an all-to-all agreement, but 386-396 us carried
// through Bruck rounds (docs/multi-host.md).
func (c *Comm) gatherMax() int {
	if c.inRounds() {
		return min(smallMax, c.block-descBytes)
	}
	return smallMax
}

// agreeBruck is agreeOnePerHost in Bruck rounds.
func (c *Comm) agreeBruck(payload []byte) error {
	tb := c.table.Bytes()
	copy(tb[c.rank*c.block:(c.rank+1)*c.block], c.desc.Bytes())
	if cap(c.recLen) < c.k {
		c.recLen = make([]int, c.k)
	}
	ln := c.recLen[:c.k]
	ln[c.rank] = descBytes
	if len(payload) <= c.block-descBytes {
		ln[c.rank] += len(payload)
	}
	for _, rd := range c.bruckRounds() {
		msg := c.bruckBuf[:0]
		for i := range rd.cnt {
			r := (c.me + i) % c.k
			msg = binary.LittleEndian.AppendUint32(msg, uint32(ln[r]))
			msg = append(msg, tb[r*c.block:r*c.block+ln[r]]...)
		}
		c.bruckBuf = msg
		first := (c.me + rd.d) % c.k
		err := c.exchangeN([]*peer{rd.to}, func(p *peer) error {
			return c.send(p, kindAgree, 0, statusRecords, msg)
		}, []*peer{rd.from}, func(p *peer) error {
			return c.recvRecords(p, first, rd.cnt)
		}, len(msg))
		if err != nil {
			return err
		}
	}
	return nil
}

// statusRecords marks a records message (header status byte).
const statusRecords = 2

// recvRecords reads a records message from p: the records of ranks
// first, first+1, ..., first+cnt-1 (mod k) into their rows of c.table
// and their lengths into c.recLen. A message that is not cnt records,
// each a descriptor and at most the block's inline payload, breaks the
// link protocol: nothing past the bad record's length is read.
func (c *Comm) recvRecords(p *peer, first, cnt int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: ccl/hier: rank %d: link protocol: rank %d's agreement: %s", ccl.ErrFailed, c.rank, p.rank, fmt.Sprintf(format, args...))
	}
	_, status, m, err := c.recvHdr(p, kindAgree, -1)
	if err != nil {
		return err
	}
	if limit := cnt * (recHdrBytes + c.block); status != statusRecords || m > limit {
		return bad("%d bytes, status %d (want status %d, at most %d bytes)", m, status, statusRecords, limit)
	}
	tb := c.table.Bytes()
	left := m
	var h [recHdrBytes]byte
	for i := range cnt {
		r := (first + i) % c.k
		if left < recHdrBytes {
			return bad("%d bytes left for %d more records", left, cnt-i)
		}
		if err := c.recvInto(p, h[:], nil); err != nil {
			return err
		}
		l := int(binary.LittleEndian.Uint32(h[:]))
		left -= recHdrBytes
		if l < descBytes || l > c.block || l > left {
			return bad("record of rank %d: %d bytes (%d left)", r, l, left)
		}
		left -= l
		c.recLen[r] = l
		if err := c.recvInto(p, tb[r*c.block:r*c.block+l], nil); err != nil {
			return err
		}
	}
	if left != 0 {
		return bad("%d bytes after %d records", left, cnt)
	}
	return nil
}

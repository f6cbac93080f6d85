package hier

import (
	"fmt"

	"github.com/chorus-rt/chorus/ccl"
)

// Carried inputs. An allreduce of more than agreeInlineMax bytes and at most
// smallMax is gathered: every rank's input reaches every rank, which
// reduces them in rank order. That used to take two rounds between the
// hosts, the agreement (descriptors) and then the inputs. When every host
// runs one rank (c.n == c.k, known to every rank from the id), the
// agreement message carries the input after the descriptor, so such an
// allreduce is one round between hosts, as the inline ones are. From
// bruckFrom (8) hosts the agreement runs in rounds and nothing is carried
// (bruck.go says why).
//
// Nothing is written to the output before every descriptor agrees: the
// inputs land in the gathered scratch. Carrying is each rank's own choice
// (carryMaxBytes): a rank that receives an agreement message without an input
// from some rank, or with one of another size, runs the usual gather
// round, and so does every other rank, since every rank sees every
// rank's message; so ranks need not agree on carryMaxBytes.

// carryMaxBytes: allreduces of at most this many bytes carry their input in
// the agreement round where they can (0: never);
// never more than smallMax (16 KiB by default, so that is the limit). A communicator keeps the value it was joined
// with. The default keeps a carried message inline (sent in one write
// before the receives, as the agreement is): on the 16-core host's
// namespaces 8-16 KiB allreduces got 1.5-1.9x faster on 2 and 4 hosts,
// while carrying 64 KiB was 1.1-1.2x slower on 2 hosts (and faster on 4)
// than agreeing first (docs/multi-host.md).
var carryMaxBytes = inlineMax - descBytes

// statusCarry marks an agreement message whose descriptor is followed by
// the rank's input (header status byte).
const statusCarry = 1

// carries says whether an agreement with a payload of bytes bytes
// carries it (local: this rank's own argument error).
func (c *Comm) carries(bytes int, local error) bool {
	return local == nil && bytes > c.block-descBytes && bytes <= min(c.carryMax, c.gatherMax())
}

// agreeOnePerHost is the agreement round between hosts that run one rank
// each: every rank's descriptor, and its payload where that is inline
// (at most agreeInlineMax bytes), lands in its row of c.table. With carry, this
// rank's input (payload) follows its descriptor, and the inputs of every
// rank that carried one of len(payload) bytes land in the gathered
// scratch (rank order); c.carried says whether all did. A rank accepts
// both kinds of message whether it carries or not.
func (c *Comm) agreeOnePerHost(payload []byte, carry bool) error {
	if c.inRounds() {
		return c.agreeBruck(payload) // carry is false there (gatherMax)
	}
	n := len(payload)
	var all []byte
	tb := c.table.Bytes()
	copy(tb[c.rank*c.block:(c.rank+1)*c.block], c.desc.Bytes())
	// Without carrying, the message is the descriptor and the payload if
	// it is inline (the rest of the block is not sent).
	msg, status := c.desc.Bytes()[:descBytes], byte(0)
	if len(payload) <= c.block-descBytes {
		msg = c.desc.Bytes()[:descBytes+len(payload)]
	}
	if carry {
		all = c.gatherScratch(c.n * n).Bytes()
		copy(all[c.rank*n:], payload)
		c.carryBuf = append(append(c.carryBuf[:0], c.desc.Bytes()[:descBytes]...), payload...)
		msg, status = c.carryBuf, statusCarry
	}
	ls := c.leaders()
	got := 0 // peers whose input arrived
	err := c.exchangeN(ls, func(p *peer) error {
		return c.send(p, kindAgree, 0, status, msg)
	}, ls, func(p *peer) error {
		var into []byte
		if carry {
			into = all[p.rank*n : (p.rank+1)*n]
		}
		filled, err := c.recvAgreement(p, tb[p.rank*c.block:(p.rank+1)*c.block], into)
		if filled {
			got++ // receives run in order on this goroutine
		}
		return err
	}, len(msg))
	if err != nil {
		return err
	}
	c.carried = carry && got == len(ls)
	return nil
}

// recvAgreement reads rank p's agreement message: its descriptor, and an
// inline payload, into row (c.block bytes), and a carried input of
// len(into) bytes into into (nil: none wanted). It says whether into was
// filled. A message that is neither kind, or longer than its kind allows,
// breaks the link protocol: nothing past its header is read.
func (c *Comm) recvAgreement(p *peer, row, into []byte) (bool, error) {
	_, st, m, err := c.recvHdr(p, kindAgree, -1)
	if err != nil {
		return false, err
	}
	switch {
	case st == 0 && m >= descBytes && m <= len(row):
		// An inline payload that the descriptors say is not this
		// allreduce's size is never read.
		return false, c.recvInto(p, row[:m], nil)
	case st == statusCarry && m > descBytes && m-descBytes <= smallMax:
	default:
		return false, fmt.Errorf("%w: ccl/hier: rank %d: link protocol: rank %d sent an agreement of %d bytes (status %d)", ccl.ErrFailed, c.rank, p.rank, m, st)
	}
	if err := c.recvInto(p, row[:descBytes], nil); err != nil {
		return false, err
	}
	if into != nil && m-descBytes == len(into) {
		return true, c.recvInto(p, into, nil)
	}
	// Not wanted here: this rank did not carry, or the sizes differ (then
	// the descriptors disagree and the round fails).
	return false, c.recvInto(p, make([]byte, m-descBytes), nil)
}

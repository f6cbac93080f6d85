package hier

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

// TestBruckRounds: on 2 to 17 hosts every leader's rounds hand every
// block to every leader exactly once, each round's sends match the
// receives of the leader they go to, and there are ceil(log2 k) rounds.
func TestBruckRounds(t *testing.T) {
	for k := 2; k <= 17; k++ {
		comms := make([]*Comm, k)
		peers := make([]*peer, k)
		lo := make([]int, k+1)
		for h := range k {
			peers[h], lo[h+1] = &peer{rank: h}, h+1
		}
		for h := range k {
			comms[h] = &Comm{k: k, me: h, hostLo: lo, peers: peers}
		}
		held := make([][]int, k) // held[h][b]: how often h got b's block
		for h := range k {
			held[h] = make([]int, k)
			held[h][h] = 1
		}
		rounds := comms[0].bruckRounds()
		if want := bits.Len(uint(k - 1)); len(rounds) != want {
			t.Fatalf("k=%d: %d rounds, want %d", k, len(rounds), want)
		}
		for i := range rounds {
			next := make([][]int, k)
			for h := range k {
				next[h] = append([]int(nil), held[h]...)
			}
			for h := range k {
				rd := comms[h].bruckRounds()[i]
				to := rd.to.rank
				// What h sends must be what to expects from h.
				back := comms[to].bruckRounds()[i]
				if back.from.rank != h || back.cnt != rd.cnt {
					t.Fatalf("k=%d round %d: %d sends to %d, which receives from %d", k, i, h, to, back.from.rank)
				}
				for j := range rd.cnt {
					b := (h + j) % k
					if held[h][b] == 0 {
						t.Fatalf("k=%d round %d: %d sends block %d it does not hold", k, i, h, b)
					}
					if want := (to + rd.d + j) % k; want != b {
						t.Fatalf("k=%d round %d: %d expects block %d, gets %d", k, i, to, want, b)
					}
					next[to][b]++
				}
			}
			held = next
		}
		for h := range k {
			for b, n := range held[h] {
				if n != 1 {
					t.Fatalf("k=%d: leader %d got block %d %d times", k, h, b, n)
				}
			}
		}
	}
}

// sent is how many link messages c's rank has sent on its own links.
func sent(c *Comm) uint64 {
	var n uint64
	for _, p := range c.peers {
		if p != nil {
			n += p.out
		}
	}
	return n
}

// TestBruckCollectives: with the agreement in Bruck rounds (from 2 hosts
// on) and without, allreduces of every kind of path (inline, carried
// below bruckFrom, gathered, RHD or ring) and allgathers give the
// float64 reference's results with the same bits everywhere; from
// bruckFrom hosts nothing above agreeInlineMax is carried or gathered;
// mismatched or bad arguments fail every rank together; and a leader
// sends ceil(log2 k) messages for an agreement in rounds, k-1 without.
func TestBruckCollectives(t *testing.T) {
	leaktest.Check(t)
	defer func(a, in, cm, bf int) { smallMax, agreeInlineMax, carryMaxBytes, bruckFrom = a, in, cm, bf }(smallMax, agreeInlineMax, carryMaxBytes, bruckFrom)
	smallMax, agreeInlineMax, carryMaxBytes = 4096, 64, 2048
	// One stripe: the worlds' links all shake hands with one endpoint.
	testStripes = func(int) string { return "1" }
	defer func() { testStripes = nil }()
	ctx := context.Background()
	for _, lay := range [][]int{{1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1}, {2, 1, 1, 3, 1}, {1, 1, 1, 1, 1, 1, 1}} {
		for _, from := range []int{2, 1 << 30} {
			bruckFrom = from
			comms := world(t, lay, 10*time.Second)
			k := len(lay)
			name := fmt.Sprintf("%v/bruck from %d", lay, from)
			for _, count := range []int64{3, 17, 300, 1025, 4000} { // inline, carried, carried, gathered, RHD or ring
				checkAllReduce(t, fmt.Sprintf("%s/%d floats", name, count), comms, tensor.Float32, reduce.Sum, count, uint64(count), func(r int) bool { return r == 0 })
				// 1200 bytes: carried below bruckFrom hosts (one rank per
				// host), RHD or the ring from bruckFrom on.
				if count != 300 {
					continue
				}
				path := comms[0].PathFor(ccl.KindAllReduce, 1200)
				switch {
				case k >= from && (comms[0].carried || path == "carried" || path == "gathered"):
					t.Fatalf("%s: 1200 bytes in Bruck rounds: carried %v, path %q", name, comms[0].carried, path)
				case k < from && len(comms) == k && (!comms[0].carried || path != "carried"):
					t.Fatalf("%s: 1200 bytes not carried (path %q)", name, path)
				}
			}
			for _, blk := range []int64{5, 3000} {
				outs := make([]*tensor.Tensor, len(comms))
				ins := make([]*tensor.Tensor, len(comms))
				must(t, each(comms, func(r int, c *Comm) error {
					ins[r] = tensor.MustNew(tensor.Int32, tensor.Shape{blk})
					fill(ins[r], r, 5)
					outs[r] = tensor.MustNew(tensor.Int32, tensor.Shape{blk * int64(len(comms))})
					tensor.Poison(outs[r])
					return c.AllGather(ctx, ins[r], outs[r])
				}))
				for r := range comms {
					for q := range comms {
						if string(outs[r].Bytes()[int64(q)*blk*4:int64(q+1)*blk*4]) != string(ins[q].Bytes()) {
							t.Fatalf("%s: allgather of %d: rank %d block %d", name, blk, r, q)
						}
					}
				}
			}
			// Messages per agreement: a barrier is one.
			before := sent(comms[0])
			must(t, each(comms, func(r int, c *Comm) error { return c.Barrier(ctx) }))
			want := uint64(k - 1)
			if k >= from {
				want = uint64(bits.Len(uint(k - 1)))
			}
			if got := sent(comms[0]) - before; got != want {
				t.Fatalf("%s: a barrier took %d messages from rank 0, want %d", name, got, want)
			}
			// Mismatched counts on the last rank; bad arguments on rank 1.
			for _, bad := range []bool{false, true} {
				errs := each(comms, func(r int, c *Comm) error {
					n, m := int64(300), int64(300)
					if !bad && r == len(comms)-1 {
						n, m = 301, 301
					}
					if bad && r == 1 {
						m = 299
					}
					return c.AllReduce(ctx, tensor.MustNew(tensor.Float32, tensor.Shape{n}), tensor.MustNew(tensor.Float32, tensor.Shape{m}), reduce.Sum)
				})
				for r, err := range errs {
					want := ccl.ErrMismatch
					if bad && r == 1 {
						want = ccl.ErrBadArgs
					}
					if !errors.Is(err, want) {
						t.Fatalf("%s: bad %v: rank %d: %v, want %v", name, bad, r, err, want)
					}
				}
			}
			checkAllReduce(t, name+"/after the mismatch", comms, tensor.Float32, reduce.Sum, 300, 9, func(int) bool { return false })
			for _, c := range comms {
				c.Close()
			}
		}
	}
}

// record is one record of a records message.
func record(body []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// FuzzRecvRecords: whatever a peer sends as a round's records message,
// recvRecords fails with ccl.ErrFailed or accepts exactly cnt records,
// each a descriptor and at most the block's inline payload, into their
// rows.
func FuzzRecvRecords(f *testing.F) {
	desc := make([]byte, descBytes)
	two := append(record(desc), record(append(desc, 1, 2, 3))...)
	f.Add(agreementMsg(kindAgree, statusRecords, len(two), two), 2)
	f.Add(agreementMsg(kindAgree, statusRecords, len(two), two), 1)
	f.Add(agreementMsg(kindAgree, statusRecords, len(two)+1, append(two, 0)), 2)
	f.Add(agreementMsg(kindAgree, statusRecords, len(two), two[:len(two)-3]), 2)
	f.Add(agreementMsg(kindAgree, 0, len(two), two), 2)
	inl := record(append(desc, make([]byte, 33)...)) // above the block
	f.Add(agreementMsg(kindAgree, statusRecords, len(inl), inl), 1)
	short := record(desc[:descBytes-1])
	f.Add(agreementMsg(kindAgree, statusRecords, len(short), short), 1)
	f.Fuzz(func(t *testing.T, msg []byte, cnt int) {
		cnt = 1 + abs0(cnt)%3
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			b.Write(msg) // fails once a is closed
			b.Close()
		}()
		const k = 4
		c := &Comm{rank: 0, k: k, timeout: 5 * time.Second, block: descBytes + 32,
			table: tensor.MustNew(tensor.Uint8, tensor.Shape{k * (descBytes + 32)}), recLen: make([]int, k)}
		p := &peer{rank: 1, c: a, r: bufio.NewReader(a)}
		if err := c.recvRecords(p, 1, cnt); err != nil {
			if !errors.Is(err, ccl.ErrFailed) {
				t.Fatalf("error %v is not ccl.ErrFailed", err)
			}
			return
		}
		if len(msg) < hdrBytes || msg[6] != statusRecords {
			t.Fatalf("accepted a message of %d bytes", len(msg))
		}
		body := msg[hdrBytes : hdrBytes+int(binary.LittleEndian.Uint64(msg[16:]))]
		for i := range cnt {
			r := (1 + i) % k
			l := int(binary.LittleEndian.Uint32(body))
			rec := body[recHdrBytes : recHdrBytes+l]
			body = body[recHdrBytes+l:]
			if l < descBytes || l > c.block || c.recLen[r] != l || string(c.table.Bytes()[r*c.block:r*c.block+l]) != string(rec) {
				t.Fatalf("record %d: accepted %d bytes, kept %d", i, l, c.recLen[r])
			}
		}
		if len(body) != 0 {
			t.Fatalf("%d bytes left after %d records", len(body), cnt)
		}
	})
}

func abs0(x int) int {
	if x < 0 {
		if x == -x {
			return 0
		}
		return -x
	}
	return x
}

// TestStripedByHosts: a leader ring is striped from stripeMinBytes bytes on
// up to stripeMinHosts hosts, and from stripeMinBytes/stripeMinHosts bytes
// per host beyond.
func TestStripedByHosts(t *testing.T) {
	for _, tc := range []struct {
		k, stripes, bytes int
		want              bool
	}{
		{2, 4, 256 << 10, true},
		{2, 4, 256<<10 - 4, false},
		{4, 4, 256 << 10, true},
		{4, 1, 1 << 30, false},
		{8, 4, 256 << 10, false},
		{8, 4, 512 << 10, true},
		{16, 4, 512 << 10, false},
		{16, 4, 1 << 20, true},
	} {
		c := &Comm{k: tc.k, stripes: tc.stripes, stripeMin: 256 << 10}
		if got := c.striped(tc.bytes, tc.bytes); got != tc.want {
			t.Errorf("%d hosts, %d stripes, %d bytes: striped %v, want %v", tc.k, tc.stripes, tc.bytes, got, tc.want)
		}
	}
}

package hier

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/tensor"
)

// TestCarriedAllReduce: sizes around agreeInlineMax, carryMaxBytes and smallMax on
// layouts with one rank per host (which carry) and without; every rank
// says the same about carrying, PathFor says it too, and the results
// match the float64 reference with identical bits everywhere.
func TestCarriedAllReduce(t *testing.T) {
	leaktest.Check(t)
	defer func(a, in, cm int) { smallMax, agreeInlineMax, carryMaxBytes = a, in, cm }(smallMax, agreeInlineMax, carryMaxBytes)
	smallMax, agreeInlineMax, carryMaxBytes = 4096, 64, 2048
	for _, lay := range [][]int{{1, 1}, {1, 1, 1}, {1, 1, 1, 1}, {2, 1}, {1, 2}} {
		comms := world(t, lay, 10*time.Second)
		onePerHost := len(comms) == len(lay)
		for _, tc := range []struct {
			dt      tensor.DType
			op      reduce.Op
			count   int64
			carried bool
			path    string
		}{
			{tensor.Int32, reduce.Sum, 16, false, "inline"},        // 64 bytes
			{tensor.Int32, reduce.Sum, 17, true, "carried"},        // 68
			{tensor.Float32, reduce.Avg, 300, true, "carried"},     // 1200
			{tensor.Float64, reduce.Max, 256, true, "carried"},     // 2048 = carryMaxBytes
			{tensor.BFloat16, reduce.Sum, 1025, false, "gathered"}, // 2050
			{tensor.Float32, reduce.Min, 1025, false, ""},          // 4100 > smallMax: ring or RHD
		} {
			name := fmt.Sprintf("%v/%s/%s/%d", lay, tc.dt, tc.op, tc.count)
			checkAllReduce(t, name, comms, tc.dt, tc.op, tc.count, uint64(tc.count), func(r int) bool { return r == 0 })
			want, path := tc.carried && onePerHost, tc.path
			if tc.carried && !onePerHost {
				path = "gathered"
			}
			for r, c := range comms {
				if c.carried != want {
					t.Fatalf("%s: rank %d carried = %v, want %v", name, r, c.carried, want)
				}
			}
			if got := comms[0].PathFor(ccl.KindAllReduce, int(tc.count)*tc.dt.Size()); path != "" && got != path {
				t.Errorf("%s: PathFor = %q, want %q", name, got, path)
			}
		}
	}
}

// TestCarryIsEachRanksChoice: ranks with different carryMaxBytes (one carries,
// another does not) fall back to the gather round together and get the
// right result; the communicator carries again once they agree.
func TestCarryIsEachRanksChoice(t *testing.T) {
	leaktest.Check(t)
	defer func(a, in, cm int) { smallMax, agreeInlineMax, carryMaxBytes = a, in, cm }(smallMax, agreeInlineMax, carryMaxBytes)
	smallMax, agreeInlineMax, carryMaxBytes = 4096, 64, 2048
	comms := world(t, []int{1, 1, 1}, 10*time.Second)
	for _, tc := range []struct {
		limits  []int // each rank's carry limit
		carried bool
	}{
		{[]int{2048, 0, 2048}, false},
		{[]int{0, 2048, 2048}, false},
		{[]int{100, 2048, 2048}, false}, // 400 bytes: rank 0 does not carry
		{[]int{400, 400, 2048}, true},
		{[]int{2048, 2048, 2048}, true},
	} {
		for r, c := range comms {
			c.carryMax = tc.limits[r]
		}
		name := fmt.Sprintf("limits %v", tc.limits)
		checkAllReduce(t, name, comms, tensor.Float32, reduce.Sum, 100, 7, func(r int) bool { return r == 1 })
		for r, c := range comms {
			if c.carried != tc.carried {
				t.Fatalf("%s: rank %d carried = %v, want %v", name, r, c.carried, tc.carried)
			}
		}
	}
}

// TestCarriedMismatch: arguments that differ between ranks, where some
// or all carry their input, fail every rank with ErrMismatch (the rank
// with bad arguments with ErrBadArgs), write no output, and leave the
// communicator usable.
func TestCarriedMismatch(t *testing.T) {
	leaktest.Check(t)
	defer func(a, in, cm int) { smallMax, agreeInlineMax, carryMaxBytes = a, in, cm }(smallMax, agreeInlineMax, carryMaxBytes)
	smallMax, agreeInlineMax, carryMaxBytes = 4096, 64, 2048
	comms := world(t, []int{1, 1, 1}, 10*time.Second)
	type arg struct {
		dt       tensor.DType
		count    int64
		recvSize int64 // 0: count
	}
	ok := arg{tensor.Float32, 100, 0}
	for _, tc := range []struct {
		name string
		args []arg
		bad  int // the rank with bad arguments, or -1
	}{
		{"counts differ, all carry", []arg{ok, ok, {tensor.Float32, 101, 0}}, -1},
		{"one rank above the carry limit", []arg{{tensor.Float32, 1000, 0}, ok, ok}, -1},
		{"one rank inline", []arg{ok, {tensor.Float32, 8, 0}, ok}, -1},
		{"dtypes differ, same bytes", []arg{ok, ok, {tensor.Int32, 100, 0}}, -1},
		{"bad arguments on one rank", []arg{ok, {tensor.Float32, 100, 99}, ok}, 1},
	} {
		recvs := make([]*tensor.Tensor, len(comms))
		errs := each(comms, func(r int, c *Comm) error {
			a := tc.args[r]
			n := a.count
			if a.recvSize != 0 {
				n = a.recvSize
			}
			recvs[r] = tensor.MustNew(a.dt, tensor.Shape{n})
			tensor.Poison(recvs[r])
			send := tensor.MustNew(a.dt, tensor.Shape{a.count})
			fill(send, r, 1)
			return c.AllReduce(context.Background(), send, recvs[r], reduce.Sum)
		})
		for r, err := range errs {
			want := ccl.ErrMismatch
			if r == tc.bad {
				want = ccl.ErrBadArgs
			}
			if !errors.Is(err, want) {
				t.Fatalf("%s: rank %d: %v, want %v", tc.name, r, err, want)
			}
			p := tensor.MustNew(recvs[r].DType(), recvs[r].Shape())
			tensor.Poison(p)
			if string(p.Bytes()) != string(recvs[r].Bytes()) {
				t.Fatalf("%s: rank %d: the failed allreduce wrote its output", tc.name, r)
			}
		}
		checkAllReduce(t, tc.name+", then agreed", comms, tensor.Float32, reduce.Sum, 100, 3, func(int) bool { return false })
		for r, c := range comms {
			if !c.carried {
				t.Fatalf("%s: rank %d did not carry the agreed allreduce", tc.name, r)
			}
		}
	}
}

// agreementMsg is a link message as send writes it on a plaintext link:
// the header (message 1 of the link) and the body.
func agreementMsg(kind ccl.Kind, status byte, announced int, body []byte) []byte {
	h := make([]byte, hdrBytes)
	copy(h, dataMagic)
	h[4], h[6] = byte(kind), status
	binary.LittleEndian.PutUint64(h[8:], 1)
	binary.LittleEndian.PutUint64(h[16:], uint64(announced))
	return append(h, body...)
}

// FuzzRecvAgreement: whatever a peer sends as its agreement message,
// recvAgreement fails with ccl.ErrFailed or accepts exactly the two kinds
// of message (a descriptor with up to the block's inline payload, or a
// descriptor and a carried input of at most smallMax bytes), and fills
// the carried input only when its size is the one wanted.
func FuzzRecvAgreement(f *testing.F) {
	desc := make([]byte, descBytes)
	f.Add(agreementMsg(kindAgree, 0, descBytes, desc), 16)
	f.Add(agreementMsg(kindAgree, 0, descBytes+8, append(desc, 1, 2, 3, 4, 5, 6, 7, 8)), 0)
	f.Add(agreementMsg(kindAgree, statusCarry, descBytes+16, append(desc, make([]byte, 16)...)), 16)
	f.Add(agreementMsg(kindAgree, statusCarry, descBytes+16, append(desc, make([]byte, 16)...)), 8)
	f.Add(agreementMsg(kindAgree, statusCarry, descBytes+1<<20, desc), 16)
	f.Add(agreementMsg(kindAgree, statusCarry, descBytes+100, append(desc, make([]byte, 100)...)), 20) // above smallMax
	f.Add(agreementMsg(kindAgree, 0, descBytes+33, append(desc, make([]byte, 33)...)), 0)              // above the block
	f.Add(agreementMsg(kindAgree, 0, descBytes+1000, desc), 0)
	f.Add(agreementMsg(kindAgree, 7, descBytes, desc), 0)
	f.Add(agreementMsg(ccl.KindAllReduce, 0, descBytes, desc), 0)
	f.Add(agreementMsg(kindAgree, 0, descBytes, desc)[:30], 0)
	f.Fuzz(func(t *testing.T, msg []byte, want int) {
		defer func(a int) { smallMax = a }(smallMax)
		smallMax = 64
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			b.Write(msg) // fails once a is closed
			b.Close()
		}()
		c := &Comm{rank: 0, timeout: 5 * time.Second, block: descBytes + 32}
		p := &peer{rank: 1, c: a, r: bufio.NewReader(a)}
		row := make([]byte, c.block)
		var into []byte
		if want = want % 80; want > 0 {
			into = make([]byte, want)
		}
		filled, err := c.recvAgreement(p, row, into)
		if err != nil {
			if !errors.Is(err, ccl.ErrFailed) {
				t.Fatalf("error %v is not ccl.ErrFailed", err)
			}
			return
		}
		if len(msg) < hdrBytes {
			t.Fatalf("accepted a message of %d bytes", len(msg))
		}
		n := int(binary.LittleEndian.Uint64(msg[16:]))
		switch msg[6] {
		case 0:
			if n < descBytes || n > c.block || filled {
				t.Fatalf("accepted a plain agreement of %d bytes (filled %v)", n, filled)
			}
			if string(row[:n]) != string(msg[hdrBytes:hdrBytes+n]) {
				t.Fatalf("row holds %x, sent %x", row[:n], msg[hdrBytes:hdrBytes+n])
			}
		case statusCarry:
			if n <= descBytes || n-descBytes > smallMax || filled != (n-descBytes == want) {
				t.Fatalf("accepted a carried agreement of %d bytes (filled %v, wanted %d)", n, filled, want)
			}
			if filled && string(into) != string(msg[hdrBytes+descBytes:hdrBytes+n]) {
				t.Fatalf("carried input %x, sent %x", into, msg[hdrBytes+descBytes:hdrBytes+n])
			}
		default:
			t.Fatalf("accepted status %d", msg[6])
		}
	})
}

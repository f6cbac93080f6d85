package hier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/net/cert"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/tensor"
)

func TestMain(m *testing.M) {
	// Every rank of these tests lives in this process and shares its
	// endpoint; "hosts" are simulated by the id's host table.
	dir, err := os.MkdirTemp("", "hier")
	if err != nil {
		panic(err)
	}
	tok := filepath.Join(dir, "token")
	if err := cert.NewToken(tok); err != nil {
		panic(err)
	}
	testFiles = link.Files{Token: tok}
	testOpts = EndpointOptions{Files: testFiles}
	// The process-wide endpoint lives as long as the process (start it
	// before the leak checks).
	if _, err := Endpoint(testOpts); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testFiles are the tests' credentials (a token) and testOpts the
// process endpoint's options, set by TestMain.
var (
	testFiles link.Files
	testOpts  EndpointOptions
)

// world joins a communicator whose hosts run perHost[h] ranks each.
func world(t *testing.T, perHost []int, timeout time.Duration) []*Comm {
	t.Helper()
	comms, errs := joinWorld(t, perHost, timeout)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// joinWorld is world's join: every rank's communicator (nil where its
// Join failed) and error; the caller closes them.
func joinWorld(t *testing.T, perHost []int, timeout time.Duration) ([]*Comm, []error) {
	t.Helper()
	addr, err := Endpoint(testOpts)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []int
	var addrs []string
	for h, n := range perHost {
		for range n {
			hosts = append(hosts, h)
			addrs = append(addrs, addr)
		}
	}
	nonce, _ := (&Backend{}).NewID()
	id, err := MakeID(nonce, hosts, addrs)
	if err != nil {
		t.Fatal(err)
	}
	n := len(hosts)
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := (&Backend{}).Join(context.Background(), ccl.Config{ID: id, Rank: r, Size: n, Timeout: timeout})
			if err == nil {
				comms[r] = c.(*Comm)
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	return comms, errs
}

// intResults runs an in-place integer sum allreduce of count elements
// (filled with seed) on every rank of comms and returns each rank's
// result bytes: two communicators whose paths differ must agree exactly.
func intResults(t *testing.T, comms []*Comm, dt tensor.DType, count int64, seed uint64) [][]byte {
	t.Helper()
	out := make([][]byte, len(comms))
	must(t, each(comms, func(r int, c *Comm) error {
		x := tensor.MustNew(dt, tensor.Shape{count})
		fill(x, r, seed)
		if err := c.AllReduce(context.Background(), x, x, reduce.Sum); err != nil {
			return err
		}
		out[r] = x.Bytes()
		return nil
	}))
	return out
}

// each runs fn on every rank at once and returns the errors.
func each(comms []*Comm, fn func(r int, c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r, c)
		}()
	}
	wg.Wait()
	return errs
}

func must(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func fill(t *tensor.Tensor, r int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	vals := make([]float64, t.NumElements())
	for i := range vals {
		vals[i] = float64(rng.IntN(200) - 100)
	}
	if err := tensor.SetFromFloat64(t, vals); err != nil {
		panic(err)
	}
}

var layouts = [][]int{{2}, {1, 1}, {2, 1}, {1, 2, 1}, {2, 2}, {1, 1, 1, 1}, {2, 1, 2, 1}}

// TestAllReduce checks allreduce against a float64 reference for sizes
// around the small/ring/RHD thresholds, with poisoned outputs, and that
// every rank has identical bits.
func TestAllReduce(t *testing.T) {
	leaktest.Check(t)
	defer func(a, b, ch, in int) { smallMax, rhdMax, chunkBytes, agreeInlineMax = a, b, ch, in }(smallMax, rhdMax, chunkBytes, agreeInlineMax)
	// Exercise every path with small tensors: inline up to 64 bytes,
	// gathered up to 256, then hierarchical (RHD up to 4096, then ring).
	smallMax, rhdMax, chunkBytes, agreeInlineMax = 256, 4096, 1000, 64
	for _, lay := range layouts {
		comms := world(t, lay, 10*time.Second)
		for _, tc := range []struct {
			dt    tensor.DType
			op    reduce.Op
			count int64
		}{
			{tensor.Int32, reduce.Sum, 7}, {tensor.Float32, reduce.Sum, 50}, {tensor.Float64, reduce.Max, 300},
			{tensor.Int64, reduce.Sum, 1001}, {tensor.Float32, reduce.Avg, 3000}, {tensor.Int32, reduce.Min, 1},
			{tensor.BFloat16, reduce.Sum, 2500}, {tensor.Float32, reduce.Sum, 0},
		} {
			checkAllReduce(t, fmt.Sprintf("%v/%s/%s/%d", lay, tc.dt, tc.op, tc.count), comms, tc.dt, tc.op, tc.count,
				uint64(tc.count), func(r int) bool { return r%2 == 1 })
		}
	}
}

// checkAllReduce runs one allreduce on every rank (in place where
// inPlace says) into poisoned outputs and checks the result against a
// float64 reference and that every rank has the same bits.
func checkAllReduce(t *testing.T, name string, comms []*Comm, dt tensor.DType, op reduce.Op, count int64, seed uint64, inPlace func(r int) bool) {
	t.Helper()
	n := len(comms)
	sends := make([]*tensor.Tensor, n)
	recvs := make([]*tensor.Tensor, n)
	for r := range n {
		sends[r] = tensor.MustNew(dt, tensor.Shape{count})
		fill(sends[r], r, seed)
		recvs[r] = tensor.MustNew(dt, tensor.Shape{count})
		tensor.Poison(recvs[r])
	}
	must(t, each(comms, func(r int, c *Comm) error {
		in := sends[r]
		if inPlace(r) {
			copy(recvs[r].Bytes(), sends[r].Bytes())
			in = recvs[r]
		}
		return c.AllReduce(context.Background(), in, recvs[r], op)
	}))
	want := make([]float64, count)
	mag := make([]float64, count) // sum of |inputs|: what partial sums can reach
	for r := range n {
		v, _ := tensor.ToFloat64(sends[r])
		for i := range want {
			mag[i] += abs(v[i])
			switch {
			case r == 0:
				want[i] = v[i]
			case op == reduce.Max:
				want[i] = max(want[i], v[i])
			case op == reduce.Min:
				want[i] = min(want[i], v[i])
			default:
				want[i] += v[i]
			}
		}
	}
	if op == reduce.Avg {
		for i := range want {
			want[i] /= float64(n)
			mag[i] /= float64(n)
		}
	}
	got, _ := tensor.ToFloat64(recvs[0])
	tol := 1e-3
	if dt == tensor.BFloat16 || dt == tensor.Float16 {
		// Rounded once inside a host and once per hop between hosts
		// (docs: ccl/hier): relative to the partial sums' magnitude,
		// which cancellation can leave far above the result's.
		tol = 2e-2
	}
	for i := range want {
		if d := abs(got[i] - want[i]); d > tol*max(1, mag[i]) {
			t.Fatalf("%s: element %d = %v, want %v", name, i, got[i], want[i])
		}
	}
	for r := 1; r < n; r++ {
		if string(recvs[r].Bytes()) != string(recvs[0].Bytes()) {
			t.Fatalf("%s: rank %d's bits differ from rank 0's", name, r)
		}
	}
}

// TestAllReduceRingProperty: random sizes, dtypes, ops, chunk sizes and
// in-place choices through the pipelined ring and RHD between 2-4
// hosts (1-2 ranks each), against the float64 reference.
func TestAllReduceRingProperty(t *testing.T) {
	leaktest.Check(t)
	defer func(a, b, ch, in, rp, ri, fl int) {
		smallMax, rhdMax, chunkBytes, agreeInlineMax, reducePieceBytes, ringInlineMax, flushBytes = a, b, ch, in, rp, ri, fl
	}(smallMax, rhdMax, chunkBytes, agreeInlineMax, reducePieceBytes, ringInlineMax, flushBytes)
	smallMax, agreeInlineMax = 64, 16
	rng := rand.New(rand.NewPCG(16, 2))
	dts := []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.BFloat16, tensor.Float16}
	ops := []reduce.Op{reduce.Sum, reduce.Max, reduce.Min, reduce.Avg}
	for _, lay := range [][]int{{1, 1}, {1, 1, 1}, {2, 1, 1}, {1, 1, 1, 1}, {1, 2, 1, 2}, {1, 1, 1, 1, 1}} {
		comms := world(t, lay, 10*time.Second)
		for range 6 {
			dt, op := dts[rng.IntN(len(dts))], ops[rng.IntN(len(ops))]
			if op == reduce.Avg && !dt.IsFloat() {
				op = reduce.Sum
			}
			count := int64(1 + rng.IntN(6000))
			chunkBytes = []int{1, 7, 100, 1000, 4096, 1 << 20}[rng.IntN(6)]
			rhdMax = []int{0, 1 << 30}[rng.IntN(2)]
			reducePieceBytes = []int{1, 24, 100, 4096, 128 << 10}[rng.IntN(5)]
			ringInlineMax = []int{0, 100, inlineMax}[rng.IntN(3)] // pipelined or one-goroutine rings
			flushBytes = []int{1000, LinkBuffer}[rng.IntN(2)]
			mask := rng.Uint64()
			name := fmt.Sprintf("%v/%s/%s/%d/chunk %d/rhd %d/piece %d/ring inline %d/flush %d", lay, dt, op, count, chunkBytes, rhdMax, reducePieceBytes, ringInlineMax, flushBytes)
			checkAllReduce(t, name, comms, dt, op, count, rng.Uint64(), func(r int) bool { return mask>>r&1 == 1 })
		}
	}
}

// TestRHDSteps: recursive halving/doubling on 4 hosts with steps above
// and below inlineMax (a step of at most inlineMax sends and then
// receives on one goroutine, a larger one sends from another).
func TestRHDSteps(t *testing.T) {
	leaktest.Check(t)
	defer func(a, b int) { smallMax, rhdMax = a, b }(smallMax, rhdMax)
	smallMax, rhdMax = 64, 1<<30
	for _, lay := range [][]int{{1, 1, 1, 1}, {1, 2, 1, 1}} {
		comms := world(t, lay, 10*time.Second)
		for _, count := range []int64{9000, 40000, 40001} { // first steps of 18 KB, 80 KB, 80 KB + 4
			if p := comms[0].PathFor(ccl.KindAllReduce, int(count)*4); p != "leader rhd" {
				t.Fatalf("%v: PathFor(%d floats) = %q, want leader rhd", lay, count, p)
			}
			checkAllReduce(t, fmt.Sprintf("%v/%d", lay, count), comms, tensor.Float32, reduce.Sum, count, uint64(count), func(r int) bool { return r == 1 })
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestOtherCollectives checks allgather, reduce-scatter, broadcast,
// scatter, gather, barrier and send/recv across simulated hosts.
func TestOtherCollectives(t *testing.T) {
	leaktest.Check(t)
	ctx := context.Background()
	for _, lay := range layouts {
		comms := world(t, lay, 10*time.Second)
		n := len(comms)
		const blk = 5
		sends := make([]*tensor.Tensor, n)
		for r := range n {
			sends[r] = tensor.MustNew(tensor.Float32, tensor.Shape{blk * int64(n)})
			fill(sends[r], r, 7)
		}
		// allgather of each rank's first block
		outs := make([]*tensor.Tensor, n)
		must(t, each(comms, func(r int, c *Comm) error {
			outs[r] = tensor.MustNew(tensor.Float32, tensor.Shape{blk * int64(n)})
			tensor.Poison(outs[r])
			in, _ := sends[r].View(0, tensor.Float32, tensor.Shape{blk})
			return c.AllGather(ctx, in, outs[r])
		}))
		for r := range n {
			for q := range n {
				if string(outs[r].Bytes()[q*blk*4:(q+1)*blk*4]) != string(sends[q].Bytes()[:blk*4]) {
					t.Fatalf("%v: allgather rank %d block %d", lay, r, q)
				}
			}
		}
		// reduce-scatter (int32 sum: exact)
		isends := make([]*tensor.Tensor, n)
		for r := range n {
			isends[r] = tensor.MustNew(tensor.Int32, tensor.Shape{blk * int64(n)})
			fill(isends[r], r, 9)
		}
		must(t, each(comms, func(r int, c *Comm) error {
			outs[r] = tensor.MustNew(tensor.Int32, tensor.Shape{blk})
			return c.ReduceScatter(ctx, isends[r], outs[r], reduce.Sum)
		}))
		for r := range n {
			got, _ := tensor.ToFloat64(outs[r])
			for i := range blk {
				want := 0.0
				for q := range n {
					v, _ := tensor.ToFloat64(isends[q])
					want += v[r*blk+i]
				}
				if got[i] != want {
					t.Fatalf("%v: reduce_scatter rank %d elem %d = %v, want %v", lay, r, i, got[i], want)
				}
			}
		}
		root := n - 1
		// broadcast
		must(t, each(comms, func(r int, c *Comm) error {
			outs[r] = tensor.MustNew(tensor.Float32, tensor.Shape{blk * int64(n)})
			tensor.Poison(outs[r])
			var s *tensor.Tensor
			if r == root {
				s = sends[r]
			}
			return c.Broadcast(ctx, s, outs[r], root)
		}))
		for r := range n {
			if string(outs[r].Bytes()) != string(sends[root].Bytes()) {
				t.Fatalf("%v: broadcast rank %d", lay, r)
			}
		}
		// scatter from root, gather back to rank 0
		must(t, each(comms, func(r int, c *Comm) error {
			outs[r] = tensor.MustNew(tensor.Float32, tensor.Shape{blk})
			var s *tensor.Tensor
			if r == root {
				s = sends[r]
			}
			return c.Scatter(ctx, s, outs[r], root)
		}))
		for r := range n {
			if string(outs[r].Bytes()) != string(sends[root].Bytes()[r*blk*4:(r+1)*blk*4]) {
				t.Fatalf("%v: scatter rank %d", lay, r)
			}
		}
		g := tensor.MustNew(tensor.Float32, tensor.Shape{blk * int64(n)})
		must(t, each(comms, func(r int, c *Comm) error {
			var rv *tensor.Tensor
			if r == 0 {
				rv = g
			}
			return c.Gather(ctx, outs[r], rv, 0)
		}))
		if string(g.Bytes()) != string(sends[root].Bytes()) {
			t.Fatalf("%v: gather", lay)
		}
		must(t, each(comms, func(r int, c *Comm) error { return c.Barrier(ctx) }))
		// send/recv between the first and the last rank, both ways
		if n > 1 {
			last := n - 1
			got := tensor.MustNew(tensor.Float32, tensor.Shape{blk * int64(n)})
			must(t, each(comms, func(r int, c *Comm) error {
				switch r {
				case 0:
					return c.Send(ctx, sends[0], last)
				case last:
					return c.Recv(ctx, got, 0)
				}
				return nil
			}))
			if string(got.Bytes()) != string(sends[0].Bytes()) {
				t.Fatalf("%v: send/recv", lay)
			}
		}
	}
}

// TestMismatchAndBadArgs: every rank fails together and the
// communicator stays usable.
func TestMismatchAndBadArgs(t *testing.T) {
	leaktest.Check(t)
	ctx := context.Background()
	comms := world(t, []int{2, 1}, 10*time.Second)
	errs := each(comms, func(r int, c *Comm) error {
		n := int64(10)
		if r == 2 {
			n = 11
		}
		x := tensor.MustNew(tensor.Float32, tensor.Shape{n})
		return c.AllReduce(ctx, x, x, reduce.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, ccl.ErrMismatch) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	errs = each(comms, func(r int, c *Comm) error {
		x := tensor.MustNew(tensor.Float32, tensor.Shape{10})
		y := x
		if r == 1 {
			y = tensor.MustNew(tensor.Float32, tensor.Shape{9})
		}
		return c.AllReduce(ctx, x, y, reduce.Sum)
	})
	for r, err := range errs {
		want := ccl.ErrMismatch
		if r == 1 {
			want = ccl.ErrBadArgs
		}
		if !errors.Is(err, want) {
			t.Fatalf("rank %d: %v, want %v", r, err, want)
		}
	}
	// Send/recv size mismatch across hosts.
	errs = each(comms, func(r int, c *Comm) error {
		switch r {
		case 0:
			return c.Send(ctx, tensor.MustNew(tensor.Float32, tensor.Shape{4}), 2)
		case 2:
			return c.Recv(ctx, tensor.MustNew(tensor.Float32, tensor.Shape{5}), 0)
		}
		return nil
	})
	if !errors.Is(errs[0], ccl.ErrMismatch) || !errors.Is(errs[2], ccl.ErrMismatch) {
		t.Fatalf("send/recv mismatch: %v", errs)
	}
	must(t, each(comms, func(r int, c *Comm) error { return c.Barrier(ctx) }))
}

// TestTimeoutAndAbort: a rank that never comes makes the others time out
// naming remote ranks; the communicator is failed afterwards. Abort ends
// a blocked collective.
func TestTimeoutAndAbort(t *testing.T) {
	leaktest.Check(t)
	ctx := context.Background()
	// One stripe: joining within the short timeout takes as few
	// handshakes as it can on a loaded machine.
	stripesByRank(t, "1")
	comms := world(t, []int{1, 2}, 300*time.Millisecond)
	errs := each(comms[:2], func(r int, c *Comm) error { return c.Barrier(ctx) })
	for r, err := range errs {
		if !errors.Is(err, ccl.ErrFailed) && !errors.Is(err, ccl.ErrTimeout) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// The first rank whose deadline passes reports a TimeoutError and
	// fails its links; the other may see that (a reset link) before its
	// own deadline, so one TimeoutError is what the timeout guarantees.
	var te *ccl.TimeoutError
	if !errors.As(errs[0], &te) && !errors.As(errs[1], &te) {
		t.Fatalf("ranks 0 and 1: %v; %v: want a TimeoutError from one of them", errs[0], errs[1])
	}
	if err := comms[0].Barrier(ctx); !errors.Is(err, ccl.ErrFailed) {
		t.Fatalf("after the timeout: %v", err)
	}
	comms = world(t, []int{1, 1}, time.Minute)
	done := make(chan error, 1)
	go func() { done <- comms[0].Barrier(ctx) }()
	time.Sleep(50 * time.Millisecond) // let it block (the outcome does not depend on it)
	comms[0].Abort(errors.New("test"))
	if err := <-done; !errors.Is(err, ccl.ErrFailed) {
		t.Fatalf("aborted barrier: %v", err)
	}
}

func FuzzParseID(f *testing.F) {
	id, _ := MakeID([]byte("0123456789abcdef"), []int{0, 0, 1}, []string{"10.0.0.1:5", "10.0.0.1:6", "[::1]:7"})
	f.Add(id, 3)
	f.Add(ccl.SubID(ccl.SubID(id, "group/1"), "control"), 1)
	f.Add([]byte("CHH1\x00\xff\xff\xff\xff"), 1)
	f.Fuzz(func(t *testing.T, id []byte, size int) {
		if size < 1 || size > 1<<10 {
			return
		}
		tb, err := parseID(id, size)
		if err != nil {
			return
		}
		if len(tb.members) != size {
			t.Fatalf("%d members for size %d", len(tb.members), size)
		}
		for _, m := range tb.members {
			if m < 0 || m >= len(tb.hosts) {
				t.Fatalf("member %d of %d ranks", m, len(tb.hosts))
			}
		}
	})
}

func TestParseIDGroups(t *testing.T) {
	id, err := MakeID([]byte("n"), []int{0, 0, 1, 1}, []string{"a", "b", "c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := parseID(ccl.SubID(ccl.SubID(id, "group/1"), "control"), 2)
	if err != nil || fmt.Sprint(tb.members) != "[2 3]" {
		t.Fatal(tb, err)
	}
	if _, err := parseID(id, 3); err == nil {
		t.Fatal("size 3 of 4 ranks accepted")
	}
	if _, err := MakeID([]byte("n"), []int{1, 0}, []string{"a", "b"}); err == nil {
		t.Fatal("hosts out of order accepted")
	}
}

// TestGatheredScratchReused: gathered allreduces (agreeInlineMax < size <=
// smallMax) reuse one scratch tensor, grown when a larger one comes,
// instead of allocating every call; results stay right throughout.
func TestGatheredScratchReused(t *testing.T) {
	leaktest.Check(t)
	defer func(a, in int) { smallMax, agreeInlineMax = a, in }(smallMax, agreeInlineMax)
	smallMax, agreeInlineMax = 64<<10, 64
	comms := world(t, []int{2, 1}, 10*time.Second)
	checkAllReduce(t, "first", comms, tensor.Float32, reduce.Sum, 1000, 1, func(int) bool { return false })
	first := make([]*tensor.Tensor, len(comms))
	for r, c := range comms {
		if c.gathered == nil || c.gathered.NumBytes() != 3*4000 {
			t.Fatalf("rank %d: gathered scratch %v, want %d bytes", r, c.gathered, 3*4000)
		}
		first[r] = c.gathered
	}
	checkAllReduce(t, "smaller", comms, tensor.Int32, reduce.Max, 700, 2, func(r int) bool { return r == 1 })
	for r, c := range comms {
		if c.gathered != first[r] {
			t.Fatalf("rank %d: a smaller gathered allreduce allocated a new scratch", r)
		}
	}
	checkAllReduce(t, "larger", comms, tensor.Float64, reduce.Sum, 2000, 3, func(int) bool { return false })
	for r, c := range comms {
		if c.gathered.NumBytes() != 3*16000 {
			t.Fatalf("rank %d: gathered scratch of %d bytes after a larger allreduce, want %d", r, c.gathered.NumBytes(), 3*16000)
		}
	}
}

package cpu_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// smallOpts makes every message of a few KiB span several slots and
// mailbox chunks, and sends allreduces of more than 1 KiB over more than
// two ranks through the two-step (reduce-scatter, all-gather) path.
var smallOpts = cpu.Options{SlotBytes: 4096, MailboxBytes: 1024, OneShotMax: 1024}

// largeCount spans several 4 KiB slots even for 1-byte dtypes.
const largeCount = 3*4096 + 5

var sizes = []int{0, 1, 7, 17, 1023, 4097, largeCount}

// hangGuard bounds every multi-rank run: a run that has not finished by
// then is a hang (collectives here use a 10 s communicator timeout).
const hangGuard = 30 * time.Second

// runEach runs fn(ctx, r) for r = 0..n-1 on n goroutines and returns each
// one's error. A panic fails the test and becomes that rank's error. It fails the test if they have
// not all returned within hangGuard.
func runEach(t testing.TB, n int, fn func(ctx context.Context, r int) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
					t.Errorf("rank %d panicked: %v\n%s", r, p, debug.Stack())
				}
			}()
			errs[r] = fn(ctx, r)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangGuard + 10*time.Second):
		t.Fatalf("%d ranks still running after %v: hang", n, hangGuard+10*time.Second)
	}
	return errs
}

// runRanks joins n goroutine ranks of a fresh communicator (b.NewID) with
// options opts and Config.Timeout timeout (0: 10 s), runs fn on each rank
// and closes the communicators. It returns each rank's error: Join's, or
// fn's.
func runRanks(t testing.TB, opts cpu.Options, n int, timeout time.Duration, fn func(ctx context.Context, c ccl.Comm) error) []error {
	t.Helper()
	b := &cpu.Backend{Options: opts}
	id, err := b.NewID()
	if err != nil {
		t.Fatal(err)
	}
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	return runEach(t, n, func(ctx context.Context, r int) error {
		c, err := b.Join(ctx, ccl.Config{ID: id, Rank: r, Size: n, Timeout: timeout})
		if err != nil {
			return fmt.Errorf("join: %w", err)
		}
		defer c.Close()
		if c.Rank() != r || c.Size() != n {
			return fmt.Errorf("comm says rank %d of %d, want %d of %d", c.Rank(), c.Size(), r, n)
		}
		return fn(ctx, c)
	})
}

// noErrors fails the test for every rank that returned an error.
func noErrors(t testing.TB, errs []error) bool {
	t.Helper()
	ok := true
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
			ok = false
		}
	}
	return ok
}

// ---- tensors ----

func shape(count int) tensor.Shape { return tensor.Shape{int64(count)} }

func poisoned(t testing.TB, dt tensor.DType, count int) *tensor.Tensor {
	t.Helper()
	x := tensor.MustNew(dt, shape(count))
	if err := tensor.Poison(x); err != nil {
		t.Fatal(err)
	}
	return x
}

func randomT(t testing.TB, dt tensor.DType, count int, seed uint64, lo, hi float64) *tensor.Tensor {
	t.Helper()
	x := tensor.MustNew(dt, shape(count))
	if err := tensor.RandomRange(x, seed, lo, hi); err != nil {
		t.Fatal(err)
	}
	return x
}

// defaultRange is the range tensor.Random uses.
func defaultRange(dt tensor.DType) (lo, hi float64) {
	if dt.IsFloat() {
		return -1, 1
	}
	return -16, 16
}

func cloneT(t testing.TB, x *tensor.Tensor) *tensor.Tensor {
	t.Helper()
	c, err := x.Clone()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// concat concatenates the bytes of parts (all of one dtype).
func concat(t testing.TB, dt tensor.DType, parts []*tensor.Tensor) *tensor.Tensor {
	t.Helper()
	total := 0
	for _, p := range parts {
		total += int(p.NumElements())
	}
	out := tensor.MustNew(dt, shape(total))
	off := 0
	for _, p := range parts {
		off += copy(out.Bytes()[off:], p.Bytes())
	}
	return out
}

// block is the view of elements [i*count, (i+1)*count) of x.
func block(t testing.TB, x *tensor.Tensor, i, count int) *tensor.Tensor {
	t.Helper()
	es := int64(x.DType().Size())
	v, err := x.View(x.Offset()+int64(i*count)*es, x.DType(), shape(count))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// intsOf reads the elements of an integer or bool tensor exactly (bools as
// 0 or 1).
func intsOf(x *tensor.Tensor) []int64 {
	out := make([]int64, x.NumElements())
	switch x.DType() {
	case tensor.Bool:
		for i, b := range x.Bytes() {
			if b != 0 {
				out[i] = 1
			}
		}
	case tensor.Uint8:
		for i, b := range x.Bytes() {
			out[i] = int64(b)
		}
	case tensor.Int8:
		d, _ := tensor.Data[int8](x)
		for i, v := range d {
			out[i] = int64(v)
		}
	case tensor.Int16:
		d, _ := tensor.Data[int16](x)
		for i, v := range d {
			out[i] = int64(v)
		}
	case tensor.Int32:
		d, _ := tensor.Data[int32](x)
		for i, v := range d {
			out[i] = int64(v)
		}
	case tensor.Int64:
		d, _ := tensor.Data[int64](x)
		copy(out, d)
	default:
		panic("intsOf " + x.DType().String())
	}
	return out
}

// setInts stores vals into x, wrapping to the dtype's width.
func setInts(x *tensor.Tensor, vals []int64) {
	switch x.DType() {
	case tensor.Bool, tensor.Uint8:
		for i, v := range vals {
			x.Bytes()[i] = uint8(v)
		}
	case tensor.Int8:
		d, _ := tensor.Data[int8](x)
		for i, v := range vals {
			d[i] = int8(v)
		}
	case tensor.Int16:
		d, _ := tensor.Data[int16](x)
		for i, v := range vals {
			d[i] = int16(v)
		}
	case tensor.Int32:
		d, _ := tensor.Data[int32](x)
		for i, v := range vals {
			d[i] = int32(v)
		}
	case tensor.Int64:
		d, _ := tensor.Data[int64](x)
		copy(d, vals)
	default:
		panic("setInts " + x.DType().String())
	}
}

// ---- references ----

// expect is what an output must hold: exact bytes, or float values within
// a tolerance.
type expect struct {
	exact      *tensor.Tensor
	vals       []float64
	rtol, atol float64
}

// sub is the expectation for elements [i*count, (i+1)*count).
func (e expect) sub(t testing.TB, i, count int) expect {
	if e.exact != nil {
		return expect{exact: block(t, e.exact, i, count)}
	}
	return expect{vals: e.vals[i*count : (i+1)*count], rtol: e.rtol, atol: e.atol}
}

// check compares got with e; poison left in got must be expected.
func (e expect) check(got *tensor.Tensor) error {
	pc, err := tensor.PoisonCount(got)
	if err != nil {
		return err
	}
	if e.exact != nil {
		want, _ := tensor.PoisonCount(e.exact)
		if pc != want {
			return fmt.Errorf("%d elements left poisoned (%d expected to equal the poison pattern)", pc, want)
		}
		return tensor.Equal(got, e.exact)
	}
	if pc != 0 {
		return fmt.Errorf("%d of %d elements left poisoned", pc, got.NumElements())
	}
	return tensor.CloseTo(got, e.vals, e.rtol, e.atol)
}

// reference computes op over the ranks' inputs, element by element, without
// the backend: exactly in int64 (wrapping to the dtype) for integers and
// bools, in float64 for floats with tolerances scaled by the rank count.
func reference(op reduce.Op, dt tensor.DType, ins []*tensor.Tensor) expect {
	n := len(ins)
	count := int(ins[0].NumElements())
	if !dt.IsFloat() {
		vs := make([][]int64, n)
		for r, x := range ins {
			vs[r] = intsOf(x)
		}
		out := make([]int64, count)
		for i := range out {
			acc := vs[0][i]
			for r := 1; r < n; r++ {
				x := vs[r][i]
				switch op {
				case reduce.Sum, reduce.Avg:
					if dt == tensor.Bool {
						acc |= x
					} else {
						acc += x
					}
				case reduce.Prod:
					acc *= x
				case reduce.Min:
					acc = min(acc, x)
				case reduce.Max:
					acc = max(acc, x)
				}
			}
			if op == reduce.Avg {
				acc /= int64(n) // Go truncates toward zero
			}
			out[i] = acc
		}
		w := tensor.MustNew(dt, shape(count))
		setInts(w, out)
		return expect{exact: w}
	}
	vs := make([][]float64, n)
	for r, x := range ins {
		vs[r], _ = tensor.ToFloat64(x)
	}
	out := make([]float64, count)
	for i := range out {
		acc := vs[0][i]
		for r := 1; r < n; r++ {
			x := vs[r][i]
			switch op {
			case reduce.Sum, reduce.Avg:
				acc += x
			case reduce.Prod:
				acc *= x
			case reduce.Min:
				acc = math.Min(acc, x)
			case reduce.Max:
				acc = math.Max(acc, x)
			}
		}
		if op == reduce.Avg {
			acc /= float64(n)
		}
		out[i] = acc
	}
	if op == reduce.Min || op == reduce.Max {
		return expect{vals: out} // exact: the result is one of the inputs
	}
	rtol, atol := tensor.DefaultTolerance(dt)
	return expect{vals: out, rtol: rtol * float64(n), atol: atol * float64(n)}
}

// inputRange picks value ranges that keep results representable: tiny
// ranges for products, [-8, 8) integers for sums (so int8 sums over 8 ranks
// cannot reach the poison value 90), the full integer range for min and
// max, and the full range for sums when wrap is set.
func inputRange(op reduce.Op, dt tensor.DType, wrap bool) (lo, hi float64) {
	switch {
	case dt.IsFloat() && op == reduce.Prod:
		return 0.5, 1.5
	case dt.IsFloat():
		return -1, 1
	case wrap, dt != tensor.Bool && (op == reduce.Min || op == reduce.Max):
		return math.Inf(-1), math.Inf(1)
	case op == reduce.Prod:
		return -2, 3
	default:
		return -8, 8
	}
}

// pickN cycles through 1..8 (2..8 when min2) from a random start.
func pickN(rng *rand.Rand, i int, min2 bool) int {
	if min2 {
		return 2 + (i+rng.IntN(2))%7
	}
	return 1 + (i+rng.IntN(2))%8
}

// smallStaged is smallOpts without direct reads of other ranks' buffers,
// so that the staging paths (what process sessions use) run here too.
var smallStaged = cpu.Options{SlotBytes: 4096, MailboxBytes: 1024, OneShotMax: 1024, NoDirect: true, NoCMA: true}

// smallCMA sends large allreduces of goroutine ranks through the
// single-copy path of process sessions (process_vm_readv on this very
// process), three threads per rank, in 1 KiB chunks.
var smallCMA = cpu.Options{SlotBytes: 4096, MailboxBytes: 1024, OneShotMax: 1024, NoDirect: true, Threads: 3, ThreadMinBytes: 1}

// smallThreads is smallOpts with three threads per rank on direct reads.
var smallThreads = cpu.Options{SlotBytes: 4096, MailboxBytes: 1024, OneShotMax: 1024, Threads: 3, ThreadMinBytes: 1}

// pickOpts returns small options (direct, staged, single-copy, threaded),
// or the defaults for about one case in 10.
func pickOpts(rng *rand.Rand) (cpu.Options, string) {
	switch rng.IntN(10) {
	case 0:
		return cpu.Options{}, "default"
	case 1, 2, 3:
		return smallStaged, "staged"
	case 4:
		return smallCMA, "cma"
	case 5:
		// An odd chunk that is not a multiple of 8-byte elements' rows.
		o := smallCMA
		o.CMAChunk = 1000
		return o, "cma-chunk"
	case 6:
		return smallThreads, "threads"
	}
	return smallOpts, "small"
}

func sameBytes(a, b *tensor.Tensor) bool { return string(a.Bytes()) == string(b.Bytes()) }

// ---- batched property cases ----

// pcase is one property case. setup runs on the test goroutine and returns
// the call every rank makes and the check of the ranks' errors (indexed by
// rank) and outputs.
type setupFunc = func(t testing.TB) (call func(ctx context.Context, c ccl.Comm) error, check func(t *testing.T, errs []error))

type pcase struct {
	name  string
	n     int
	opts  cpu.Options
	setup setupFunc
}

// runCases runs cases grouped by rank count and options: each group is one
// runRanks call (a fresh communicator, so joins do not dominate) in which
// every rank makes the group's calls in order; then every case is checked
// in its own subtest. Sharing a communicator also checks that each call,
// failed ones included, leaves it ready for the next.
func runCases(t *testing.T, cases []pcase) {
	t.Helper()
	type key struct {
		n    int
		opts cpu.Options
	}
	var order []key
	groups := map[key][]pcase{}
	for _, c := range cases {
		k := key{c.n, c.opts}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	for _, k := range order {
		g := groups[k]
		calls := make([]func(ctx context.Context, c ccl.Comm) error, len(g))
		checks := make([]func(t *testing.T, errs []error), len(g))
		errs := make([][]error, len(g))
		for i, c := range g {
			calls[i], checks[i] = c.setup(t)
			errs[i] = make([]error, k.n)
		}
		rankErrs := runRanks(t, k.opts, k.n, 0, func(ctx context.Context, c ccl.Comm) error {
			for i, call := range calls {
				errs[i][c.Rank()] = call(ctx, c)
			}
			return nil
		})
		if !noErrors(t, rankErrs) {
			continue
		}
		for i, c := range g {
			t.Run(c.name, func(t *testing.T) { checks[i](t, errs[i]) })
		}
	}
}

// wantErrAll checks that every rank failed with target and wrote nothing
// into outs (which were poisoned).
func wantErrAll(t *testing.T, errs []error, target error, outs []*tensor.Tensor) {
	t.Helper()
	for r, err := range errs {
		if !errors.Is(err, target) {
			t.Errorf("rank %d: got %v, want %v", r, err, target)
		}
	}
	for r, o := range outs {
		if o == nil {
			continue
		}
		if pc, _ := tensor.PoisonCount(o); pc != o.NumElements() {
			t.Errorf("rank %d: failed call wrote %d elements", r, o.NumElements()-pc)
		}
	}
}

// copySetup returns the setup of a copy collective's case.
func copySetup(kind string, c copyCase) setupFunc {
	switch kind {
	case "allgather":
		return allGatherSetup(c)
	case "broadcast":
		return broadcastSetup(c)
	case "scatter":
		return scatterSetup(c)
	case "gather":
		return gatherSetup(c)
	}
	panic("copySetup: " + kind)
}

// ---- properties ----

func TestAllReduceProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	var cases []pcase
	i := 0
	for _, dt := range tensor.DTypes {
		for _, op := range reduce.Ops {
			wraps := []bool{false}
			if dt.IsInt() && (op == reduce.Sum || op == reduce.Prod) {
				wraps = append(wraps, true)
			}
			for _, wrap := range wraps {
				for _, size := range sizes {
					if wrap && size > 1023 {
						continue
					}
					i++
					n := pickN(rng, i, false)
					opts, on := pickOpts(rng)
					inPlace := rng.IntN(2) == 0
					viewInPlace := inPlace && rng.IntN(2) == 0
					cases = append(cases, allReduceCase(dt, op, wrap, size, n, opts, on, inPlace, viewInPlace, uint64(i)*100))
				}
			}
		}
	}
	runCases(t, cases)
}

func allReduceCase(dt tensor.DType, op reduce.Op, wrap bool, size, n int, opts cpu.Options, optsName string, inPlace, viewInPlace bool, seed uint64) pcase {
	return allReduceCaseOn(dt, op, wrap, size, n, opts, optsName, inPlace, viewInPlace, seed, -1, nil)
}

// allReduceCaseOn is allReduceCase whose rank heapRank (-1: none) keeps
// its buffers in the Go heap while a host allocator (a shared tensor
// arena) is set, and whose check also runs checkPath on every rank and its
// PathFor(allreduce, the message size) after the call (nil: none).
func allReduceCaseOn(dt tensor.DType, op reduce.Op, wrap bool, size, n int, opts cpu.Options, optsName string, inPlace, viewInPlace bool, seed uint64, heapRank int, checkPath func(r int, path string) error) pcase {
	name := fmt.Sprintf("n=%d/%v/%v/wrap=%v/size=%d/inplace=%v/opts=%s", n, dt, op, wrap, size, inPlace, optsName)
	if heapRank >= 0 {
		name += fmt.Sprintf("/heap-rank=%d", heapRank)
	}
	return pcase{name: name, n: n, opts: opts, setup: func(t testing.TB) (func(context.Context, ccl.Comm) error, func(*testing.T, []error)) {
		lo, hi := inputRange(op, dt, wrap)
		ins := make([]*tensor.Tensor, n)
		sends := make([]*tensor.Tensor, n)
		recvs := make([]*tensor.Tensor, n)
		paths := make([]string, n)
		for r := range n {
			restore := func() {}
			if r == heapRank {
				restore = tensor.SetHostAllocator(0, nil)
			}
			ins[r] = randomT(t, dt, size, seed+uint64(r), lo, hi)
			sends[r] = cloneT(t, ins[r])
			switch {
			case viewInPlace:
				v, err := sends[r].View(0, dt, shape(size))
				if err != nil {
					t.Fatal(err)
				}
				recvs[r] = v
			case inPlace:
				recvs[r] = sends[r]
			default:
				recvs[r] = poisoned(t, dt, size)
			}
			restore()
		}
		call := func(ctx context.Context, c ccl.Comm) error {
			r := c.Rank()
			err := c.AllReduce(ctx, sends[r], recvs[r], op)
			paths[r] = c.(*cpu.Comm).PathFor(ccl.KindAllReduce, size*dt.Size())
			return err
		}
		check := func(t *testing.T, errs []error) {
			if checkPath != nil {
				for r, p := range paths {
					if err := checkPath(r, p); err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			}
			if reduce.Supported(op, dt) != nil {
				if inPlace {
					wantErrAll(t, errs, ccl.ErrBadArgs, nil)
				} else {
					wantErrAll(t, errs, ccl.ErrBadArgs, recvs)
				}
				return
			}
			if !noErrors(t, errs) {
				return
			}
			want := reference(op, dt, ins)
			for r := range n {
				if err := want.check(recvs[r]); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if !sameBytes(recvs[r], recvs[0]) {
					t.Errorf("rank %d's result differs bitwise from rank 0's", r)
				}
				if !inPlace && !sameBytes(sends[r], ins[r]) {
					t.Errorf("rank %d: send was modified", r)
				}
			}
		}
		return call, check
	}}
}

func TestReduceScatterProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	var cases []pcase
	i := 0
	for _, dt := range tensor.DTypes {
		for _, op := range reduce.Ops {
			for _, size := range sizes {
				if size > 1023 && rng.IntN(2) == 0 {
					continue // sample the big ones
				}
				i++
				n := pickN(rng, i, false)
				opts, on := pickOpts(rng)
				cases = append(cases, reduceScatterCase(dt, op, size, n, opts, on, uint64(i)*100))
			}
		}
	}
	runCases(t, cases)
}

func reduceScatterCase(dt tensor.DType, op reduce.Op, size, n int, opts cpu.Options, optsName string, seed uint64) pcase {
	name := fmt.Sprintf("n=%d/%v/%v/size=%d/opts=%s", n, dt, op, size, optsName)
	return pcase{name: name, n: n, opts: opts, setup: func(t testing.TB) (func(context.Context, ccl.Comm) error, func(*testing.T, []error)) {
		lo, hi := inputRange(op, dt, false)
		ins := make([]*tensor.Tensor, n)
		sends := make([]*tensor.Tensor, n)
		recvs := make([]*tensor.Tensor, n)
		for r := range n {
			ins[r] = randomT(t, dt, size*n, seed+uint64(r), lo, hi)
			sends[r] = cloneT(t, ins[r])
			recvs[r] = poisoned(t, dt, size)
		}
		call := func(ctx context.Context, c ccl.Comm) error {
			r := c.Rank()
			return c.ReduceScatter(ctx, sends[r], recvs[r], op)
		}
		check := func(t *testing.T, errs []error) {
			if reduce.Supported(op, dt) != nil {
				wantErrAll(t, errs, ccl.ErrBadArgs, recvs)
				return
			}
			if !noErrors(t, errs) {
				return
			}
			want := reference(op, dt, ins)
			for r := range n {
				if err := want.sub(t, r, size).check(recvs[r]); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if !sameBytes(sends[r], ins[r]) {
					t.Errorf("rank %d: send was modified", r)
				}
			}
		}
		return call, check
	}}
}

// copyCase describes one case of a collective that only moves data.
type copyCase struct {
	dt          tensor.DType
	size, n     int
	root        int
	seed        uint64
	rootInPlace bool // broadcast: root passes send == recv
	dummy       bool // non-roots pass a poisoned tensor where nil is allowed
}

// copyCases samples every dtype and size with a rank count, root and
// options; setup turns one into the rank calls and the check.
func copyCases(seed uint64, kind string) []pcase {
	rng := rand.New(rand.NewPCG(seed, seed))
	var cases []pcase
	i := 0
	for _, dt := range tensor.DTypes {
		for _, size := range sizes {
			i++
			n := pickN(rng, i, false)
			opts, on := pickOpts(rng)
			c := copyCase{dt: dt, size: size, n: n, root: rng.IntN(n), seed: uint64(i) * 100,
				rootInPlace: rng.IntN(3) == 0, dummy: rng.IntN(2) == 0}
			name := fmt.Sprintf("n=%d/%s/%v/size=%d/root=%d/opts=%s", n, kind, dt, size, c.root, on)
			cases = append(cases, pcase{name: name, n: n, opts: opts, setup: copySetup(kind, c)})
		}
	}
	return cases
}

func TestAllGatherProperties(t *testing.T) { runCases(t, copyCases(3, "allgather")) }

func allGatherSetup(c copyCase) setupFunc {
	return func(t testing.TB) (func(context.Context, ccl.Comm) error, func(*testing.T, []error)) {
		lo, hi := defaultRange(c.dt)
		ins := make([]*tensor.Tensor, c.n)
		sends := make([]*tensor.Tensor, c.n)
		recvs := make([]*tensor.Tensor, c.n)
		for r := range c.n {
			ins[r] = randomT(t, c.dt, c.size, c.seed+uint64(r), lo, hi)
			sends[r] = cloneT(t, ins[r])
			recvs[r] = poisoned(t, c.dt, c.size*c.n)
		}
		call := func(ctx context.Context, cm ccl.Comm) error {
			r := cm.Rank()
			return cm.AllGather(ctx, sends[r], recvs[r])
		}
		check := func(t *testing.T, errs []error) {
			if !noErrors(t, errs) {
				return
			}
			want := expect{exact: concat(t, c.dt, ins)}
			for r := range c.n {
				if err := want.check(recvs[r]); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if !sameBytes(sends[r], ins[r]) {
					t.Errorf("rank %d: send was modified", r)
				}
			}
		}
		return call, check
	}
}

func TestBroadcastProperties(t *testing.T) { runCases(t, copyCases(4, "broadcast")) }

func broadcastSetup(c copyCase) setupFunc {
	return func(t testing.TB) (func(context.Context, ccl.Comm) error, func(*testing.T, []error)) {
		lo, hi := defaultRange(c.dt)
		in := randomT(t, c.dt, c.size, c.seed, lo, hi)
		sends := make([]*tensor.Tensor, c.n)
		recvs := make([]*tensor.Tensor, c.n)
		for r := range c.n {
			recvs[r] = poisoned(t, c.dt, c.size)
			switch {
			case r == c.root && c.rootInPlace:
				recvs[r] = cloneT(t, in)
				sends[r] = recvs[r]
			case r == c.root:
				sends[r] = cloneT(t, in)
			case c.dummy:
				sends[r] = poisoned(t, c.dt, c.size) // only read on the root
			}
		}
		call := func(ctx context.Context, cm ccl.Comm) error {
			r := cm.Rank()
			return cm.Broadcast(ctx, sends[r], recvs[r], c.root)
		}
		check := func(t *testing.T, errs []error) {
			if !noErrors(t, errs) {
				return
			}
			want := expect{exact: in}
			for r := range c.n {
				if err := want.check(recvs[r]); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if r == c.root && !sameBytes(sends[r], in) {
					t.Errorf("root's send was modified")
				}
				if r != c.root && sends[r] != nil {
					if pc, _ := tensor.PoisonCount(sends[r]); pc != int64(c.size) {
						t.Errorf("rank %d: non-root's send was written", r)
					}
				}
			}
		}
		return call, check
	}
}

func TestScatterProperties(t *testing.T) { runCases(t, copyCases(5, "scatter")) }

func scatterSetup(c copyCase) setupFunc {
	return func(t testing.TB) (func(context.Context, ccl.Comm) error, func(*testing.T, []error)) {
		lo, hi := defaultRange(c.dt)
		in := randomT(t, c.dt, c.size*c.n, c.seed, lo, hi)
		sends := make([]*tensor.Tensor, c.n)
		recvs := make([]*tensor.Tensor, c.n)
		for r := range c.n {
			recvs[r] = poisoned(t, c.dt, c.size)
			switch {
			case r == c.root:
				sends[r] = cloneT(t, in)
			case c.dummy:
				sends[r] = poisoned(t, c.dt, c.size*c.n) // only read on the root
			}
		}
		call := func(ctx context.Context, cm ccl.Comm) error {
			r := cm.Rank()
			return cm.Scatter(ctx, sends[r], recvs[r], c.root)
		}
		check := func(t *testing.T, errs []error) {
			if !noErrors(t, errs) {
				return
			}
			want := expect{exact: in}
			for r := range c.n {
				if err := want.sub(t, r, c.size).check(recvs[r]); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if r == c.root && !sameBytes(sends[r], in) {
					t.Errorf("root's send was modified")
				}
				if r != c.root && sends[r] != nil {
					if pc, _ := tensor.PoisonCount(sends[r]); pc != int64(c.size*c.n) {
						t.Errorf("rank %d: non-root's send was written", r)
					}
				}
			}
		}
		return call, check
	}
}

func TestGatherProperties(t *testing.T) { runCases(t, copyCases(6, "gather")) }

func gatherSetup(c copyCase) setupFunc {
	return func(t testing.TB) (func(context.Context, ccl.Comm) error, func(*testing.T, []error)) {
		lo, hi := defaultRange(c.dt)
		ins := make([]*tensor.Tensor, c.n)
		sends := make([]*tensor.Tensor, c.n)
		recvs := make([]*tensor.Tensor, c.n)
		for r := range c.n {
			ins[r] = randomT(t, c.dt, c.size, c.seed+uint64(r), lo, hi)
			sends[r] = cloneT(t, ins[r])
			if r == c.root || c.dummy {
				recvs[r] = poisoned(t, c.dt, c.size*c.n) // only written on the root
			}
		}
		call := func(ctx context.Context, cm ccl.Comm) error {
			r := cm.Rank()
			return cm.Gather(ctx, sends[r], recvs[r], c.root)
		}
		check := func(t *testing.T, errs []error) {
			if !noErrors(t, errs) {
				return
			}
			want := expect{exact: concat(t, c.dt, ins)}
			for r := range c.n {
				if !sameBytes(sends[r], ins[r]) {
					t.Errorf("rank %d: send was modified", r)
				}
				switch {
				case r == c.root:
					if err := want.check(recvs[r]); err != nil {
						t.Errorf("root %d: %v", r, err)
					}
				case recvs[r] != nil:
					if pc, _ := tensor.PoisonCount(recvs[r]); pc != int64(c.size*c.n) {
						t.Errorf("rank %d: non-root's recv was written (%d elements)", r, int64(c.size*c.n)-pc)
					}
				}
			}
		}
		return call, check
	}
}

func TestSendRecvProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var cases []pcase
	i := 0
	for _, dt := range tensor.DTypes {
		for _, size := range sizes {
			i++
			n := pickN(rng, i, true)
			opts, on := pickOpts(rng)
			// A global sequence of messages (src, dst): each rank takes part
			// in its messages in sequence order, which cannot deadlock.
			var pairs [][2]int
			if size < 1023 {
				for a := range n { // every ordered pair
					for b := range n {
						if a != b {
							pairs = append(pairs, [2]int{a, b})
						}
					}
				}
				rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
			} else {
				for range 3 + rng.IntN(4) {
					a := rng.IntN(n)
					pairs = append(pairs, [2]int{a, (a + 1 + rng.IntN(n-1)) % n})
				}
			}
			if rng.IntN(2) == 0 {
				pairs = append(pairs, pairs[len(pairs)-1]) // the same pair twice in a row
			}
			name := fmt.Sprintf("n=%d/%v/size=%d/msgs=%d/opts=%s", n, dt, size, len(pairs), on)
			cases = append(cases, sendRecvCase(name, dt, size, n, opts, pairs, uint64(i)*1000))
		}
	}
	runCases(t, cases)
}

func sendRecvCase(name string, dt tensor.DType, size, n int, opts cpu.Options, pairs [][2]int, seed uint64) pcase {
	return pcase{name: name, n: n, opts: opts, setup: func(t testing.TB) (func(context.Context, ccl.Comm) error, func(*testing.T, []error)) {
		lo, hi := defaultRange(dt)
		ins := make([]*tensor.Tensor, len(pairs))
		sends := make([]*tensor.Tensor, len(pairs))
		recvs := make([]*tensor.Tensor, len(pairs))
		for k := range pairs {
			ins[k] = randomT(t, dt, size, seed+uint64(k), lo, hi)
			sends[k] = cloneT(t, ins[k])
			recvs[k] = poisoned(t, dt, size)
		}
		call := func(ctx context.Context, c ccl.Comm) error {
			r := c.Rank()
			for k, p := range pairs {
				var err error
				switch r {
				case p[0]:
					err = c.Send(ctx, sends[k], p[1])
				case p[1]:
					err = c.Recv(ctx, recvs[k], p[0])
				}
				if err != nil {
					return fmt.Errorf("message %d (%d -> %d): %w", k, p[0], p[1], err)
				}
			}
			return nil
		}
		check := func(t *testing.T, errs []error) {
			if !noErrors(t, errs) {
				return
			}
			for k, p := range pairs {
				if err := (expect{exact: ins[k]}).check(recvs[k]); err != nil {
					t.Errorf("message %d (%d -> %d): %v", k, p[0], p[1], err)
				}
				if !sameBytes(sends[k], ins[k]) {
					t.Errorf("message %d: sender's tensor was modified", k)
				}
			}
		}
		return call, check
	}}
}

// TestBarrierProperties: no rank leaves a barrier before every rank has
// entered it, over many rounds with staggered arrivals.
func TestBarrierProperties(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for _, opts := range []cpu.Options{smallOpts, smallStaged, {}} {
			t.Run(fmt.Sprintf("n=%d/slot=%d", n, opts.SlotBytes), func(t *testing.T) {
				const rounds = 30
				var entered atomic.Int64
				errs := runRanks(t, opts, n, 0, func(ctx context.Context, c ccl.Comm) error {
					rng := rand.New(rand.NewPCG(uint64(c.Rank()), 9))
					for i := range rounds {
						if rng.IntN(4) == 0 {
							time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
						}
						entered.Add(1)
						if err := c.Barrier(ctx); err != nil {
							return fmt.Errorf("round %d: %w", i, err)
						}
						if got, want := entered.Load(), int64(n*(i+1)); got < want {
							return fmt.Errorf("round %d: left the barrier after %d arrivals, want >= %d", i, got, want)
						}
					}
					return nil
				})
				noErrors(t, errs)
			})
		}
	}
}

// TestMixedSequence runs a random sequence of different collectives,
// dtypes and sizes on one communicator per rank count, so that slot parity
// and round counting carry across calls of different kinds.
func TestMixedSequence(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	var cases []pcase
	for k := range 200 {
		n := 1 + rng.IntN(8)
		dt := tensor.DTypes[rng.IntN(len(tensor.DTypes))]
		op := reduce.Ops[rng.IntN(4)] // avg is covered above
		size := []int{0, 1, 5, 300, 2000}[rng.IntN(5)]
		seed := uint64(k) * 100
		var c pcase
		switch rng.IntN(7) {
		case 0:
			c = allReduceCase(dt, op, false, size, n, smallOpts, "small", rng.IntN(2) == 0, false, seed)
		case 1:
			c = reduceScatterCase(dt, op, size, n, smallOpts, "small", seed)
		case 2:
			c = sendRecvCase("", dt, size, max(n, 2), smallOpts, [][2]int{{0, 1}, {1, 0}}, seed)
		default:
			kinds := []string{"allgather", "broadcast", "scatter", "gather"}
			kind := kinds[rng.IntN(len(kinds))]
			cc := copyCase{dt: dt, size: size, n: n, root: rng.IntN(n), seed: seed, rootInPlace: rng.IntN(2) == 0, dummy: rng.IntN(2) == 0}
			c = pcase{n: n, opts: smallOpts, setup: copySetup(kind, cc)}
		}
		c.name = fmt.Sprintf("step%03d", k)
		cases = append(cases, c)
	}
	runCases(t, cases)
}

// TestAllReduceDefaultOptionsLarge crosses the default slot (1 MiB) and
// one-shot limit (256 KiB), so the default two-step path and chunking run.
func TestAllReduceDefaultOptionsLarge(t *testing.T) {
	runCases(t, []pcase{
		allReduceCase(tensor.Float32, reduce.Sum, false, 300_000, 3, cpu.Options{}, "default", true, false, 77),
		allReduceCase(tensor.BFloat16, reduce.Avg, false, 600_000, 4, cpu.Options{}, "default", false, false, 78),
		allReduceCase(tensor.Int32, reduce.Max, false, 300_000, 2, cpu.Options{}, "default", false, false, 79),
		allReduceCase(tensor.Float16, reduce.Sum, true, 300_000, 5, cpu.Options{NoDirect: true, NoCMA: true}, "staged", false, false, 80),
		allReduceCase(tensor.Float32, reduce.Sum, false, 700_001, 2, cpu.Options{NoDirect: true}, "cma", true, true, 81),
		allReduceCase(tensor.Float64, reduce.Min, false, 300_007, 3, cpu.Options{NoDirect: true}, "cma", false, false, 82),
	})
}

// The communicator says which path large allreduces take, and why.
func TestPath(t *testing.T) {
	for _, tc := range []struct {
		opts cpu.Options
		want string
	}{
		{cpu.Options{}, "direct"},
		{cpu.Options{NoDirect: true}, "cma"},
		{cpu.Options{NoDirect: true, NoCMA: true}, "staged: disabled (Options.NoCMA)"},
	} {
		errs := runRanks(t, tc.opts, 2, 0, func(ctx context.Context, c ccl.Comm) error {
			cc := c.(*cpu.Comm)
			if got := cc.Path(); got != tc.want {
				return fmt.Errorf("Path() = %q, want %q", got, tc.want)
			}
			if got := cc.PathFor(ccl.KindAllReduce, 1<<30); got != tc.want {
				return fmt.Errorf("PathFor(allreduce, 1 GiB) = %q, want %q", got, tc.want)
			}
			if got := cc.PathFor(ccl.KindAllReduce, 1024); got != "staged" {
				return fmt.Errorf("PathFor(allreduce, 1 KiB) = %q, want staged", got)
			}
			return nil
		})
		noErrors(t, errs)
	}
}

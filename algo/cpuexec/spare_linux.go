package cpuexec

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Spare cores: where a rank has more cores than workers (a plan of one
// thread block a rank, like the library's one-shot all-reduce, runs on
// one worker), goroutines owned by the executor take pieces of the
// rank's large plain copies and reduces, so that one block's bytes still
// move on every core the rank has. A worker splits an op of at least
// spareMin bytes into one piece a goroutine plus its own, runs its own
// and waits for the others; packets and smaller ops run whole.

// spareMin is the smallest copy or reduce the spare goroutines split:
// handing a piece to a goroutine and waiting for it costs a few
// microseconds, about what one core copies of 64 KiB.
const spareMin = 1 << 20

// spareAlign: pieces start on cache lines (and so on every element).
const spareAlign = 64

// sparesOverride, when positive, fixes the spare goroutines per rank
// (tests run the split path on small machines); negative: none.
var sparesOverride atomic.Int32

// spareCount is how many goroutines take pieces of this rank's ops: the
// rank's share of the cores less its workers.
func spareCount(ranks, workers int) int {
	if o := int(sparesOverride.Load()); o != 0 {
		return max(0, o)
	}
	return max(0, runtime.NumCPU()/max(1, ranks)-workers)
}

// spares are the goroutines (owned by the executor: started by Join,
// stopped by close) that run pieces.
type spares struct {
	n    int
	jobs chan spareJob
	wg   sync.WaitGroup
}

// spareJob is one piece [lo, hi) of a split op.
type spareJob struct {
	f      func(lo, hi int) error
	lo, hi int
	s      *split
}

// split is one op's pieces in flight: the first failure, and the pieces
// not done yet.
type split struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	err  error
	rank int
}

func (s *split) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// startSpares starts n goroutines (nil for none).
func startSpares(n int) *spares {
	if n <= 0 {
		return nil
	}
	sp := &spares{n: n, jobs: make(chan spareJob, n)}
	for range n {
		sp.wg.Add(1)
		go func() {
			defer sp.wg.Done()
			for j := range sp.jobs {
				j.run()
			}
		}()
	}
	return sp
}

// run runs the piece, a panic becoming the split's error (the goroutine
// lives on for the next piece).
func (j spareJob) run() {
	defer j.s.wg.Done()
	defer func() {
		if p := recover(); p != nil {
			j.s.fail(fmt.Errorf("cpuexec: rank %d: panic in a piece of a split op: %v\n%s", j.s.rank, p, debug.Stack()))
		}
	}()
	if err := j.f(j.lo, j.hi); err != nil {
		j.s.fail(err)
	}
}

// close stops the goroutines; no split may be in flight.
func (sp *spares) close() {
	if sp == nil {
		return
	}
	close(sp.jobs)
	sp.wg.Wait()
}

// each runs f over [0, n): whole where n is below spareMin or there are
// no spares, else in up to sp.n+1 pieces of whole cache lines, the
// caller taking the first; it returns when every piece is done (a
// panicking piece included), with the first failure of any.
func (sp *spares) each(rank, n int, f func(lo, hi int) error) error {
	if sp == nil || n < spareMin {
		return f(0, n)
	}
	piece := (n + sp.n) / (sp.n + 1)
	piece = (piece + spareAlign - 1) / spareAlign * spareAlign
	s := &split{rank: rank}
	for lo := piece; lo < n; lo += piece {
		s.wg.Add(1)
		sp.jobs <- spareJob{f: f, lo: lo, hi: min(lo+piece, n), s: s}
	}
	s.wg.Add(1)
	spareJob{f: f, lo: 0, hi: min(piece, n), s: s}.run()
	s.wg.Wait()
	return s.err
}

// copySpare copies s into d (the same length, no overlap): a large copy
// in pieces on the rank's spare cores. A copy of pieces of equal slices
// cannot fail; were one to panic on a spare goroutine, the panic is
// raised again here, where a whole copy would have raised it.
func (x *Executor) copySpare(d, s []byte) {
	if x.sp == nil || len(s) < spareMin {
		copyCached(d, s)
		return
	}
	if err := x.sp.each(x.rank, len(s), func(lo, hi int) error {
		copyCached(d[lo:hi], s[lo:hi])
		return nil
	}); err != nil {
		panic(err)
	}
}

package session

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/chorus-rt/chorus/internal/shmem"
)

// cacheLine separates words written by different goroutines (two lines:
// adjacent-line prefetchers pull pairs).
const cacheLine = 128

// logBlockLen is the number of entries per block of a log.
const logBlockLen = 32

// logEntry fills a cache line of its own: the readers' releases of one
// entry (N atomic decrements for a broadcast) must not contend with the
// producer writing the next one.
type logEntry[T any] struct {
	v    atomic.Pointer[T]
	left atomic.Int32 // readers that have not released the entry yet
	_    [cacheLine - 12]byte
}

type logBlock[T any] struct {
	e    [logBlockLen]logEntry[T]
	next atomic.Pointer[logBlock[T]] // linked before the block's first entry is published
}

// cursor is one consumer's position in a log and its parking state; it is
// owned by the consumer goroutine except for parked and wake (channel
// parking).
type cursor[T any] struct {
	blk    *logBlock[T]
	idx    int
	seq    uint64        // entries consumed
	budget time.Duration // busy-poll budget (adapts)
	_      [cacheLine]byte
	parked atomic.Int32 // 1 while the consumer may be asleep on wake
	wake   chan struct{}
	_      [cacheLine]byte
}

// mlog is an unbounded, append-only log with one producer at a time and a
// fixed set of consumers, each reading every entry in order.
//
// The threaded session uses one log for all commands (a broadcast is one
// append that every worker reads, instead of one queue operation per
// worker: with workers polling on other cores, each of those cost a cache
// line hand-off) and one log per worker for its replies. An entry is
// cleared once its last reader released it, so a log never keeps a value
// (a tensor argument) alive after it was handled; blocks are freed by the
// garbage collector once every consumer moved past them.
type mlog[T any] struct {
	// Producer state.
	tail *logBlock[T]
	idx  int
	seq  uint64
	_    [cacheLine]byte
	pub  atomic.Uint64 // entries published
	_    [cacheLine]byte
	// sleepers counts consumers that may be parked, so that the producer
	// wakes anyone only when one might be.
	sleepers atomic.Int32
	// gen is the futex word of futex parking: bumped by every wake.
	gen  atomic.Uint32
	_    [cacheLine]byte
	cons []*cursor[T]
	// futex: consumers park in the kernel on gen (busy policy, Linux);
	// otherwise on their cursor's channel.
	futex bool
}

func newLog[T any](consumers int, p waitPolicy) *mlog[T] {
	b := new(logBlock[T])
	l := &mlog[T]{tail: b, futex: p.busy && haveFutex}
	for range consumers {
		l.cons = append(l.cons, &cursor[T]{blk: b, budget: p.maxSpin, wake: make(chan struct{}, 1)})
	}
	return l
}

// put publishes v for readers consumers (each must release it once) and
// wakes the consumers that are parked. One producer at a time.
func (l *mlog[T]) put(v *T, readers int) {
	e := &l.tail.e[l.idx]
	e.left.Store(int32(readers))
	e.v.Store(v)
	if l.idx++; l.idx == logBlockLen {
		nb := new(logBlock[T])
		l.tail.next.Store(nb)
		l.tail, l.idx = nb, 0
	}
	l.seq++
	// Sequentially consistent store then load: a consumer that is about
	// to park counted itself before its last check of pub, so either it
	// sees this entry or we see it.
	l.pub.Store(l.seq)
	if l.sleepers.Load() != 0 {
		l.wakeAll()
	}
}

// wakeAll wakes every parked consumer (they re-check what woke them).
func (l *mlog[T]) wakeAll() {
	if l.futex {
		l.gen.Add(1)
		futexWake(&l.gen)
		return
	}
	for _, c := range l.cons {
		if c.parked.CompareAndSwap(1, 0) {
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
	}
}

// ready reports whether consumer c has an entry to read.
func (l *mlog[T]) ready(c *cursor[T]) bool { return l.pub.Load() > c.seq }

// pop returns consumer c's next entry; ready(c) must be true. The value is
// nil if the entry's readers already released it (an entry addressed to
// another consumer).
func (l *mlog[T]) pop(c *cursor[T]) (*T, *logEntry[T]) {
	e := &c.blk.e[c.idx]
	v := e.v.Load()
	c.seq++
	if c.idx++; c.idx == logBlockLen {
		c.blk, c.idx = c.blk.next.Load(), 0
	}
	return v, e
}

// release records that one reader is done with e; the last one clears it.
func release[T any](e *logEntry[T]) {
	if e.left.Add(-1) == 0 {
		e.v.Store(nil)
	}
}

// wait returns once consumer c has an entry to read (nil), or with the
// error of the first of done (ErrShutdown) and ctx (ctx.Err()) to end.
// yields is the yield-mode poll count of this consumer.
func (l *mlog[T]) wait(c *cursor[T], p waitPolicy, yields int, ctx context.Context, done <-chan struct{}) error {
	if l.ready(c) {
		return nil
	}
	var start time.Time
	switch {
	case p.busy:
		pc := shmem.PollPauses()
		start = time.Now()
		for i := 1; ; i++ {
			shmem.Pause(pc)
			if l.ready(c) {
				c.budget = nextBudget(p, c.budget, time.Since(start))
				return nil
			}
			if i%busyClockEvery == 0 && time.Since(start) >= c.budget {
				break
			}
		}
	default:
		for range yields {
			runtime.Gosched()
			if l.ready(c) {
				return nil
			}
		}
	}
	err := l.park(c, ctx, done)
	if p.busy && err == nil {
		// The whole wait, wake-up included: a wait polling would
		// have covered raises the budget.
		c.budget = nextBudget(p, c.budget, time.Since(start))
	}
	return err
}

// park sleeps until consumer c has an entry, done closes or ctx ends.
func (l *mlog[T]) park(c *cursor[T], ctx context.Context, done <-chan struct{}) error {
	if l.futex {
		return l.parkFutex(c, ctx, done)
	}
	var ctxDone <-chan struct{}
	if ctx != nil {
		ctxDone = ctx.Done()
	}
	for {
		l.sleepers.Add(1)
		c.parked.Store(1)
		if l.ready(c) {
			// If the producer took the flag meanwhile, its token stays
			// in the channel and makes a later park return early: harmless.
			c.parked.Store(0)
			l.sleepers.Add(-1)
			return nil
		}
		var err error
		select {
		case <-c.wake:
		case <-done:
			err = ErrShutdown
		case <-ctxDone:
			err = ctx.Err()
		}
		c.parked.Store(0)
		l.sleepers.Add(-1)
		if l.ready(c) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// parkFutex is park for the busy policy: the consumer's thread sleeps in
// the kernel (its P handed to the scheduler at once) and the producer's
// FUTEX_WAKE wakes it directly; the woken thread takes an idle P, which
// the busy policy guarantees (workers + 1 <= GOMAXPROCS).
//
// A channel wake-up goes through the Go scheduler instead: it puts the
// woken goroutine in the producer's runnext slot, from where an idle P's
// thread (woken through the kernel first) may take it only after sleeping
// 3 us (runtime.runqgrab), 50 us and more with Linux's default timer
// slack, while the producer keeps its P busy polling for replies; and the
// idle threads that take N woken workers are woken one after another. On
// the 16-core host that made every round of an 8-worker session that had
// to wake someone take 60-75 us.
func (l *mlog[T]) parkFutex(c *cursor[T], ctx context.Context, done <-chan struct{}) error {
	if ctx != nil && ctx.Done() != nil {
		stop := context.AfterFunc(ctx, l.wakeAll)
		defer stop()
	}
	for {
		g := l.gen.Load()
		l.sleepers.Add(1)
		if l.ready(c) {
			l.sleepers.Add(-1)
			return nil
		}
		var err error
		select {
		case <-done:
			err = ErrShutdown
		default:
			if ctx != nil {
				err = ctx.Err()
			}
		}
		if err == nil {
			// Woken by put, by stop (after closing done) or by ctx's
			// AfterFunc; the timeout only bounds a wake-up lost to a bug.
			futexWait(&l.gen, g, futexSafety)
		}
		l.sleepers.Add(-1)
		if l.ready(c) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

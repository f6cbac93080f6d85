package session

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
)

// cacheLine separates words written by different goroutines (two lines:
// adjacent-line prefetchers pull pairs).
const cacheLine = 128

// logBlockLen is the number of entries per block of a log. 256 makes a
// command log's block (256 entries of 128 bytes and a pointer) a large
// object, which the Go allocator places at a page boundary: smaller
// objects with pointers start 8 bytes past their size class's slot
// (the allocation header), and entries would straddle cache lines.
const logBlockLen = 256

// logEntry is one entry: its sequence number, the consumer it is
// addressed to and its value, written by the producer before it publishes
// the sequence number (a targeted entry's reader clears the value after
// it). The value is in the entry, not behind a pointer: a consumer polls
// the entry it reads next, so the line that tells it an entry is there is
// the line that holds it (with the command log's 128-byte entries, every
// field a command is read for: cmdSlot), one cache-line transfer per
// command, where a separate published counter, or a pointer to a value
// the producer had just written, each cost one more, on the critical path
// (0.2 us a round on the 16-core host, BenchmarkLeanRound). A consumer
// reads the value only of entries addressed to it or to all: the others
// learn from to that the entry is not theirs. The value needs no atomic
// access: one writer before publication, readers after, and for a
// targeted entry one reader, who also clears it. Nobody counts readers:
// a broadcast entry released by N workers with atomic decrements pulled
// one line through N cores, on the critical path of the next command.
type logEntry[T any] struct {
	seq atomic.Uint64 // 0 until published, then the entry's number (from 1)
	to  int32         // consumer index, or toAll
	v   T
}

// toAll addresses a log entry to every consumer.
const toAll = -1

type logBlock[T any] struct {
	e    [logBlockLen]logEntry[T]
	next atomic.Pointer[logBlock[T]] // linked before the block's last entry is published
}

// cursor is one consumer's position in a log and its parking state; it is
// owned by the consumer goroutine except for parked and wake (channel
// parking).
type cursor[T any] struct {
	blk    *logBlock[T]
	idx    int
	id     int32         // this consumer's index: entries addressed to it are read
	seq    uint64        // entries consumed
	acked  uint64        // the last acknowledgement taken (take)
	budget time.Duration // busy-poll budget (adapts)
	_      [cacheLine]byte
	// ack is the producer's latest acknowledgement, a sequence number
	// that stands for a message without payload (ackTo): counted as
	// ready, so waiting for either is one wait.
	ack    atomic.Uint64
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
// line hand-off) and one log per worker for its replies.
//
// What a log keeps alive: an entry with one reader (a reply, a command for
// one worker: these carry tensors) is cleared by its reader once handled
// (done). A broadcast entry (CallPacked, Sync, KillReg: register ids and
// small values; host tensors are never call arguments) keeps its value
// until every consumer has left its block, which the garbage collector
// then frees: at most logBlockLen entries per log stay reachable.
type mlog[T any] struct {
	// Producer state.
	tail *logBlock[T]
	idx  int
	seq  uint64
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
	for i := range consumers {
		l.cons = append(l.cons, &cursor[T]{blk: b, id: int32(i), budget: p.maxSpin, wake: make(chan struct{}, 1)})
	}
	return l
}

// put publishes v to every consumer and wakes the consumers that are
// parked. One producer at a time.
func (l *mlog[T]) put(v T) { l.putTo(v, toAll) }

// putTo publishes v to consumer to (or toAll).
func (l *mlog[T]) putTo(v T, to int32) {
	e := &l.tail.e[l.idx]
	e.to, e.v = to, v
	if l.idx++; l.idx == logBlockLen {
		// Linked before the entry is published: a consumer that has
		// read the block's last entry moves on without waiting.
		nb := new(logBlock[T])
		l.tail.next.Store(nb)
		l.tail, l.idx = nb, 0
	}
	l.seq++
	// A consumer that is about to park counted itself before its last
	// check of the entry, so either it sees this entry or we see it:
	// with a sequentially consistent store then load, or, where
	// consumers park on the futex, up to the store buffer's drain
	// (parkFutex's first sleep is short for that).
	if l.futex {
		publishSeq(&e.seq, l.seq)
	} else {
		e.seq.Store(l.seq)
	}
	if l.sleepers.Load() != 0 {
		l.wakeAll()
	}
}

// publishSeq stores v in w with shmem.Publish: a plain store on amd64,
// which does not wait for the entry's lines to come back from the cores
// polling them (an atomic.Uint64 is its one word in memory). The
// store-load order the sleeper protocol needs is then kept only up to
// the store buffer's drain: see parkFutex.
func publishSeq(w *atomic.Uint64, v uint64) {
	shmem.Publish((*uint64)(unsafe.Pointer(w)), v)
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

// ackTo publishes acknowledgement seq (increasing) to consumer c and
// wakes it if it may be parked: a message without payload, without an
// entry whose value the consumer would have to chase.
func (l *mlog[T]) ackTo(c *cursor[T], seq uint64) {
	// As in putTo.
	if l.futex {
		publishSeq(&c.ack, seq)
	} else {
		c.ack.Store(seq)
	}
	if l.sleepers.Load() != 0 {
		l.wakeAll()
	}
}

// ready reports whether consumer c has an entry or a new acknowledgement
// to read.
func (l *mlog[T]) ready(c *cursor[T]) bool { return l.pending(c) || c.ack.Load() > c.acked }

// pending reports whether consumer c has an entry to read.
func (l *mlog[T]) pending(c *cursor[T]) bool { return c.blk.e[c.idx].seq.Load() > c.seq }

// take returns consumer c's next message: its next entry's value and the
// entry, or (if no entry is pending) a new acknowledgement, or neither.
// The acknowledgement is loaded first: entries the producer published
// before it are then pending, and come first, in the order sent.
func (l *mlog[T]) take(c *cursor[T]) (v *T, e *logEntry[T], ack uint64) {
	a := c.ack.Load()
	if l.pending(c) {
		v, e = l.pop(c)
		return v, e, 0
	}
	if a > c.acked {
		c.acked = a
		return nil, nil, a
	}
	return nil, nil, 0
}

// pop returns consumer c's next entry; pending(c) must be true. The value
// (in the entry: valid until done) is nil if the entry is addressed to
// another consumer.
func (l *mlog[T]) pop(c *cursor[T]) (*T, *logEntry[T]) {
	e := &c.blk.e[c.idx]
	var v *T
	if e.to == toAll || e.to == c.id {
		v = &e.v
	}
	c.seq++
	if c.idx++; c.idx == logBlockLen {
		c.blk, c.idx = c.blk.next.Load(), 0
	}
	return v, e
}

// done clears an entry that had one reader, once that reader handled it,
// so that the log does not keep its value (a tensor) alive.
func done[T any](e *logEntry[T]) {
	var zero T
	e.v = zero
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
				// A short wait is counted in polls, not read from the
				// clock: the read (45 ns on the 16-core VM) would come
				// after the command arrived, on the path every worker
				// of a round is waited for; a budget needs no better
				// than its factor of 2.
				w := time.Duration(i) * shmem.TargetPollTime
				if i >= busyClockEvery {
					w = time.Since(start)
				}
				c.budget = nextBudget(p, c.budget, w)
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

// parkSleep is parkFutex's sleep (a test records the durations).
var parkSleep = futexWait

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
	sleep := firstSleep
	for {
		g := l.gen.Load()
		l.sleepers.Add(1)
		if l.ready(c) || sleep == firstSleep && shmem.Grace(func() bool { return l.ready(c) }) {
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
			// AfterFunc. Producers publish with a plain store and then
			// look at sleepers without a fence (publishSeq): an entry
			// still in the producer's store buffer when this consumer
			// counted itself and re-checked may come unannounced. It is
			// visible within nanoseconds: shmem.Grace above polls for
			// it, and at the latest the check after firstSleep finds
			// it; a later entry sees this consumer counted.
			// futexSafety only bounds a wake-up lost to a bug.
			parkSleep(&l.gen, g, sleep)
			sleep = futexSafety
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

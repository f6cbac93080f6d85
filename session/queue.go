package session

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
)

// Spin budgets, in polls separated by a yield. Parking a goroutine and
// waking it costs microseconds when the OS thread under it must be woken
// too; an answer usually arrives within a few yields. Workers spin less
// because several of them share the processors with the controller.
const (
	controllerSpin = 64
	workerSpin     = 8
)

// queue is an unbounded multi-producer, single-consumer batch queue whose
// consumer spins briefly, then parks.
type queue[T any] struct {
	mu     sync.Mutex
	items  []T
	n      atomic.Int32 // len(items), readable without the lock
	parked bool
	wake   chan struct{} // capacity 1
}

func newQueue[T any]() *queue[T] { return &queue[T]{wake: make(chan struct{}, 1)} }

// put appends v and wakes the consumer if it is parked.
func (q *queue[T]) put(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.n.Store(int32(len(q.items)))
	wake := q.parked
	q.parked = false
	q.mu.Unlock()
	if wake {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// take appends every queued item to buf, waiting for at least one. It
// returns false when done is closed first.
func (q *queue[T]) take(buf []T, spin int, done <-chan struct{}) ([]T, bool) {
	for {
		for i := 0; q.n.Load() == 0 && i < spin; i++ {
			runtime.Gosched()
		}
		q.mu.Lock()
		if len(q.items) > 0 {
			buf = append(buf, q.items...)
			clear(q.items)
			q.items = q.items[:0]
			q.n.Store(0)
			q.mu.Unlock()
			return buf, true
		}
		q.parked = true
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-done:
			return buf, false
		}
	}
}

// tryOne removes the oldest item if there is one.
func (q *queue[T]) tryOne() (T, bool) {
	var zero T
	if q.n.Load() == 0 {
		return zero, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return zero, false
	}
	v := q.items[0]
	q.items[0] = zero
	q.items = q.items[1:]
	q.n.Store(int32(len(q.items)))
	return v, true
}

// takeOne waits for the oldest item, honouring ctx and done.
func (q *queue[T]) takeOne(ctx context.Context, spin int, done <-chan struct{}) (T, error) {
	var zero T
	for {
		for i := 0; q.n.Load() == 0 && i < spin; i++ {
			runtime.Gosched()
		}
		if v, ok := q.tryOne(); ok {
			return v, nil
		}
		q.mu.Lock()
		if len(q.items) > 0 {
			q.mu.Unlock()
			continue
		}
		q.parked = true
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
			q.unpark()
			return zero, ctx.Err()
		case <-done:
			q.unpark()
			return zero, ErrShutdown
		}
	}
}

func (q *queue[T]) unpark() {
	q.mu.Lock()
	q.parked = false
	q.mu.Unlock()
}

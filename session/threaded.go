package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chorus-rt/chorus/registry"
	"github.com/chorus-rt/chorus/tensor"
	"github.com/chorus-rt/chorus/wire"
	"github.com/chorus-rt/chorus/worker"
)

// Options configure a session.
type Options struct {
	NumWorkers int
	// NumGroups divides NumWorkers into contiguous groups; 0 means 1.
	NumGroups int
	// Registry holds the functions of a threaded session's workers; nil
	// means registry.Global. Process workers always use the registry of
	// the program they run.
	Registry *registry.Registry
	// ShutdownGrace bounds how long Shutdown waits for workers before
	// forcing them (default 5 s).
	ShutdownGrace time.Duration
}

func (o Options) grace() time.Duration {
	if o.ShutdownGrace > 0 {
		return o.ShutdownGrace
	}
	return 5 * time.Second
}

// threaded runs each worker as a goroutine. Commands and replies travel as
// Go values over buffered channels, one pair per worker.
type threaded struct {
	n       int
	cmds    []chan *wire.Command
	replies []chan *wire.Reply
	done    chan struct{} // closed by stop: unblocks the controller
	exited  []chan struct{}
	wg      sync.WaitGroup
}

// queueLen bounds the commands in flight per worker; CallPacked blocks
// (it does not fail) when a worker is this far behind.
const queueLen = 4096

// NewThreaded starts a session whose workers are goroutines.
func NewThreaded(opts Options) (*Session, error) {
	groups, err := validateCounts(opts.NumWorkers, opts.NumGroups)
	if err != nil {
		return nil, err
	}
	n := opts.NumWorkers
	t := &threaded{n: n, done: make(chan struct{})}
	ws := make([]*worker.Worker, n)
	for i := range n {
		w, err := worker.New(worker.Config{ID: i, NumWorkers: n, NumGroups: groups, Device: tensor.CPUDevice, Registry: opts.Registry})
		if err != nil {
			return nil, err
		}
		ws[i] = w
		t.cmds = append(t.cmds, make(chan *wire.Command, queueLen))
		// Replies are bounded by the number of synchronous commands in
		// flight (one at a time) plus one notice per reply.
		t.replies = append(t.replies, make(chan *wire.Reply, queueLen))
		t.exited = append(t.exited, make(chan struct{}))
	}
	for i, w := range ws {
		t.wg.Add(1)
		go t.run(i, w)
	}
	return newSession("threaded", n, groups, t, opts.grace()), nil
}

// run is worker i's goroutine; it exits on Shutdown or when stop gives up.
func (t *threaded) run(i int, w *worker.Worker) {
	defer t.wg.Done()
	defer close(t.exited[i])
	defer w.Close()
	for {
		var c *wire.Command
		select {
		case c = <-t.cmds[i]:
		case <-t.done:
			return
		}
		if c.Worker != wire.AllWorkers && int(c.Worker) != i {
			continue
		}
		reply, notice, stop := w.Handle(c)
		if notice != nil {
			t.put(i, notice)
		}
		if reply != nil {
			t.put(i, reply)
		}
		if stop {
			return
		}
	}
}

func (t *threaded) put(i int, r *wire.Reply) {
	select {
	case t.replies[i] <- r:
	case <-t.done:
	}
}

func (t *threaded) send(c *wire.Command) error {
	if c.Worker != wire.AllWorkers {
		return t.sendTo(int(c.Worker), c)
	}
	for i := range t.n {
		if err := t.sendTo(i, c); err != nil {
			return err
		}
	}
	return nil
}

func (t *threaded) sendTo(i int, c *wire.Command) error {
	select {
	case t.cmds[i] <- c:
		return nil
	case <-t.done:
		return ErrShutdown
	}
}

func (t *threaded) recv(ctx context.Context, w int) (*wire.Reply, error) {
	select {
	case r := <-t.replies[w]:
		return r, nil
	default:
	}
	select {
	case r := <-t.replies[w]:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.done:
		return nil, ErrShutdown
	}
}

func (t *threaded) poll(w int) (*wire.Reply, error) {
	select {
	case r := <-t.replies[w]:
		return r, nil
	default:
		return nil, nil
	}
}

func (t *threaded) lost() error { return nil }

func (t *threaded) stop(grace time.Duration) error {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	expired := false
	var stuck []error
	for i, ex := range t.exited {
		if !expired {
			select {
			case <-ex:
				continue
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-ex:
		default:
			stuck = append(stuck, fmt.Errorf("worker %d did not stop within %v (a function is still running)", i, grace))
		}
	}
	close(t.done)
	if len(stuck) > 0 {
		return fmt.Errorf("session: Shutdown: %w", errors.Join(stuck...))
	}
	t.wg.Wait()
	return nil
}

func (t *threaded) close() {}

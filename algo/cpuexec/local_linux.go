package cpuexec

import (
	"sync"
	"sync/atomic"
)

// When every rank of an executor lives in this process (a threaded
// session, or goroutine ranks), ranks hand each other the callers' tensors
// instead of staging them through the data segment: a peer reads (or
// writes) them directly, as ccl/cpu's direct path does.

// localWorld is what the ranks of one executor in this process share.
type localWorld struct {
	joined, closed int // guarded by localMu
	pubs           []published
	// hb orders the callers' tensors in Go's memory model (and for the
	// race detector): ranks add before they arrive at a barrier or signal
	// and load after a barrier or a wait. The executor's own atomics live
	// in shared mappings, outside what Go's memory model speaks about.
	hb atomic.Int64
}

// published is one rank's tensors for the calls of each parity (nil: the
// buffer is in the data segment). The owner writes them before the start
// barrier of a call; peers read them after it. A rank rewrites a parity
// only after the next call's start barrier, when every peer is done with
// the call that used it.
type published struct {
	in, out [2][]byte
	_       [64]byte
}

var (
	localMu     sync.Mutex
	localWorlds = map[string]*localWorld{}
)

// register adds x to the world of its id (before the join barrier).
func (x *Executor) register() *localWorld {
	localMu.Lock()
	defer localMu.Unlock()
	key := string(x.id)
	lw := localWorlds[key]
	if lw == nil {
		lw = &localWorld{pubs: make([]published, x.n)}
		localWorlds[key] = lw
	}
	lw.joined++
	return lw
}

// local reports, after the join barrier (every rank registered before it),
// whether all ranks are in this process: every rank reaches the same
// answer.
func (lw *localWorld) local(n int) bool {
	localMu.Lock()
	defer localMu.Unlock()
	return lw.joined == n
}

func (x *Executor) leave(lw *localWorld) {
	localMu.Lock()
	defer localMu.Unlock()
	lw.closed++
	if lw.closed == lw.joined && localWorlds[string(x.id)] == lw {
		delete(localWorlds, string(x.id))
	}
}

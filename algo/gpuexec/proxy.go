package gpuexec

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Port channels: the kernel hands copies and signals to a host proxy
// through a FIFO in mapped host memory (runtime.cuh fifo_push):
//
//	entry (8 u64): [0] seq<<8 | kind, [1] src, [2] dst, [3] bytes, [4] signal address
//
// A thread reserves a sequence number (1, 2, ...) with an atomic add on a
// device word, waits until the entry's slot is free (seq <= tail + size),
// writes the fields, a system fence, then the header. The proxy consumes
// entries strictly in sequence order: it waits for the header of entry
// tail+1, copies the fields out, publishes tail = seq (the slot is free)
// and runs it: a put queues a copy-engine copy, a signal queues a store
// of the channel's next counter value behind every copy queued before it,
// a flush waits for everything queued and then publishes done = seq, which
// the kernel polls.

// Entry kinds (runtime.cuh FIFO_*).
const (
	KindPut    = 1
	KindSignal = 2
	KindFlush  = 3
)

const entryWords = 8

// FIFO is the proxy queue of one rank: Size entries and the tail and done
// words, all in host memory that the device can read and write (mapped
// pinned memory on CUDA; plain memory in tests).
type FIFO struct {
	entries []uint64
	tail    *uint64
	done    *uint64
	// head is the device word the pushers reserve sequence numbers from;
	// only the Go-side pusher of the tests uses this field.
	head atomic.Uint64
}

// FIFOBytes is the host memory a FIFO of size entries needs.
func FIFOBytes(size int) int { return 64 + size*entryWords*8 }

// NewFIFO lays a FIFO of size entries over mem (at least FIFOBytes(size)
// bytes, 8-byte aligned, zeroed).
func NewFIFO(mem unsafe.Pointer, size int) *FIFO {
	words := unsafe.Slice((*uint64)(mem), FIFOBytes(size)/8)
	return &FIFO{tail: &words[0], done: &words[1], entries: words[8:]}
}

// Size is the number of entries.
func (f *FIFO) Size() int { return len(f.entries) / entryWords }

// Entry is one decoded FIFO entry.
type Entry struct {
	Seq      uint64
	Kind     int
	Src, Dst uint64
	Bytes    uint64
	Signal   uint64 // the counter a signal increments
}

// push is the device's fifo_push, in Go (tests drive the proxy with it).
// It blocks while the FIFO is full and returns the sequence number.
func (f *FIFO) push(e Entry) uint64 {
	seq := f.head.Add(1)
	for seq > atomic.LoadUint64(f.tail)+uint64(f.Size()) {
		runtime.Gosched()
	}
	w := f.entries[(seq-1)%uint64(f.Size())*entryWords:]
	atomic.StoreUint64(&w[1], e.Src)
	atomic.StoreUint64(&w[2], e.Dst)
	atomic.StoreUint64(&w[3], e.Bytes)
	atomic.StoreUint64(&w[4], e.Signal)
	atomic.StoreUint64(&w[0], seq<<8|uint64(e.Kind))
	return seq
}

// Done is the last flush entry the proxy completed.
func (f *FIFO) Done() uint64 { return atomic.LoadUint64(f.done) }

// Engine moves data for the proxy: on CUDA the copy engine on a stream
// of the proxy's own.
type Engine interface {
	// Copy queues a copy of n bytes from src to dst (device addresses).
	Copy(dst, src uint64, n uint64) error
	// Signal queues a store of v (8 bytes) at dst, after every copy
	// queued before it.
	Signal(dst, v uint64) error
	// Flush waits until everything queued has completed.
	Flush() error
}

// ErrProxy wraps a failure of the proxy's engine; the kernel's waits on
// the lost work end by their timeout.
var ErrProxy = errors.New("gpuexec: port-channel proxy failed")

// Proxy serves one rank's FIFO: a goroutine on a locked OS thread (CUDA
// contexts are per thread) that polls the FIFO and drives the Engine.
// Close stops it and waits for it.
type Proxy struct {
	f        *FIFO
	e        Engine
	counters map[uint64]uint64 // signal counter values by address: this proxy is their only writer
	stop     chan struct{}
	exited   chan struct{}
	mu       sync.Mutex
	err      error
	served   atomic.Uint64
}

// StartProxy starts serving f with e. setup runs first on the proxy's
// locked OS thread (make the CUDA context current there); if it fails the
// proxy ends and Err reports it.
func StartProxy(f *FIFO, e Engine, setup func() error) *Proxy {
	p := &Proxy{f: f, e: e, counters: map[uint64]uint64{}, stop: make(chan struct{}), exited: make(chan struct{})}
	go p.loop(setup)
	return p
}

func (p *Proxy) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = fmt.Errorf("%w: %v", ErrProxy, err)
	}
	p.mu.Unlock()
}

// Err is the proxy's first failure, if any.
func (p *Proxy) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Served counts the entries the proxy consumed.
func (p *Proxy) Served() uint64 { return p.served.Load() }

func (p *Proxy) loop(setup func() error) {
	defer close(p.exited)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if setup != nil {
		if err := setup(); err != nil {
			p.fail(err)
			return
		}
	}
	size := uint64(p.f.Size())
	idle := 0
	for {
		seq := atomic.LoadUint64(p.f.tail) + 1
		w := p.f.entries[(seq-1)%size*entryWords:]
		h := atomic.LoadUint64(&w[0])
		if h>>8 != seq {
			// Nothing new: spin briefly, then yield, then sleep (a few
			// microseconds of latency once idle, no core burnt).
			idle++
			switch {
			case idle < 256:
			case idle < 1024:
				runtime.Gosched()
			default:
				select {
				case <-p.stop:
					return
				case <-time.After(20 * time.Microsecond):
				}
			}
			if idle&63 == 0 {
				select {
				case <-p.stop:
					return
				default:
				}
			}
			continue
		}
		idle = 0
		e := Entry{Seq: seq, Kind: int(h & 0xff), Src: atomic.LoadUint64(&w[1]), Dst: atomic.LoadUint64(&w[2]),
			Bytes: atomic.LoadUint64(&w[3]), Signal: atomic.LoadUint64(&w[4])}
		atomic.StoreUint64(p.f.tail, seq) // the slot is free again
		p.served.Add(1)
		if p.Err() != nil {
			continue // keep draining so pushers never block; flushes never complete
		}
		if err := p.run(e); err != nil {
			p.fail(fmt.Errorf("entry %d (kind %d): %v", e.Seq, e.Kind, err))
		}
	}
}

func (p *Proxy) run(e Entry) error {
	switch e.Kind {
	case KindPut:
		return p.e.Copy(e.Dst, e.Src, e.Bytes)
	case KindSignal:
		p.counters[e.Signal]++
		return p.e.Signal(e.Signal, p.counters[e.Signal])
	case KindFlush:
		if err := p.e.Flush(); err != nil {
			return err
		}
		atomic.StoreUint64(p.f.done, e.Seq)
		return nil
	}
	return fmt.Errorf("unknown entry kind %d", e.Kind)
}

// Close stops the proxy and waits for its goroutine.
func (p *Proxy) Close() error {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.exited
	return p.Err()
}

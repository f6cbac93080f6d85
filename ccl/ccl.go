package ccl

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// DefaultTimeout bounds how long a collective waits for the other ranks.
const DefaultTimeout = 60 * time.Second

// Sentinel errors.
var (
	// ErrBadArgs: this rank's arguments are invalid (sizes, dtype, aliasing).
	ErrBadArgs = errors.New("ccl: bad arguments")
	// ErrMismatch: ranks called the collective with different arguments.
	ErrMismatch = errors.New("ccl: ranks disagree")
	// ErrTimeout: some ranks did not arrive in time (see TimeoutError).
	ErrTimeout = errors.New("ccl: timed out")
	// ErrFailed: the communicator failed earlier (a timeout, a peer that
	// died) and can no longer be used; create a new one.
	ErrFailed = errors.New("ccl: communicator failed")
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("ccl: communicator closed")
	// ErrUnknownBackend: no backend of that name is registered.
	ErrUnknownBackend = errors.New("ccl: unknown backend")
)

// Kind names a collective; the numbers are shared by all ranks of a
// communicator (they travel in shared memory), so never renumber them.
type Kind uint8

const (
	KindAllReduce     Kind = 1
	KindAllGather     Kind = 2
	KindReduceScatter Kind = 3
	KindBroadcast     Kind = 4
	KindScatter       Kind = 5
	KindGather        Kind = 6
	KindBarrier       Kind = 7
	KindSend          Kind = 8
	KindRecv          Kind = 9
)

// kindNames is an array, not a map: a worker names every collective it
// records (worker/trace.go), twice per call, and a map lookup (hashing
// included) was a measurable part of a small allreduce.
var kindNames = [...]string{
	KindAllReduce: "allreduce", KindAllGather: "allgather", KindReduceScatter: "reduce_scatter",
	KindBroadcast: "broadcast", KindScatter: "scatter", KindGather: "gather", KindBarrier: "barrier",
	KindSend: "send", KindRecv: "recv",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("collective(%d)", uint8(k))
}

// Comm is one rank's handle on a communicator. A Comm is used by one
// goroutine at a time.
type Comm interface {
	Rank() int
	Size() int
	AllReduce(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error
	AllGather(ctx context.Context, send, recv *tensor.Tensor) error
	ReduceScatter(ctx context.Context, send, recv *tensor.Tensor, op reduce.Op) error
	// Broadcast copies root's send into every rank's recv; send is only
	// read on root (others may pass nil).
	Broadcast(ctx context.Context, send, recv *tensor.Tensor, root int) error
	// Scatter splits root's send into Size() equal parts; rank r gets part
	// r in recv. send is only read on root.
	Scatter(ctx context.Context, send, recv *tensor.Tensor, root int) error
	// Gather concatenates every rank's send into root's recv (rank order);
	// recv is only written on root.
	Gather(ctx context.Context, send, recv *tensor.Tensor, root int) error
	// Send and Recv move a tensor between two ranks; the receiver's
	// tensor must have the sender's dtype and byte size.
	Send(ctx context.Context, t *tensor.Tensor, peer int) error
	Recv(ctx context.Context, t *tensor.Tensor, peer int) error
	Barrier(ctx context.Context) error
	// Close releases the communicator (no collective may be in flight).
	Close() error
}

// Config describes one rank joining a communicator.
type Config struct {
	// ID is the communicator's identity, made by Backend.NewID on one
	// process (the controller) and given to every rank.
	ID   []byte
	Rank int
	Size int
	// Device is the rank's device (cpu for the cpu backend).
	Device tensor.Device
	// Timeout bounds every wait for other ranks; 0 means DefaultTimeout.
	Timeout time.Duration
	// Exec runs fn on the thread that owns the rank's GPU, passing the
	// device's stream (GPU backends need it; nil for host-only ranks).
	Exec func(fn func(stream uintptr) error) error
	// Control, when set, is a host communicator over the same ranks that
	// a GPU backend may use for its cross-rank argument checks (a
	// host-side exchange costs about a microsecond; one through the GPU
	// costs a collective plus a stream synchronization). The caller owns
	// it and closes it after the Comm.
	Control Comm
}

// Splitter is implemented by communicators that can make a
// sub-communicator natively (NCCL's ncclCommSplit). Every rank of the
// parent calls Split; ranks with the same color form one communicator,
// ordered by key. control is the host communicator of the new group (may
// be nil).
type Splitter interface {
	Split(ctx context.Context, color, key int, control Comm) (Comm, error)
}

// Aborter is implemented by communicators whose work can hang on a device
// after a peer fails. Abort may be called from any goroutine, also while
// another call is blocked; afterwards every call fails with ErrFailed.
type Aborter interface {
	Abort(reason error) error
}

// Validate checks rank and size.
func (c Config) Validate() error {
	switch {
	case len(c.ID) == 0:
		return fmt.Errorf("%w: empty communicator id", ErrBadArgs)
	case c.Size < 1:
		return fmt.Errorf("%w: size %d < 1", ErrBadArgs, c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("%w: rank %d out of range [0, %d)", ErrBadArgs, c.Rank, c.Size)
	case c.Timeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrBadArgs)
	}
	return nil
}

// TimeoutOrDefault returns c.Timeout, or DefaultTimeout when unset.
func (c Config) TimeoutOrDefault() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// Backend creates communicators.
type Backend interface {
	Name() string
	// NewID makes a fresh communicator identity (on the controller).
	NewID() ([]byte, error)
	// Join blocks until every rank of cfg has joined, then returns this
	// rank's Comm.
	Join(ctx context.Context, cfg Config) (Comm, error)
}

// SubID derives the identity of a sub-communicator (for example worker
// group g) from a parent identity, the same way on every rank.
func SubID(id []byte, tag string) []byte {
	return append(append(append([]byte(nil), id...), '/'), tag...)
}

var (
	mu       sync.RWMutex
	backends = map[string]Backend{}
)

// Register makes a backend available by name; a duplicate is an error.
func Register(b Backend) error {
	mu.Lock()
	defer mu.Unlock()
	if _, ok := backends[b.Name()]; ok {
		return fmt.Errorf("ccl: backend %q registered twice", b.Name())
	}
	backends[b.Name()] = b
	return nil
}

// Lookup returns the named backend.
func Lookup(name string) (Backend, error) {
	mu.RLock()
	defer mu.RUnlock()
	b, ok := backends[name]
	if !ok {
		var names []string
		for n := range backends {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("%w %q (have: %s)", ErrUnknownBackend, name, strings.Join(names, ", "))
	}
	return b, nil
}

// Backends lists the registered backend names, sorted.
func Backends() []string {
	mu.RLock()
	defer mu.RUnlock()
	var names []string
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TimeoutError says which ranks never arrived at a collective.
type TimeoutError struct {
	Kind    Kind
	Seq     uint64 // the collective's sequence number on this communicator
	Rank    int    // the rank that gave up
	Missing []int  // ranks that had not arrived
	After   time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("ccl: rank %d: %s #%d: ranks %v never arrived within %v", e.Rank, e.Kind, e.Seq, e.Missing, e.After)
}

func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout || target == ErrFailed }

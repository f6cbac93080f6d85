package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/wire"
)

func TestWaitPolicyFor(t *testing.T) {
	busy := waitPolicy{busy: true, minSpin: minBusySpin, maxSpin: maxBusySpin}
	yield := waitPolicy{workerYields: 8, controllerYields: 64}
	for _, tc := range []struct {
		name           string
		workers, procs int
		mode           string
		want           waitPolicy
		bad            bool
	}{
		{"one worker, two Ps", 1, 2, "", busy, false},
		{"two workers, two Ps: controller has no P", 2, 2, "", yield, false},
		{"8 workers, 2 Ps", 8, 2, "auto", yield, false},
		{"8 workers, 16 Ps", 8, 16, "", busy, false},
		{"15 workers, 16 Ps", 15, 16, "", busy, false},
		{"16 workers, 16 Ps", 16, 16, "", yield, false},
		{"200 workers, 192 Ps", 200, 192, "", yield, false},
		{"forced busy when oversubscribed", 8, 2, "busy", busy, false},
		{"forced yield with spare Ps", 1, 64, "yield", yield, false},
		{"park", 4, 64, "park", waitPolicy{}, false},
		{"unknown mode", 4, 64, "spin", waitPolicy{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := waitPolicyFor(tc.workers, tc.procs, tc.mode)
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want error: %v", err, tc.bad)
			}
			if got != tc.want {
				t.Fatalf("policy = %+v (%v), want %+v (%v)", got, got, tc.want, tc.want)
			}
		})
	}
}

func TestNextBudget(t *testing.T) {
	p := waitPolicy{busy: true, minSpin: 2 * time.Microsecond, maxSpin: 50 * time.Microsecond}
	us := func(n float64) time.Duration { return time.Duration(n * float64(time.Microsecond)) }
	for _, tc := range []struct {
		name           string
		budget, waited time.Duration
		want           time.Duration
	}{
		{"quick poll keeps a large budget", us(50), us(0.5), us(50)},
		{"quick poll keeps the minimum", us(2), us(0.5), us(2)},
		{"a slow round that polling could cover raises the budget", us(2), us(10), us(20)},
		{"raised at most to the maximum", us(2), us(40), us(50)},
		{"a wait of exactly the maximum still counts as coverable", us(4), us(50), us(50)},
		{"a long wait halves", us(50), us(51), us(25)},
		{"halving stops at the minimum", us(3), us(1000), us(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextBudget(p, tc.budget, tc.waited); got != tc.want {
				t.Fatalf("nextBudget(%v, %v) = %v, want %v", tc.budget, tc.waited, got, tc.want)
			}
		})
	}
	// The trap of the first version: rounds of 60 us with every budget at
	// its minimum. One round that a budget would have covered gets out.
	b := p.minSpin
	for range 3 {
		b = nextBudget(p, b, us(60))
	}
	if b != p.minSpin {
		t.Fatalf("budget after long waits = %v, want %v", b, p.minSpin)
	}
	if b = nextBudget(p, b, us(30)); b != p.maxSpin {
		t.Fatalf("budget after a 30 us wait = %v, want %v", b, p.maxSpin)
	}
}

func policies(t *testing.T) map[string]waitPolicy {
	out := map[string]waitPolicy{}
	for _, m := range []string{"busy", "yield", "park"} {
		p, err := waitPolicyFor(1, 1, m)
		if err != nil {
			t.Fatal(err)
		}
		out[m] = p
	}
	return out
}

// Every consumer reads every entry in order, across block boundaries;
// an entry addressed to one consumer shows its value to that consumer
// only, and done clears it.
func TestLogOrderAndClear(t *testing.T) {
	for name, p := range policies(t) {
		t.Run(name, func(t *testing.T) {
			const consumers, n = 3, 3*logBlockLen + 5
			l := newLog[int](consumers, p)
			vals := make([]int, n)
			// Entry i%4 == 1 is addressed to consumer i%consumers.
			targeted := func(i int) bool { return i%4 == 1 }
			for i := range vals {
				vals[i] = i
				if targeted(i) {
					l.putTo(vals[i], int32(i%consumers))
				} else {
					l.put(vals[i])
				}
			}
			for ci, c := range l.cons {
				for i := range n {
					if err := l.wait(c, p, 1, nil, nil); err != nil {
						t.Fatal(err)
					}
					v, e := l.pop(c)
					mine := !targeted(i) || i%consumers == ci
					switch {
					case !mine && v != nil:
						t.Fatalf("consumer %d entry %d: got %v, want nothing (addressed to %d)", ci, i, *v, i%consumers)
					case mine && (v == nil || *v != i):
						t.Fatalf("consumer %d entry %d: got %v, want %d", ci, i, v, i)
					}
					if targeted(i) && mine {
						done(e)
						if e.v != 0 {
							t.Fatalf("consumer %d entry %d: not cleared by done", ci, i)
						}
					}
				}
				if l.ready(c) {
					t.Fatalf("consumer %d: ready after reading everything", ci)
				}
			}
		})
	}
}

// Acknowledgements and entries of one producer arrive in the order sent:
// an entry published before an acknowledgement is taken first, a newer
// acknowledgement replaces an older one not yet taken, and a consumer
// parked in wait is woken by an acknowledgement under every policy.
func TestLogAcknowledgements(t *testing.T) {
	for name, p := range policies(t) {
		t.Run(name, func(t *testing.T) {
			l := newLog[int](1, p)
			c := l.cons[0]
			if v, e, a := l.take(c); v != nil || e != nil || a != 0 {
				t.Fatalf("take on an empty log: %v %v %d", v, e, a)
			}
			one, two := 1, 2
			l.put(one)
			l.ackTo(c, 5)
			l.put(two)
			l.ackTo(c, 6)
			l.ackTo(c, 7)
			type msg struct {
				v   int
				ack uint64
			}
			var got []msg
			for l.ready(c) {
				v, e, a := l.take(c)
				switch {
				case e != nil:
					got = append(got, msg{v: *v})
				case a != 0:
					got = append(got, msg{ack: a})
				default:
					t.Fatal("ready, but take returned nothing")
				}
			}
			want := []msg{{v: 1}, {v: 2}, {ack: 7}}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("took %v, want %v", got, want)
			}
			// A parked consumer is woken by an acknowledgement.
			errc := make(chan error, 1)
			go func() { errc <- l.wait(c, p, 1, context.Background(), nil) }()
			time.Sleep(time.Millisecond) // let it park (the test holds either way)
			l.ackTo(c, 8)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if _, _, a := l.take(c); a != 8 {
				t.Fatalf("took ack %d, want 8", a)
			}
		})
	}
}

// Consumers parked in wait are woken by put, under every policy; a
// producer racing with consumers that park and wake never loses an entry.
func TestLogWakesParkedConsumers(t *testing.T) {
	for name, p := range policies(t) {
		t.Run(name, func(t *testing.T) {
			const consumers, n = 4, 2000
			l := newLog[int](consumers, p)
			vals := make([]int, n)
			var wg sync.WaitGroup
			errs := make(chan error, consumers)
			for ci := range consumers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := l.cons[ci]
					for i := range n {
						if err := l.wait(c, p, 2, nil, nil); err != nil {
							errs <- err
							return
						}
						v, _ := l.pop(c)
						if v == nil || *v != i {
							errs <- errors.New("out of order or lost entry")
							return
						}
					}
				}()
			}
			for i := range n {
				vals[i] = i
				l.put(vals[i])
				if i%97 == 0 {
					time.Sleep(50 * time.Microsecond) // let consumers park
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}

func TestLogWaitEnds(t *testing.T) {
	for name, p := range policies(t) {
		t.Run(name, func(t *testing.T) {
			l := newLog[int](1, p)
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(time.Millisecond); cancel() }()
			if err := l.wait(l.cons[0], p, 1, ctx, nil); !errors.Is(err, context.Canceled) {
				t.Fatalf("wait with a cancelled ctx: %v", err)
			}
			done := make(chan struct{})
			// Whoever closes done wakes the log (as threaded.stop does):
			// futex-parked consumers do not select on done.
			go func() { time.Sleep(time.Millisecond); close(done); l.wakeAll() }()
			if err := l.wait(l.cons[0], p, 1, context.Background(), done); !errors.Is(err, ErrShutdown) {
				t.Fatalf("wait after done: %v", err)
			}
			// An entry published before the end is still delivered.
			v := 7
			l.put(v)
			if err := l.wait(l.cons[0], p, 1, ctx, done); err != nil {
				t.Fatalf("wait with an entry ready: %v", err)
			}
		})
	}
}

// A threaded session works under every policy, also with more workers
// than Ps, mixing broadcasts and commands addressed to one worker; a bad
// policy name is an error, not a silent default.
func TestThreadedUnderEveryPolicy(t *testing.T) {
	for _, mode := range []string{"auto", "busy", "yield", "park"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv(EnvSessionWait, mode)
			s, err := NewThreaded(Options{NumWorkers: 5})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown()
			ctx := context.Background()
			f, err := s.GetGlobalFunc(ctx, "chorus.noop")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 300 {
				if err := s.CallPackedDiscard(f); err != nil {
					t.Fatal(err)
				}
				if i%3 == 0 {
					if err := s.SyncWorker(ctx, i%5); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := s.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Shutdown(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Setenv(EnvSessionWait, "fast")
	if s, err := NewThreaded(Options{NumWorkers: 2}); err == nil {
		s.Shutdown()
		t.Fatal("NewThreaded accepted CHORUS_SESSION_WAIT=fast")
	}
	// The option wins over the environment; a bad option is refused too.
	s, err := NewThreaded(Options{NumWorkers: 2, Wait: "park"})
	if err != nil {
		t.Fatalf("Options.Wait park under CHORUS_SESSION_WAIT=fast: %v", err)
	}
	s.Shutdown()
	t.Setenv(EnvSessionWait, "")
	if s, err := NewThreaded(Options{NumWorkers: 2, Wait: "fast"}); err == nil {
		s.Shutdown()
		t.Fatal("NewThreaded accepted Options.Wait fast")
	}
}

// collect takes replies as they arrive (worker 0 answers last here) and
// still reports the failures in worker order.
func TestCollectOutOfOrderKeepsWorkerOrder(t *testing.T) {
	const n = 4
	reg := registry.New()
	if err := reg.RegisterTyped("t.fail_late0", func(env registry.Env) error {
		if env.WorkerID() == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("failed on %d", env.WorkerID())
	}); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"busy", "park"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv(EnvSessionWait, mode)
			s, err := NewThreaded(Options{NumWorkers: n, Registry: reg})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown()
			ctx := context.Background()
			f, err := s.GetGlobalFunc(ctx, "t.fail_late0")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CallPackedDiscard(f); err != nil {
				t.Fatal(err)
			}
			err = s.Sync(ctx)
			var order []int32
			for _, e := range flatten(err) {
				var we *wire.WorkerError
				if errors.As(e, &we) {
					order = append(order, we.Worker)
				}
			}
			if fmt.Sprint(order) != "[0 1 2 3]" {
				t.Fatalf("Sync failures from workers %v, want [0 1 2 3] (err: %v)", order, err)
			}
		})
	}
}

// flatten lists the leaves of a tree of joined errors.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// The command log's entries are two cache lines, and the first holds the
// sequence number and every field a worker reads for every command (the
// length of Args included), so that seeing a command costs one line.
func TestCmdSlotLayout(t *testing.T) {
	var e logEntry[cmdSlot]
	if got := unsafe.Sizeof(e); got != 128 {
		t.Fatalf("command log entry: %d bytes, want 128", got)
	}
	base := uintptr(unsafe.Pointer(&e))
	c := &e.v.Command
	for name, end := range map[string]uintptr{
		"seq":       uintptr(unsafe.Pointer(&e.seq)) + unsafe.Sizeof(e.seq),
		"to":        uintptr(unsafe.Pointer(&e.to)) + unsafe.Sizeof(e.to),
		"Action":    uintptr(unsafe.Pointer(&c.Action)) + unsafe.Sizeof(c.Action),
		"Worker":    uintptr(unsafe.Pointer(&c.Worker)) + unsafe.Sizeof(c.Worker),
		"Seq":       uintptr(unsafe.Pointer(&c.Seq)) + unsafe.Sizeof(c.Seq),
		"Reg":       uintptr(unsafe.Pointer(&c.Reg)) + unsafe.Sizeof(c.Reg),
		"Func":      uintptr(unsafe.Pointer(&c.Func)) + unsafe.Sizeof(c.Func),
		"len(Args)": uintptr(unsafe.Pointer(&c.Args)) + 2*unsafe.Sizeof(uintptr(0)), // pointer, length
	} {
		if end-base > 64 {
			t.Errorf("%s ends at byte %d of the entry, past its first line", name, end-base)
		}
	}
	// Blocks are large objects, page aligned (logBlockLen), so entries do
	// not straddle lines.
	for range 8 {
		b := new(logBlock[cmdSlot])
		if a := uintptr(unsafe.Pointer(b)) % 128; a != 0 {
			t.Fatalf("block at %p: %d bytes past a 128-byte boundary", b, a)
		}
	}
}

// TestLogUnannouncedEntry: an entry whose producer did not see the
// parked consumer (producers do not fence between publishing and
// looking at sleepers: played here by hiding the sleeper while putting)
// is found when the consumer's first sleep ends, which lasts firstSleep,
// not futexSafety.
func TestLogUnannouncedEntry(t *testing.T) {
	if !haveFutex {
		t.Skip("consumers park on channels here")
	}
	p := waitPolicy{busy: true, minSpin: time.Microsecond, maxSpin: time.Microsecond}
	l := newLog[int](1, p)
	c := l.cons[0]
	c.budget = 0 // park at once
	slept := make(chan time.Duration, 16)
	defer func(f func(*atomic.Uint32, uint32, time.Duration)) { parkSleep = f }(parkSleep)
	parkSleep = func(w *atomic.Uint32, val uint32, d time.Duration) {
		select {
		case slept <- d:
		default:
		}
		futexWait(w, val, d)
	}
	got := make(chan error, 1)
	go func() {
		err := l.wait(c, p, 0, nil, nil)
		if err == nil {
			if v, _ := l.pop(c); v == nil || *v != 7 {
				err = fmt.Errorf("got %v, want 7", v)
			}
		}
		got <- err
	}()
	first := <-slept // parked, counted among the sleepers
	l.sleepers.Add(-1)
	v := 7
	l.put(v) // sees no sleeper: no wake-up
	l.sleepers.Add(1)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unannounced entry was never found")
	}
	if first != firstSleep {
		t.Fatalf("first sleep after counting itself: %v, want %v", first, firstSleep)
	}
}

package session

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// BenchmarkLogRound is the skeleton of a threaded session round (a
// broadcast call, a broadcast sync, a reply from every worker) without
// the session around it: what the logs alone cost. "acks": the sync is
// answered by a per-worker word instead of a reply log entry.
func BenchmarkLogRound(b *testing.B) {
	for _, variant := range []string{"mlog", "acks"} {
		for _, n := range []int{1, 2, 4, 8} {
			b.Run(variant+"/"+string(rune('0'+n)), func(b *testing.B) {
				pol, err := waitPolicyFor(n, runtime.GOMAXPROCS(0), "")
				if err != nil {
					b.Fatal(err)
				}
				cmds := newLog[wire.Command](n, pol)
				replies := make([]*mlog[wire.Reply], n)
				type ack struct {
					seq atomic.Uint64
					_   [cacheLine - 8]byte
				}
				acks := make([]ack, n)
				for i := range replies {
					replies[i] = newLog[wire.Reply](1, pol)
				}
				stopc := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cur := cmds.cons[i]
						for {
							if err := cmds.wait(cur, pol, pol.workerYields, nil, stopc); err != nil {
								return
							}
							for cmds.ready(cur) {
								c, _ := cmds.pop(cur)
								if c.Action == wire.ActSyncWorker {
									if variant == "acks" {
										acks[i].seq.Store(c.Seq)
									} else {
										replies[i].put(wire.Reply{Action: wire.ActReply, Seq: c.Seq, Worker: int32(i)})
									}
								}
								if c.Action == wire.ActShutdown {
									return
								}
							}
						}
					}()
				}
				var seq uint64
				for b.Loop() {
					seq++
					cmds.put(wire.Command{Action: wire.ActCallPacked, Worker: wire.AllWorkers, Seq: seq})
					seq++
					cmds.put(wire.Command{Action: wire.ActSyncWorker, Worker: wire.AllWorkers, Seq: seq})
					if variant == "acks" {
						for i := range acks {
							for acks[i].seq.Load() < seq {
								shmem.Pause(shmem.PollPauses())
							}
						}
						continue
					}
					for i := range replies {
						l := replies[i]
						if err := l.wait(l.cons[0], pol, pol.controllerYields, nil, stopc); err != nil {
							b.Fatal(err)
						}
						_, e := l.pop(l.cons[0])
						done(e)
					}
				}
				cmds.put(wire.Command{Action: wire.ActShutdown, Worker: wire.AllWorkers})
				close(stopc)
				cmds.wakeAll()
				wg.Wait()
			})
		}
	}
}

// BenchmarkLeanRound: the floor of a round. Entries carry their own
// sequence number (a worker polls the entry it will read next, not a
// separate counter), nobody releases entries, and workers answer the sync
// through per-worker words that the controller loads back to back.
// "ptr": the command is a pointer in the entry (as in mlog), "inline": its
// action is in the entry's line (what inlining commands would save: one
// dependent cache-line transfer per command and worker).
func BenchmarkLeanRound(b *testing.B) {
	for _, inline := range []bool{false, true} {
		for _, n := range []int{1, 2, 4, 8, 12} {
			name := "ptr/"
			if inline {
				name = "inline/"
			}
			b.Run(name+strconv.Itoa(n), func(b *testing.B) { leanRound(b, n, inline) })
		}
	}
}

func leanRound(b *testing.B, n int, inline bool) {
	type entry struct {
		seq atomic.Uint64
		act atomic.Uint32
		v   atomic.Pointer[wire.Command]
		_   [64 - 24]byte
	}
	type ack struct {
		seq atomic.Uint64
		_   [cacheLine - 8]byte
	}
	const ringLen = 1 << 12
	ring := make([]entry, ringLen)
	acks := make([]ack, n)
	pc := shmem.PollPauses()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for want := uint64(1); ; want++ {
				e := &ring[want%ringLen]
				for e.seq.Load() != want {
					if stop.Load() {
						return
					}
					shmem.Pause(pc)
				}
				var act wire.Action
				if inline {
					act = wire.Action(e.act.Load())
				} else {
					act = e.v.Load().Action
				}
				if act == wire.ActSyncWorker {
					acks[i].seq.Store(want)
				}
			}
		}()
	}
	var seq uint64
	put := func(c *wire.Command) {
		seq++
		c.Seq = seq
		e := &ring[seq%ringLen]
		if inline {
			e.act.Store(uint32(c.Action))
		} else {
			e.v.Store(c)
		}
		e.seq.Store(seq)
	}
	for b.Loop() {
		put(&wire.Command{Action: wire.ActCallPacked, Worker: wire.AllWorkers})
		put(&wire.Command{Action: wire.ActSyncWorker, Worker: wire.AllWorkers})
		for {
			low := seq
			for i := range acks {
				low = min(low, acks[i].seq.Load())
			}
			if low == seq {
				break
			}
			shmem.Pause(pc)
		}
	}
	stop.Store(true)
	wg.Wait()
}

// BenchmarkPingPong: one cache line each way between two goroutines, the
// host's cross-core round trip.
func BenchmarkPingPong(b *testing.B) {
	type word struct {
		v atomic.Uint64
		_ [cacheLine - 8]byte
	}
	var ping, pong word
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for want := uint64(1); ; want++ {
			for ping.v.Load() < want {
			}
			if ping.v.Load() == ^uint64(0) {
				return
			}
			pong.v.Store(want)
		}
	}()
	var i uint64
	for b.Loop() {
		i++
		ping.v.Store(i)
		for pong.v.Load() < i {
		}
	}
	ping.v.Store(^uint64(0))
	wg.Wait()
}

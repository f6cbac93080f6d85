package cluster_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/cluster"
	"github.com/chorus-rt/chorus/cluster/ctrl"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/runtime/session"
)

// pendingSync starts a long call on every worker and a Sync waiting for
// it; the Sync's error arrives on the channel.
func pendingSync(t *testing.T, s *session.Session) <-chan error {
	t.Helper()
	ctx := context.Background()
	f, err := s.GetGlobalFunc(ctx, "test.sleep_ms")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CallPackedDiscard(f, 60_000); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		done <- s.Sync(ctx)
	}()
	return done
}

// TestHostFaults: a host whose agent is killed or stopped is reported
// with its node and workers, and nothing is left running anywhere.
func TestHostFaults(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			leaktest.Check(t)
			s, agents, lb := startCluster(t, tokenCreds(t), []int{2, 2}, nil)
			ps := pids(t, s)
			done := pendingSync(t, s)
			if err := agents[1].cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := <-done
			var he *cluster.HostLostError
			if !errors.As(err, &he) || he.Node != 1 || he.First != 2 || he.Last != 3 || !errors.Is(err, session.ErrWorkerLost) {
				t.Fatalf("Sync: %v", err)
			}
			if sig == syscall.SIGSTOP {
				contains(t, err.Error(), "nothing received")
			}
			contains(t, lb.String(), "session failed")
			// Later calls fail the same way at once.
			if _, err := s.GetGlobalFunc(context.Background(), "test.pid"); !errors.Is(err, cluster.ErrHostLost) {
				t.Fatalf("after the loss: %v", err)
			}
			if err := s.Shutdown(); err != nil {
				t.Logf("Shutdown: %v", err)
			}
			// The survivor's agent stops its workers and exits.
			if err := agents[0].wait(t, 10*time.Second); err == nil {
				t.Fatal("the surviving agent exited cleanly after its controller vanished")
			}
			contains(t, agents[0].out.String(), "aborting collectives")
			gone(t, ps[:2], 5*time.Second)
			// The stopped agent's workers go when the agent dies.
			_ = agents[1].cmd.Process.Kill()
			gone(t, ps[2:], 5*time.Second)
		})
	}
}

// TestWorkerKilled: a worker process that dies on a remote host fails
// the session with its id.
func TestWorkerKilled(t *testing.T) {
	leaktest.Check(t)
	s, agents, _ := startCluster(t, tokenCreds(t), []int{1, 2}, nil)
	ps := pids(t, s)
	done := pendingSync(t, s)
	if err := syscall.Kill(ps[2], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var le *session.LostError
	if !errors.As(err, &le) || le.Worker != 2 || le.PID != ps[2] {
		t.Fatalf("Sync: %v", err)
	}
	contains(t, err.Error(), "node 1")
	s.Shutdown()
	for _, a := range agents {
		a.wait(t, 10*time.Second)
	}
	gone(t, ps, 5*time.Second)
}

// TestControllerGone: an agent whose controller vanishes stops its
// workers and exits. The controller is played by the test.
func TestControllerGone(t *testing.T) {
	leaktest.Check(t)
	c := tokenCreds(t)
	c.cfg.Log = func(string) {}
	ln, err := link.Listen("127.0.0.1:0", c.cfg, "control")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := startAgent(t, ln.Addr().String(), 2, -1, c.files)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tc, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn := ctrl.NewConn(tc, 10*time.Second)
	if typ, _, err := conn.Read(); err != nil || typ != ctrl.THello {
		t.Fatal(typ, err)
	}
	host, _, _ := net.SplitHostPort(tc.RemoteAddr().String())
	if err := conn.WriteJSON(ctrl.TAssign, ctrl.Assign{Nodes: 1, Total: 2, Groups: 1, Transport: "shm",
		HeartbeatMs: 100, DeadlineMs: 500, GraceMs: 1000, Addr: host}); err != nil {
		t.Fatal(err)
	}
	typ, p, err := conn.Read()
	if err != nil || typ != ctrl.TReady {
		t.Fatal(typ, err)
	}
	var r ctrl.Ready
	if err := ctrl.Decode(typ, p, &r); err != nil || len(r.PIDs) != 2 {
		t.Fatal(r, err)
	}
	conn.Close()
	err = a.wait(t, 10*time.Second)
	if err == nil {
		t.Fatal("agent exited cleanly")
	}
	contains(t, a.out.String(), "controller gone")
	gone(t, r.PIDs, 5*time.Second)
}

// TestRefusedAgents: agents with a wrong token, or a node rank already
// taken, are refused and logged; the session forms with the right ones.
func TestRefusedAgents(t *testing.T) {
	leaktest.Check(t)
	good, bad := tokenCreds(t), tokenCreds(t)
	lb := &logBuf{}
	l, err := cluster.Listen(cluster.Options{Nodes: 2, Security: good.cfg, Log: lb.log, StartTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	intruder := startAgent(t, l.Addr(), 1, -1, bad.files)
	if err := intruder.wait(t, 10*time.Second); err == nil {
		t.Fatal("an agent with a wrong token exited cleanly")
	}
	contains(t, intruder.out.String(), "not authenticated")
	type res struct {
		s   *session.Session
		err error
	}
	got := make(chan res, 1)
	go func() {
		s, err := l.Accept(context.Background())
		got <- res{s, err}
	}()
	// Two agents ask for node 0: one is refused.
	a0 := startAgent(t, l.Addr(), 1, 0, good.files)
	dup := startAgent(t, l.Addr(), 1, 0, good.files)
	for i := 0; !strings.Contains(lb.String(), "node rank 0 taken"); i++ {
		if i > 1000 {
			t.Fatalf("no refusal of the duplicate node rank:\n%s", lb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	startAgent(t, l.Addr(), 1, 1, good.files)
	r := <-got
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, lb.String())
	}
	defer r.s.Shutdown()
	select {
	case <-a0.exited:
		contains(t, a0.out.String(), "refused us")
	case <-dup.exited:
		contains(t, dup.out.String(), "refused us")
	case <-time.After(10 * time.Second):
		t.Fatal("neither agent for node 0 was refused")
	}
	contains(t, lb.String(), "wrong token proof")
	if r.s.NumWorkers() != 2 {
		t.Fatal(r.s.NumWorkers())
	}
}

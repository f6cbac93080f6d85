package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/cluster"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// TestCollectivesAcrossHosts runs the collective built-ins of a session
// whose workers sit on three hosts, with groups mapped to hosts.
func TestCollectivesAcrossHosts(t *testing.T) {
	leaktest.Check(t)
	s, _, _ := startCluster(t, tokenCreds(t), []int{2, 2, 2}, func(o *cluster.Options) { o.NumGroups = 3 })
	ctx := context.Background()
	if err := s.InitCCL(ctx, "cpu", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	get := func(name string) *session.DRef {
		f, err := s.GetGlobalFunc(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	empty, ar, ag := get("chorus.empty"), get("chorus.allreduce"), get("chorus.allgather")
	// The small path, the leader path and (1.2 MB, from ccl/hier's
	// MultiRingMin up) the multi-ring inside the hosts' split allreduce.
	for _, n := range []int64{3, 100_000, 300_000} {
		buf, err := s.CallPacked(empty, tensor.Shape{n}, tensor.Float32, nil, false, false)
		if err != nil {
			t.Fatal(err)
		}
		// Worker w holds w+1 everywhere.
		for w := range 6 {
			x := tensor.MustNew(tensor.Float32, tensor.Shape{n})
			tensor.Fill(x, float64(w+1))
			if err := s.DebugSetRegister(buf, x, w); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CallPackedDiscard(ar, buf, "sum", false, buf); err != nil {
			t.Fatal(err)
		}
		grp, err := s.CallPacked(empty, tensor.Shape{n}, tensor.Float32, nil, false, false)
		if err != nil {
			t.Fatal(err)
		}
		for w := range 6 {
			x := tensor.MustNew(tensor.Float32, tensor.Shape{n})
			tensor.Fill(x, float64(w+1))
			s.DebugSetRegister(grp, x, w)
		}
		if err := s.CallPackedDiscard(ar, grp, "sum", true, grp); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		for w := range 6 {
			v, err := s.DebugGetFromRemote(ctx, buf, w)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := tensor.ToFloat64(v.(*tensor.Tensor))
			if d[0] != 21 || d[n-1] != 21 {
				t.Fatalf("n=%d worker %d: allreduce gave %v..%v, want 21", n, w, d[0], d[n-1])
			}
			v, _ = s.DebugGetFromRemote(ctx, grp, w)
			d, _ = tensor.ToFloat64(v.(*tensor.Tensor))
			if want := float64(2*(w/2) + 1 + 2*(w/2) + 2); d[0] != want || d[n-1] != want {
				t.Fatalf("n=%d worker %d: group allreduce gave %v, want %v", n, w, d[0], want)
			}
		}
	}
	// allgather of worker ids as int64 tensors.
	one, _ := s.CallPacked(empty, tensor.Shape{1}, tensor.Int64, nil, false, false)
	all, _ := s.CallPacked(empty, tensor.Shape{6}, tensor.Int64, nil, false, false)
	for w := range 6 {
		x := tensor.MustNew(tensor.Int64, tensor.Shape{1})
		tensor.Fill(x, float64(w*10))
		s.DebugSetRegister(one, x, w)
	}
	if err := s.CallPackedDiscard(ag, one, false, all); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := s.DebugGetFromRemote(ctx, all, 5)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := tensor.ToFloat64(v.(*tensor.Tensor)); d[5] != 50 || d[2] != 20 {
		t.Fatalf("allgather on worker 5: %v", d)
	}
	// A mismatch across hosts fails every worker, and the session goes on.
	bad, _ := s.CallPacked(empty, tensor.Shape{4}, tensor.Float32, nil, false, false)
	odd := tensor.MustNew(tensor.Float32, tensor.Shape{5})
	s.DebugSetRegister(bad, odd, 4)
	s.CallPackedDiscard(ar, bad, "sum", false, bad)
	err = s.Sync(ctx)
	if !errors.Is(err, ccl.ErrMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	if err := s.CallPackedDiscard(get("chorus.barrier"), false); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// TestCollectiveAbortOnHostLoss: survivors blocked in a collective for a
// host that died end with an error, and the loss is reported.
func TestCollectiveAbortOnHostLoss(t *testing.T) {
	leaktest.Check(t)
	s, agents, lb := startCluster(t, tokenCreds(t), []int{1, 1, 1}, nil)
	defer func() { t.Log(lb.String()) }()
	ctx := context.Background()
	if err := s.InitCCL(ctx, "cpu", time.Minute); err != nil {
		t.Fatal(err)
	}
	ps := pids(t, s)
	// Worker 2 sleeps while 0 and 1 wait for it in a barrier.
	sleep, _ := s.GetGlobalFunc(ctx, "test.sleep_on")
	barrier, _ := s.GetGlobalFunc(ctx, "chorus.barrier")
	s.CallPackedDiscard(sleep, 2, 60_000)
	s.CallPackedDiscard(barrier, false)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		done <- s.SyncWorker(ctx, 0)
	}()
	time.Sleep(300 * time.Millisecond) // let the barrier start (the outcome does not depend on it)
	agents[2].cmd.Process.Kill()
	// The survivors' barrier fails at once (their link to worker 2
	// broke), and the host's loss is reported (by this call or the next).
	err := <-done
	if !errors.Is(err, cluster.ErrHostLost) && !errors.Is(err, ccl.ErrFailed) {
		t.Fatalf("SyncWorker: %v", err)
	}
	for i := 0; !errors.Is(err, cluster.ErrHostLost); i++ {
		if i == 100 {
			t.Fatalf("the host's loss was not reported: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
		err = s.Sync(ctx)
	}
	s.Shutdown()
	for _, a := range agents[:2] {
		a.wait(t, 10*time.Second)
		// (The workers' own "aborting communicators" line may be cut
		// short by their exit, so only the agent's line is checked.)
		contains(t, a.out.String(), "aborting collectives")
	}
	gone(t, ps, 5*time.Second)
}

// TestGroupsSpanningHosts: groups of two workers on two hosts each; the
// group communicators are cross-host themselves.
func TestGroupsSpanningHosts(t *testing.T) {
	leaktest.Check(t)
	s, _, _ := startCluster(t, tokenCreds(t), []int{1, 1, 1, 1}, func(o *cluster.Options) { o.NumGroups = 2 })
	ctx := context.Background()
	if err := s.InitCCL(ctx, "cpu", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	empty, _ := s.GetGlobalFunc(ctx, "chorus.empty")
	ar, _ := s.GetGlobalFunc(ctx, "chorus.allreduce")
	for _, n := range []int64{10, 50_000} {
		buf, err := s.CallPacked(empty, tensor.Shape{n}, tensor.Int32, nil, false, false)
		if err != nil {
			t.Fatal(err)
		}
		for w := range 4 {
			x := tensor.MustNew(tensor.Int32, tensor.Shape{n})
			tensor.Fill(x, float64(int(1)<<w))
			s.DebugSetRegister(buf, x, w)
		}
		s.CallPackedDiscard(ar, buf, "sum", true, buf)
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		for w := range 4 {
			v, _ := s.DebugGetFromRemote(ctx, buf, w)
			d, _ := tensor.ToFloat64(v.(*tensor.Tensor))
			want := map[int]float64{0: 3, 1: 3, 2: 12, 3: 12}[w]
			if d[0] != want || d[n-1] != want {
				t.Fatalf("n=%d worker %d: %v, want %v", n, w, d[0], want)
			}
		}
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

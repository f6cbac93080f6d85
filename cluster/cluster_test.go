package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/cluster"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/wire"
	"github.com/chorus-rt/chorus/tensor"
)

// TestCommands runs every command across two hosts of two workers each.
func TestCommands(t *testing.T) {
	for _, kind := range []string{"token", "mtls"} {
		t.Run(kind, func(t *testing.T) {
			leaktest.Check(t)
			c := tokenCreds(t)
			if kind == "mtls" {
				c = mtlsCreds(t)
			}
			s, agents, _ := startCluster(t, c, []int{2, 2}, func(o *cluster.Options) { o.NumGroups = 2 })
			ctx := context.Background()
			if s.NumWorkers() != 4 || s.Kind() != "remote" {
				t.Fatalf("%d workers, kind %s", s.NumWorkers(), s.Kind())
			}
			for _, name := range []string{"chorus.worker_id", "chorus.group_id", "chorus.worker_rank"} {
				f, err := s.GetGlobalFunc(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				r, err := s.CallPacked(f)
				if err != nil {
					t.Fatal(err)
				}
				for w := range 4 {
					v, err := s.DebugGetFromRemote(ctx, r, w)
					if err != nil {
						t.Fatal(err)
					}
					want := map[string]int64{"chorus.worker_id": int64(w), "chorus.group_id": int64(w / 2), "chorus.worker_rank": int64(w % 2)}[name]
					if v != want {
						t.Fatalf("%s on worker %d = %v, want %d", name, w, v, want)
					}
				}
			}
			if _, err := s.GetGlobalFunc(ctx, "no.such"); !errors.Is(err, session.ErrUnknownFunction) {
				t.Fatalf("unknown function: %v", err)
			}
			// CopyToWorker0 / CopyFromWorker0 through an allocated tensor.
			empty, _ := s.GetGlobalFunc(ctx, "chorus.empty")
			buf, err := s.CallPacked(empty, tensor.Shape{1000}, tensor.Float32, nil, false, false)
			if err != nil {
				t.Fatal(err)
			}
			host := tensor.MustNew(tensor.Float32, tensor.Shape{1000})
			d, _ := tensor.Data[float32](host)
			for i := range d {
				d[i] = float32(i) * 0.5
			}
			if err := s.CopyToWorker0(host, buf); err != nil {
				t.Fatal(err)
			}
			back := tensor.MustNew(tensor.Float32, tensor.Shape{1000})
			if err := s.CopyFromWorker0(ctx, back, buf); err != nil {
				t.Fatal(err)
			}
			if err := tensor.Equal(host, back); err != nil {
				t.Fatal("CopyFromWorker0 returned other data")
			}
			// DebugSetRegister on a worker of the second host.
			reg, _ := s.NewRegister()
			if err := s.DebugSetRegister(reg, "hello", 3); err != nil {
				t.Fatal(err)
			}
			if v, err := s.DebugGetFromRemote(ctx, reg, 3); err != nil || v != "hello" {
				t.Fatalf("DebugGet = %v, %v", v, err)
			}
			// A failure on worker 3 surfaces at the next Sync, named.
			fail, _ := s.GetGlobalFunc(ctx, "test.fail_on")
			if err := s.CallPackedDiscard(fail, 3); err != nil {
				t.Fatal(err)
			}
			err = s.Sync(ctx)
			var we *wire.WorkerError
			if !errors.As(err, &we) || we.Worker != 3 || !errors.Is(err, session.ErrFuncFailed) {
				t.Fatalf("Sync: %v", err)
			}
			if err := s.SyncWorker(ctx, 2); err != nil {
				t.Fatal(err)
			}
			ps := pids(t, s)
			if err := s.Shutdown(); err != nil {
				t.Fatal(err)
			}
			for _, a := range agents {
				if err := a.wait(t, 10*time.Second); err != nil {
					t.Fatalf("agent: %v\n%s", err, a.out.String())
				}
			}
			gone(t, ps, 5*time.Second)
		})
	}
}

// TestUnevenNodes: agents may run different numbers of workers; ids are
// host-major by node rank.
func TestUnevenNodes(t *testing.T) {
	leaktest.Check(t)
	s, _, _ := startCluster(t, tokenCreds(t), []int{1, 3}, nil)
	ps := pids(t, s)
	if len(ps) != 4 {
		t.Fatal(ps)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

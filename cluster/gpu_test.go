package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/cluster"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

// realGPU says whether this machine has a GPU and a loadable NCCL.
func realGPU() bool {
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		return false
	}
	if n, err := d.DeviceCount(); err != nil || n < 1 {
		return false
	}
	b, err := ccl.Lookup("nccl")
	if err != nil {
		return false
	}
	_, err = b.NewID()
	return err == nil
}

// TestGPUBuiltinsAcrossHosts: the session's built-ins on GPU tensors of
// workers on other hosts. "fake" (every machine, CI included) binds the
// workers to fake GPUs (CHORUS_FAKE_GPU in the agents' environment:
// device memory in host memory behind the device interface); "fake from
// the controller" does so through cluster.Options.Worker, which the
// agents receive in their assignment; "cuda" (where a GPU and NCCL are) binds
// four agents to GPU 0, each its own NCCL host (ncclAgentEnv), and runs
// the collective built-ins through NCCL too, globally and in two groups
// that span hosts.
func TestGPUBuiltinsAcrossHosts(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		gpuBuiltins(t, []int{1, 1, 1}, 0, false, worker.Options{}, func(int) []string { return []string{worker.EnvFakeGPU + "=1"} })
	})
	t.Run("fake from the controller", func(t *testing.T) {
		gpuBuiltins(t, []int{1, 1, 1}, 0, false, worker.Options{FakeGPU: true}, func(int) []string { return nil })
	})
	t.Run("cuda", func(t *testing.T) {
		if !realGPU() {
			gputest.Skipf(t, "no GPU with NCCL here")
		}
		logs := t.TempDir()
		gpuBuiltins(t, []int{1, 1, 1, 1}, 2, true, worker.Options{}, func(i int) []string { return ncclAgentEnv(i, "0", logs) })
		checkNCCLNet(t, logs, 4, true)
	})
}

func gpuBuiltins(t *testing.T, layout []int, groups int, nccl bool, wo worker.Options, env func(host int) []string) {
	leaktest.Check(t)
	n := len(layout)
	c := tokenCreds(t)
	lb := &logBuf{}
	l, err := cluster.Listen(cluster.Options{Nodes: n, NumGroups: groups, Security: c.cfg, Log: lb.log, DeviceIDs: []int{0}, StartTimeout: 60 * time.Second, Worker: wo})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range layout {
		startAgent(t, l.Addr(), w, i, c.files, env(i)...)
	}
	s, err := l.Accept(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, lb.String())
	}
	defer s.Shutdown()
	ctx := context.Background()
	fn := func(name string) *session.DRef {
		f, err := s.GetGlobalFunc(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	call := func(name string, args ...any) *session.DRef {
		t.Helper()
		r, err := s.CallPacked(fn(name), args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	sync := func(what string) {
		t.Helper()
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// host fetches worker w's tensor in r (by value, from its device).
	host := func(r *session.DRef, w int) []float64 {
		t.Helper()
		v, err := s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
		x, ok := v.(*tensor.Tensor)
		if !ok {
			t.Fatalf("worker %d: got a %T", w, v)
		}
		d, err := tensor.ToFloat64(x)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	expect := func(what string, r *session.DRef, want func(w, i int) float64) {
		t.Helper()
		for w := range n {
			got := host(r, w)
			for i, g := range got {
				if x := want(w, i); g != x {
					t.Fatalf("%s: worker %d element %d of %d: %v, want %v", what, w, i, len(got), g, x)
				}
			}
		}
	}

	devs := call("chorus.device")
	for w := range n {
		v, err := s.DebugGetFromRemote(ctx, devs, w)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := v.(tensor.Device); d.Kind != tensor.CUDA {
			t.Fatalf("worker %d: device %v, want a GPU", w, v)
		}
	}
	// A fresh device tensor on the last host comes back zeroed, by value.
	buf := call("chorus.empty", tensor.Shape{3, 5}, tensor.BFloat16, nil, false, false)
	sync("empty")
	v, err := s.DebugGetFromRemote(ctx, buf, n-1)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := v.(*tensor.Tensor); !ok || got.DType() != tensor.BFloat16 || !got.Shape().Equal(tensor.Shape{3, 5}) {
		t.Fatalf("fetched %v", v)
	} else if err := tensor.Equal(got, tensor.MustNew(tensor.BFloat16, tensor.Shape{3, 5})); err != nil {
		t.Errorf("fresh device tensor not zeroed: %v", err)
	}
	rnd := tensor.MustNew(tensor.BFloat16, tensor.Shape{3, 5})
	if err := tensor.Random(rnd, 7); err != nil {
		t.Fatal(err)
	}
	back := tensor.MustNew(tensor.BFloat16, tensor.Shape{3, 5})
	if err := s.CopyToWorker0(rnd, buf); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyFromWorker0(ctx, back, buf); err != nil {
		t.Fatal(err)
	}
	if err := tensor.Equal(back, rnd); err != nil {
		t.Errorf("CopyToWorker0 then CopyFromWorker0: %v", err)
	}
	// Each worker's own values, written on its device.
	const count = 1000
	val := func(w, i int) float64 { return float64(w*1000 + i) }
	fill := call("clustertest.device_fill", int64(count))
	expect("device_fill", fill, val)
	// A GPU the worker is not bound to: an error that names it.
	call("chorus.empty", tensor.Shape{1}, tensor.Float32, "cuda:5", false, false)
	if err := s.Sync(ctx); err == nil || !strings.Contains(err.Error(), "cuda:5") {
		t.Errorf("empty on an unbound GPU: %v", err)
	}
	if !nccl {
		if err := s.Shutdown(); err != nil {
			t.Fatal(err)
		}
		return
	}

	if err := s.InitCCL(ctx, "nccl", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	sum := func(ws []int) func(w, i int) float64 {
		return func(_, i int) float64 {
			var s float64
			for _, w := range ws {
				s += val(w, i)
			}
			return s
		}
	}
	all := make([]int, n)
	for w := range all {
		all[w] = w
	}
	x := call("clustertest.device_fill", int64(count))
	call("chorus.allreduce", x, "sum", false, x)
	sync("allreduce")
	expect("allreduce", x, sum(all))
	// Groups of n/groups consecutive workers, each on hosts of its own.
	g := call("clustertest.device_fill", int64(count))
	call("chorus.allreduce", g, "sum", true, g)
	sync("group allreduce")
	per := n / groups
	for w := range n {
		lo := w / per * per
		ws := all[lo : lo+per]
		got, want := host(g, w), sum(ws)
		for i := range got {
			if got[i] != want(w, i) {
				t.Fatalf("group allreduce: worker %d element %d: %v, want %v (group %v)", w, i, got[i], want(w, i), ws)
			}
		}
	}
	src := call("clustertest.device_fill", int64(count))
	dst := call("chorus.empty", tensor.Shape{count * int64(n)}, tensor.Float32, nil, false, false)
	call("chorus.allgather", src, false, dst)
	sync("allgather")
	expect("allgather", dst, func(_, i int) float64 { return val(i/count, i%count) })
	bc := call("chorus.empty", tensor.Shape{count}, tensor.Float32, nil, false, false)
	call("chorus.broadcast_from_worker0", src, false, bc)
	sync("broadcast_from_worker0")
	expect("broadcast_from_worker0", bc, func(_, i int) float64 { return val(0, i) })
	call("chorus.barrier", false)
	call("chorus.barrier", true)
	sync("barriers")
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// ncclAgentEnv is the environment of agent i in the NCCL tests: the GPUs
// it sees, a host id of its own (so NCCL moves data between agents with
// its network transport, sockets on loopback, as between hosts, and
// allows agents to share a GPU), and NCCL's log in dir.
func ncclAgentEnv(i int, visible, dir string) []string {
	return []string{
		"CUDA_VISIBLE_DEVICES=" + visible,
		fmt.Sprintf("NCCL_HOSTID=chorus-test-%s-host%d", strings.ReplaceAll(dir, "/", "-"), i),
		"NCCL_SOCKET_IFNAME=lo", "NCCL_IB_DISABLE=1", "NCCL_NVLS_ENABLE=0",
		"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET,P2P,SHM",
		"NCCL_DEBUG_FILE=" + dir + "/nccl.%h.%p",
	}
}

func init() {
	// clustertest.device_fill(n): a float32 tensor of n elements on the
	// worker's device, element i = worker id * 1000 + i.
	registry.MustRegisterTyped("clustertest.device_fill", func(env registry.Env, n int64) (*tensor.Tensor, error) {
		h := tensor.MustNew(tensor.Float32, tensor.Shape{n})
		d, _ := tensor.Data[float32](h)
		for i := range d {
			d[i] = float32(env.WorkerID()*1000 + i)
		}
		x, err := env.Alloc(tensor.Float32, tensor.Shape{n}, env.Device(), "")
		if err != nil {
			return nil, err
		}
		return x, registry.FromHost(env, x, h)
	})
}

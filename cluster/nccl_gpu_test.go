package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/cluster"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// gpuCount returns the GPUs this machine has, or skips.
func gpuCount(t *testing.T) int {
	t.Helper()
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(t, "no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		gputest.Skipf(t, "CUDA driver: %v", err)
	}
	n, err := d.DeviceCount()
	if err != nil || n == 0 {
		gputest.Skipf(t, "no GPU: %v", err)
	}
	if _, err := ccl.Lookup("nccl"); err != nil {
		gputest.Skipf(t, "%v", err)
	}
	if b, _ := ccl.Lookup("nccl"); b != nil {
		if _, err := b.NewID(); err != nil {
			gputest.Skipf(t, "NCCL not loadable: %v", err)
		}
	}
	return n
}

// TestNCCLAcrossHosts: agents join an NCCL communicator whose unique id
// worker 0 made and the controller handed out, and run collectives on GPU
// tensors. Every agent has its own NCCL_HOSTID, so NCCL takes each for a
// host of its own and moves the data with its network transport (sockets
// on loopback), as between real hosts; the test checks in NCCL's own log
// that every channel went through it. With fewer GPUs than workers the
// agents share GPU 0 (ranks of different hosts may share a device; one
// worker per host then), so one GPU runs it; with 4 GPUs a 2x2 layout
// runs too. Skipped without a GPU and libnccl; on a GPU machine:
// scripts/gpu-build.sh here, then gpu-check.sh there.
func TestNCCLAcrossHosts(t *testing.T) {
	ngpu := gpuCount(t)
	layouts := [][]int{{1, 1}, {1, 1, 1}}
	if ngpu >= 4 {
		layouts = append(layouts, []int{2, 2})
	}
	for _, l := range layouts {
		t.Run(fmt.Sprint(l), func(t *testing.T) { ncclAcrossHosts(t, l, ngpu) })
	}
}

func ncclAcrossHosts(t *testing.T, layout []int, ngpu int) {
	leaktest.Check(t)
	perHost, total := layout[0], 0
	for _, w := range layout {
		total += w
	}
	devs := make([]int, perHost)
	for i := range devs {
		devs[i] = i
	}
	c := tokenCreds(t)
	lb := &logBuf{}
	l, err := cluster.Listen(cluster.Options{Nodes: len(layout), Security: c.cfg, Log: lb.log, DeviceIDs: devs, StartTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	for i, w := range layout {
		visible := "0" // shared: one worker per host
		if ngpu >= total {
			var ids []string
			for d := range w {
				ids = append(ids, strconv.Itoa(i*perHost+d))
			}
			visible = strings.Join(ids, ",")
		}
		startAgent(t, l.Addr(), w, i, c.files, ncclAgentEnv(i, visible, logs)...)
	}
	s, err := l.Accept(context.Background())
	if err != nil {
		t.Fatalf("%v\n%s", err, lb.String())
	}
	defer s.Shutdown()
	ctx := context.Background()
	if err := s.InitCCL(ctx, "nccl", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	checkCollectives(t, s, total)
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// With one worker per host every channel crosses hosts; with more,
	// the workers of a host may connect through P2P or SHM, and at least
	// one worker per host shows the network transport.
	if perHost == 1 {
		checkNCCLNet(t, logs, total, true)
	} else {
		checkNCCLNet(t, logs, len(layout), false)
	}
}

// checkNCCLNet reads the NCCL logs in dir: at least want workers
// connected channels through the network transport, and with onlyNet no
// channel went another way.
func checkNCCLNet(t *testing.T, dir string, want int, onlyNet bool) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "nccl.*"))
	var viaNet int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if onlyNet && strings.Contains(line, " via ") && !strings.Contains(line, "via NET/") {
				t.Errorf("%s: a channel not through the network transport: %s", filepath.Base(f), line)
			}
		}
		if i := strings.Index(string(b), "via NET/Socket"); i >= 0 {
			viaNet++
			line := string(b[strings.LastIndexByte(string(b[:i]), '\n')+1:])
			t.Logf("%s: %s", filepath.Base(f), line[:strings.IndexByte(line+"\n", '\n')])
		}
	}
	if viaNet < want {
		var head string
		for _, f := range files {
			b, _ := os.ReadFile(f)
			head += fmt.Sprintf("== %s\n%s\n", filepath.Base(f), b[:min(len(b), 3000)])
		}
		t.Fatalf("%d workers' NCCL logs show channels via NET/Socket, want %d:\n%s", viaNet, want, head)
	}
}

// checkCollectives runs clustertest.nccl_run's cases on every worker of
// s, then a count mismatch (every worker fails with ccl.ErrMismatch), then
// the cases again.
func checkCollectives(t *testing.T, s *session.Session, total int) {
	t.Helper()
	ctx := context.Background()
	get := func(name string) *session.DRef {
		f, err := s.GetGlobalFunc(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	run := get("clustertest.nccl_run")
	n := int64(total)
	cases := []struct {
		kind  string
		dt    tensor.DType
		count int64
		op    string
	}{
		{"allreduce", tensor.Float32, 4 << 20, "sum"}, // 16 MiB: many network chunks
		{"allreduce", tensor.BFloat16, 1 << 20, "sum"},
		{"allreduce", tensor.Float32, 1001, "max"},
		{"allreduce", tensor.Float16, 4096, "avg"},
		{"allreduce", tensor.Int32, 77, "sum"},
		{"allreduce", tensor.Float64, 12345, "min"},
		{"reduce_scatter", tensor.Float32, 1024 * n, "sum"},
		{"allgather", tensor.BFloat16, 999, "sum"},
		{"broadcast", tensor.Float64, 123, "sum"},
		{"allreduce", tensor.Float32, 1, "sum"},
	}
	check := func(what string) {
		t.Helper()
		for i, cs := range cases {
			r, err := s.CallPacked(run, cs.kind, cs.dt, cs.count, cs.op, int64(i))
			if err != nil {
				t.Fatalf("%s: %+v: %v", what, cs, err)
			}
			for w := range total {
				v, err := s.DebugGetFromRemote(ctx, r, w)
				if err != nil {
					t.Fatalf("%s: %+v: worker %d: %v", what, cs, w, err)
				}
				if v != "" {
					t.Errorf("%s: %+v: worker %d: %v", what, cs, w, v)
				}
			}
		}
	}
	check("first")
	// A count mismatch across hosts is caught by the host control
	// communicators before the backend sees it (NCCL would hang), on
	// every worker, and the communicator goes on.
	if err := s.CallPackedDiscard(get("clustertest.nccl_mismatch")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); !errors.Is(err, ccl.ErrMismatch) {
		t.Fatalf("mismatch: %v, want ccl.ErrMismatch", err)
	}
	check("after the mismatch")
}

// TestNCCLCasesOnCPU runs TestNCCLAcrossHosts's cases with the cpu backend
// on three hosts, here, so the cases and their reference are checked
// where no GPU is.
func TestNCCLCasesOnCPU(t *testing.T) {
	leaktest.Check(t)
	s, _, _ := startCluster(t, tokenCreds(t), []int{1, 1, 1}, nil)
	if err := s.InitCCL(context.Background(), "cpu", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	checkCollectives(t, s, 3)
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

func init() {
	// clustertest.nccl_run(kind, dtype, count, op, seed): a collective on
	// GPU tensors through the worker's communicator, checked against a
	// float64 reference; returns "" or what was wrong. Inputs are small
	// integers (exact in every dtype), different on every rank.
	registry.MustRegisterTyped("clustertest.nccl_run", func(env registry.Env, kind string, dt tensor.DType, count int64, opName string, seed int64) (string, error) {
		c, err := registry.Comm(env, false)
		if err != nil {
			return "", err
		}
		op, err := reduce.ParseOp(opName)
		if err != nil {
			return "", err
		}
		n, r := c.Size(), c.Rank()
		input := func(q int) []float64 {
			v := make([]float64, count)
			for i := range v {
				v[i] = float64((int64(i)*31+int64(q)*17+seed*7)%13 - 6)
			}
			return v
		}
		outN := count
		switch kind {
		case "allgather":
			outN *= int64(n)
		case "reduce_scatter":
			outN /= int64(n)
		}
		want := make([]float64, outN)
		switch kind {
		case "allreduce", "reduce_scatter":
			all := input(0)
			for q := 1; q < n; q++ {
				for i, x := range input(q) {
					switch op {
					case reduce.Max:
						all[i] = max(all[i], x)
					case reduce.Min:
						all[i] = min(all[i], x)
					default:
						all[i] += x
					}
				}
			}
			if op == reduce.Avg {
				for i := range all {
					all[i] /= float64(n)
				}
			}
			off := int64(0)
			if kind == "reduce_scatter" {
				off = int64(r) * outN
			}
			copy(want, all[off:off+outN])
		case "allgather":
			for q := range n {
				copy(want[int64(q)*count:], input(q))
			}
		case "broadcast":
			copy(want, input(0))
		}
		mine := tensor.MustNew(dt, tensor.Shape{count})
		if err := tensor.SetFromFloat64(mine, input(r)); err != nil {
			return "", err
		}
		send, err := env.Alloc(dt, tensor.Shape{count}, env.Device(), "")
		if err != nil {
			return "", err
		}
		recv, err := env.Alloc(dt, tensor.Shape{outN}, env.Device(), "")
		if err != nil {
			return "", err
		}
		if err := registry.FromHost(env, send, mine); err != nil {
			return "", err
		}
		ctx := env.Context()
		switch kind {
		case "allreduce":
			err = c.AllReduce(ctx, send, recv, op)
		case "reduce_scatter":
			err = c.ReduceScatter(ctx, send, recv, op)
		case "allgather":
			err = c.AllGather(ctx, send, recv)
		case "broadcast":
			err = c.Broadcast(ctx, send, recv, 0)
		default:
			return "", fmt.Errorf("unknown collective %q", kind)
		}
		if err != nil {
			return "", err
		}
		got, err := registry.ToHost(env, recv)
		if err != nil {
			return "", err
		}
		rtol, atol := tensor.DefaultTolerance(dt)
		if err := tensor.CloseTo(got, want, rtol, atol); err != nil {
			return fmt.Sprintf("%s %s x %d: %v", kind, dt, count, err), nil
		}
		return "", nil
	})
	// clustertest.nccl_mismatch(): an allreduce whose count differs on
	// the last worker.
	registry.MustRegisterTyped("clustertest.nccl_mismatch", func(env registry.Env) error {
		c, err := registry.Comm(env, false)
		if err != nil {
			return err
		}
		count := int64(100)
		if c.Rank() == c.Size()-1 {
			count++
		}
		x, err := env.Alloc(tensor.Float32, tensor.Shape{count}, env.Device(), "")
		if err != nil {
			return err
		}
		return c.AllReduce(env.Context(), x, x, reduce.Sum)
	})
}

// TestNCCLWithoutGPUs: where NCCL cannot load, InitCCL("nccl") across
// hosts fails at once with worker 0's reason, and the session stays
// usable (CI runs this one).
func TestNCCLWithoutGPUs(t *testing.T) {
	if b, err := ccl.Lookup("nccl"); err == nil {
		if _, err := b.NewID(); err == nil {
			t.Skip("NCCL loads here; TestNCCLAcrossHosts covers it")
		}
	}
	leaktest.Check(t)
	s, _, _ := startCluster(t, tokenCreds(t), []int{1, 1}, nil)
	ctx := context.Background()
	err := s.InitCCL(ctx, "nccl", time.Second)
	if err == nil || !strings.Contains(err.Error(), "worker 0") || !strings.Contains(err.Error(), "NCCL unique id") {
		t.Fatalf("InitCCL nccl: %v", err)
	}
	if err := s.InitCCL(ctx, "cpu", 10*time.Second); err != nil {
		t.Fatalf("after the failed nccl InitCCL: %v", err)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

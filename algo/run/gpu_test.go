package run_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/gpuexec"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/mscclpptests"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// LoadGPU refuses, on the controller and before any worker is asked, a
// plan that does not fit the session or that the verifier rejects (no
// GPU needed).
func TestLoadGPURefusesBeforeLaunch(t *testing.T) {
	s, err := session.NewThreaded(session.Options{NumWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	p3, err := library.Build("allreduce_oneshot", 3, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := library.Build("allreduce_twoshot", 2, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := p2.Marshal()
	racy, _ := plan.Parse(raw)
	for gi := range racy.GPUs {
		for ti := range racy.GPUs[gi].ThreadBlocks {
			tb := &racy.GPUs[gi].ThreadBlocks[ti]
			var keep []plan.Op
			for _, op := range tb.Ops {
				if op.Name != plan.OpWait {
					keep = append(keep, op)
				}
			}
			tb.Ops = keep
		}
	}
	if _, err := run.LoadGPU(bg(t), s, p3, run.GPUOptions{}); !errors.Is(err, ccl.ErrBadArgs) {
		t.Errorf("3-rank plan on 2 workers: %v, want ErrBadArgs", err)
	}
	if _, err := run.LoadGPU(bg(t), s, racy, run.GPUOptions{}); !errors.Is(err, gpuexec.ErrRejected) {
		t.Errorf("racy plan: %v, want ErrRejected", err)
	}
}

func gpuCount() int {
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		return 0
	}
	n, _ := d.DeviceCount()
	return n
}

// TestGPUPlans runs every library algorithm on GPU workers (process
// sessions; several processes share a GPU when there are fewer GPUs than
// ranks) for float32/float16/bfloat16 x sum/min/max at sizes the plan's
// layout accepts (small, odd element counts, 1 MB), outputs poisoned
// first, checked exactly on every worker; one case also 1000 calls back
// to back and one replayed from a CUDA graph. CHORUS_GPU_PLAN_RANKS
// (default "2,3") picks the rank counts. Skipped without a GPU.
func TestGPUPlans(t *testing.T) {
	gputest.Require(t, 1)
	ranks := []int{2, 3}
	if v := os.Getenv("CHORUS_GPU_PLAN_RANKS"); v != "" {
		ranks = nil
		for _, f := range splitComma(v) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			ranks = append(ranks, n)
		}
	}
	ngpu := gpuCount()
	for _, n := range ranks {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			ids := make([]int, n)
			for i := range ids {
				ids[i] = i % ngpu
			}
			s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: n, DeviceIDs: ids}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}()
			if err := s.InitCCL(bg(t), "ipc", 30*time.Second); err != nil {
				t.Fatal(err)
			}
			for _, name := range library.Names() {
				base, err := library.Build(name, n, library.Options{})
				if err != nil {
					t.Fatal(err)
				}
				for _, op := range []reduce.Op{reduce.Sum, reduce.Min, reduce.Max} {
					p, err := cpuexec.WithReduceOp(base, op)
					if err != nil {
						t.Fatal(err)
					}
					c, err := run.LoadGPU(bg(t), s, p, run.GPUOptions{Timeout: 20 * time.Second})
					if err != nil {
						t.Fatalf("%s %s: %v", name, op, err)
					}
					for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16} {
						for si, bytes := range []int64{4 * 7 * 16, 4 * 4099, 1<<20 + 4*48} {
							inN, outN := run.Counts(p, dt, bytes)
							if inN == 0 {
								continue
							}
							iters, graph := 2, false
							if si == 1 && dt == tensor.BFloat16 && op == reduce.Sum {
								iters = 1000
							}
							if si == 0 && dt == tensor.Float16 {
								graph = true
							}
							r, err := c.Bench(bg(t), dt, inN, outN, iters, 1, op, graph, int64(si+3*int(dt)))
							if err != nil {
								t.Fatalf("%s %s %s %d elements (graph %v): %v", name, op, dt, inN, graph, err)
							}
							if r.Wrong != 0 {
								t.Errorf("%s %s %s %d -> %d elements (graph %v): %d wrong", name, op, dt, inN, outN, graph, r.Wrong)
							}
						}
					}
					if err := c.Close(); err != nil {
						t.Fatal(err)
					}
					if err := s.Sync(bg(t)); err != nil {
						t.Fatalf("%s %s: %v", name, op, err)
					}
				}
			}
		})
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// TestGPUPortPackets runs MSCCL++'s two-node packet programs, whose hop
// between the nodes is an rppkt over a port channel (the proxy copies the
// finished packets into the peer's scratch), on 4 GPU workers (process
// sessions; ranks share GPUs when there are fewer): float32 and bfloat16
// sums at two sizes, outputs poisoned and checked exactly, one case 200
// calls back to back and one replayed from a CUDA graph. Skipped without
// a GPU.
func TestGPUPortPackets(t *testing.T) {
	gputest.Require(t, 1)
	const n = 4
	s := gpuSession(t, n)
	names := map[string]bool{"multi_node/allgather_pkt.py": true, "multi_node/reducescatter_pkt.py": true,
		"multi_node/allreduce_pkt.py": true, "multi_node/allreduce_brodcast_pkt.py": true}
	found := 0
	for _, pr := range mscclpptests.Programs() {
		if !names[pr.Name] {
			continue
		}
		found++
		p, err := pr.Build(n)
		if err != nil {
			t.Fatal(err)
		}
		c, err := run.LoadGPU(bg(t), s, p, run.GPUOptions{Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", pr.Name, err)
		}
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
			for si, bytes := range []int64{4 * 7 * 16, 1<<20 + 4*48} {
				inN, outN := run.Counts(p, dt, bytes)
				if inN == 0 {
					continue
				}
				iters, graph := 2, si == 0 && dt == tensor.Float32
				if si == 1 && dt == tensor.BFloat16 {
					iters = 200
				}
				r, err := c.Bench(bg(t), dt, inN, outN, iters, 1, reduce.Sum, graph, int64(si+3*int(dt)))
				if err != nil {
					t.Fatalf("%s %s %d elements (graph %v): %v", pr.Name, dt, inN, graph, err)
				}
				if r.Wrong != 0 {
					t.Errorf("%s %s %d -> %d elements (graph %v): %d wrong", pr.Name, dt, inN, outN, graph, r.Wrong)
				}
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if found != len(names) {
		t.Fatalf("%d of the %d programs found", found, len(names))
	}
}

package run_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/gpuworker"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// gpu_flagwrap(handle, small, large) runs the calls of
	// TestGPUPacketFlagWrap on this worker and describes the wrong ones
	// ("" when every call was exact).
	registry.MustRegisterTyped("runtest.gpu_flagwrap", gpuFlagWrap)
}

func gpuFlagWrap(env registry.Env, h any, small, large int64) (string, error) {
	e, ok := h.(*gpuworker.Executor)
	if !ok || e.X == nil {
		return "", fmt.Errorf("runtest.gpu_flagwrap: %T is not a loaded plan", h)
	}
	n, r := env.NumWorkers(), env.WorkerID()
	type pair struct{ send, recv *tensor.Tensor }
	bufs := map[int64]pair{}
	for _, c := range []int64{small, large} {
		send, err := env.Alloc(tensor.Float32, tensor.Shape{c}, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return "", err
		}
		recv, err := env.Alloc(tensor.Float32, tensor.Shape{c}, env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return "", err
		}
		bufs[c] = pair{send, recv}
	}
	var report []string
	// call runs an all-reduce of count elements, rank r's element i
	// (r+1)·seed + i%13, and checks it exactly.
	call := func(name string, count int64, seed int) error {
		b := bufs[count]
		in := tensor.MustNew(tensor.Float32, tensor.Shape{count})
		v, err := tensor.Data[float32](in)
		if err != nil {
			return err
		}
		for i := range v {
			v[i] = float32((r+1)*seed + i%13)
		}
		if err := registry.FromHost(env, b.send, in); err != nil {
			return err
		}
		if err := e.X.Run(env.Context(), b.send, b.recv, reduce.Sum); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := registry.SyncDevice(env); err != nil {
			return err
		}
		out, err := registry.ToHost(env, b.recv)
		if err != nil {
			return err
		}
		got, err := tensor.Data[float32](out)
		if err != nil {
			return err
		}
		wrong := 0
		for i, g := range got {
			if want := float32(seed*n*(n+1)/2 + n*(i%13)); g != want {
				wrong++
			}
		}
		if wrong > 0 {
			report = append(report, fmt.Sprintf("%s: %d of %d wrong", name, wrong, count))
		}
		return nil
	}
	steps := []struct {
		name  string
		count int64
	}{
		{"small, flag 1", small}, {"large, flag 2", large},
		// SetCallCount(0xFFFFFFFC) here
		{"small, flag 0xFFFFFFFD", small}, {"small, flag 0xFFFFFFFE", small}, {"small, flag 0xFFFFFFFF", small},
		{"large, flag 2 after the wrap", large}, {"small, flag 3", small}, {"large, flag 4", large},
	}
	for i, s := range steps {
		if i == 2 {
			// odd next, as after flag 2: the halves of the double scratch
			// keep alternating
			if err := e.X.SetCallCount(0xFFFFFFFC); err != nil {
				return "", err
			}
		}
		if err := call(s.name, s.count, i+1); err != nil {
			return "", err
		}
	}
	return strings.Join(report, "; "), nil
}

// TestGPUPacketFlagWrap runs allreduce_packet (FlagSynced: its calls
// meet only through their packets' flags, in the two halves of a double
// scratch) across the 32-bit flag's wrap on 2 workers: a large call
// takes flag 2, the call counters jump to 0xFFFFFFFC, three small calls
// take the flags up to 0xFFFFFFFF, and a large call with other inputs
// takes flag 2 again. Its packets past the small calls' lie where the
// first large call's, of flag 2 too, still are unless the wrapped call
// zeroed the scratch first (runtime.cuh, scrub): readers would take
// those for this call's. Every call must be exact. Skipped without a
// GPU; 2 GPUs where there are, else both workers on GPU 0.
func TestGPUPacketFlagWrap(t *testing.T) {
	gputest.Require(t, 1)
	const n = 2
	s := gpuSession(t, n)
	p, err := library.Build("allreduce_packet", n, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := run.LoadGPU(bg(t), s, p, run.GPUOptions{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	small, _ := run.Counts(p, tensor.Float32, 4<<10)
	large, _ := run.Counts(p, tensor.Float32, 2<<20)
	f, err := s.GetGlobalFunc(bg(t), "runtest.gpu_flagwrap")
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.CallPacked(f, c.Handle(), small, large)
	if err != nil {
		t.Fatal(err)
	}
	for w := range n {
		v, err := s.DebugGetFromRemote(bg(t), out, w)
		if err != nil {
			t.Fatal(err)
		}
		if rep := v.(string); rep != "" {
			t.Errorf("worker %d: %s", w, rep)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

package session_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// graphtest.copy(dst, src): a device copy on the worker's stream.
	registry.MustRegisterTyped("graphtest.copy", func(env registry.Env, dst, src *tensor.Tensor) error {
		return registry.CopyTensor(env, dst, src)
	})
	// graphtest.fill(t, v): t = v + worker id, through the host.
	registry.MustRegisterTyped("graphtest.fill", func(env registry.Env, t *tensor.Tensor, v float64) error {
		h := tensor.MustNew(t.DType(), t.Shape())
		vals := make([]float64, t.NumElements())
		for i := range vals {
			vals[i] = v + float64(env.WorkerID())
		}
		if err := tensor.SetFromFloat64(h, vals); err != nil {
			return err
		}
		return registry.FromHost(env, t, h)
	})
}

// TestGraphBuiltins captures a worker function with chorus.graph.capture
// on fake GPUs and replays it with chorus.graph.launch: nothing runs at
// capture, each launch reads the source as it is then; capturing a
// function that allocates, or the built-ins themselves, is an error.
func TestGraphBuiltins(t *testing.T) {
	s, err := session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1}, OpenDevice: worker.OpenFake})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	empty, fill := mustFunc(t, s, "chorus.empty"), mustFunc(t, s, "graphtest.fill")
	capture, launch := mustFunc(t, s, worker.GraphCaptureFunc), mustFunc(t, s, worker.GraphLaunchFunc)
	mk := func() *session.DRef {
		r, err := s.CallPacked(empty, tensor.Shape{4}, tensor.Float32, nil, false, false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	x, y := mk(), mk()
	value := func(w int) float64 {
		t.Helper()
		v, ok := get(t, s, y, w).(*tensor.Tensor)
		if !ok {
			t.Fatalf("worker %d: y is not a tensor", w)
		}
		f, _ := tensor.ToFloat64(v)
		return f[3]
	}
	if _, err := s.CallPacked(fill, x, 5.0); err != nil {
		t.Fatal(err)
	}
	g, err := s.CallPacked(capture, "graphtest.copy", y, x)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); err != nil {
		t.Fatal(err)
	}
	if v := value(1); v != 0 {
		t.Fatalf("the captured copy ran at capture: y = %v", v)
	}
	for _, v := range []float64{10, 20} {
		if _, err := s.CallPacked(fill, x, v); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CallPacked(launch, g); err != nil {
			t.Fatal(err)
		}
		for w := range 2 {
			if got := value(w); got != v+float64(w) {
				t.Fatalf("after a launch with x = %v: worker %d has y = %v", v, w, got)
			}
		}
	}
	for _, c := range []struct {
		args []any
		msg  string
	}{
		{[]any{"chorus.empty", tensor.Shape{4}, tensor.Float32, nil, false, false}, "captured into a graph"},
		{[]any{worker.GraphCaptureFunc, "graphtest.copy"}, "chorus.graph.capture of chorus.graph.capture"},
		{[]any{"graphtest.nope"}, "graphtest.nope"},
	} {
		if _, err := s.CallPacked(capture, c.args...); err != nil {
			t.Fatal(err)
		}
		err := s.Sync(bg(t))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("capture %v: %v, want an error containing %q", c.args[0], err, c.msg)
		}
	}
	if _, err := s.CallPacked(launch, x); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(bg(t)); !errors.Is(err, session.ErrBadArgs) && (err == nil || !strings.Contains(err.Error(), "not a graph")) {
		t.Errorf("launch of a tensor: %v", err)
	}
}

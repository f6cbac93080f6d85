package passes_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/passes"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

func parseFile(t *testing.T, path string) *ir.Module {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ir.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func cuda0(t testing.TB) vdevice.VirtualDevice {
	v, err := vdevice.New(vdevice.CUDA, 0, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDefaultPipelineMLP(t *testing.T) {
	m := parseFile(t, "testdata/plan_devices_mlp.in.ir")
	before, err := passes.PeakMemory(m.Funcs[0])
	if err != nil {
		t.Fatal(err)
	}
	var trace bytes.Buffer
	out, err := passes.Default(cuda0(t), "one_shot").Run(m, passes.RunOptions{PrintAfterEach: &trace})
	if err != nil {
		t.Fatal(err)
	}
	if err := ir.VerifyDevices(out); err != nil {
		t.Fatal(err)
	}
	after, err := passes.PeakMemory(out.Funcs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Before: three [8, 128] and three [8, 64] float16 tensors. After: two
	// 2048-byte global storages, the returned %y, and one IPC storage.
	if before.Total != 9216 || before.ByScope["global"] != 9216 {
		t.Errorf("before = %+v", before)
	}
	if after.Total != 6144 || after.ByScope["global"] != 5120 || after.ByScope["ipc_memory"] != 1024 {
		t.Errorf("after = %+v", after)
	}
	for _, name := range []string{"plan-devices", "ipc-allreduce-rewrite", "plan-memory", "lower-gpu-ipc-alloc-storage"} {
		if !strings.Contains(trace.String(), "// after pass "+name+"\n") {
			t.Errorf("trace lacks pass %s", name)
		}
	}
	// The same pipeline from text.
	p, err := passes.ParsePipeline("text", "plan-devices={cuda:0}, ipc-allreduce-rewrite=one_shot, plan-memory, lower-gpu-ipc-alloc-storage")
	if err != nil {
		t.Fatal(err)
	}
	out2, err := p.Run(m, passes.RunOptions{})
	if err != nil || out2.String() != out.String() {
		t.Errorf("text pipeline differs: %v", err)
	}
}

func TestPassErrors(t *testing.T) {
	conflict := `module @m
func @f(%x: tensor<[4], float32, {cpu:0}>, %y: tensor<[4], float32, {cuda:0}>) {
  block {
    device_copy(%x, {cuda:1}, {cuda:0}, %y)
  }
  return
}
`
	m, err := ir.Parse(conflict)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := passes.PlanDevices(cuda0(t)).Run(m); !errors.Is(err, passes.ErrDeviceConflict) {
		t.Errorf("PlanDevices on a conflicting device_copy: %v", err)
	}
	for _, strat := range []string{"fastest", "plan:", "plan: ", "PLAN:x"} {
		if _, err := passes.IPCAllreduceRewrite(strat).Run(m); !errors.Is(err, passes.ErrBadOption) {
			t.Errorf("bad strategy %q: %v", strat, err)
		}
	}
	for _, spec := range []string{"frobnicate", "plan-memory=3", "plan-devices={gpu}", "plan-devices={cuda:0"} {
		if _, err := passes.ParsePipeline("p", spec); !errors.Is(err, passes.ErrBadOption) {
			t.Errorf("ParsePipeline(%q) = %v", spec, err)
		}
	}
	if _, err := (passes.Pipeline{Name: "p"}).Run(nil, passes.RunOptions{}); !errors.Is(err, passes.ErrInvalidIR) {
		t.Errorf("nil module: %v", err)
	}
	// A pass that breaks the IR is named.
	breaker := passes.Pass{Name: "breaker", Run: func(m *ir.Module) (*ir.Module, error) {
		c := m.Clone()
		c.Funcs[0].Results = []ir.Ref{"nowhere"}
		return c, nil
	}}
	good := parseFile(t, "testdata/plan_memory.in.ir")
	_, err = passes.Pipeline{Name: "p", Passes: []passes.Pass{passes.PlanMemory(), breaker}}.Run(good, passes.RunOptions{})
	if !errors.Is(err, passes.ErrInvalidIR) || !errors.Is(err, ir.ErrUndefined) || !strings.Contains(err.Error(), "pass breaker") {
		t.Errorf("broken pass: %v", err)
	}
	// Invalid input is refused before any pass runs.
	bad := &ir.Module{Name: "m", Funcs: []*ir.Function{{Name: "f", Results: []ir.Ref{"x"}}}}
	if _, err := passes.Default(cuda0(t), "auto").Run(bad, passes.RunOptions{}); !errors.Is(err, passes.ErrInvalidIR) {
		t.Errorf("invalid input: %v", err)
	}
}

// TestPlanMemoryRandom builds random blocks and checks the plan: no two
// tensors whose lifetimes overlap share a storage, a storage is as large
// as every tensor on it and of the tensor's scope, dtype and device, the
// result verifies, and planning never increases PeakMemory.
func TestPlanMemoryRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	dev := cuda0(t)
	for iter := 0; iter < 300; iter++ {
		b := ir.NewFunc("f")
		var live []ir.Ref
		var ret []ir.Ref
		steps := 5 + r.IntN(30)
		for s := 0; s < steps; s++ {
			switch k := r.IntN(10); {
			case k < 4 || len(live) == 0:
				n := []int64{16, 64, 100, 1024, 4096}[r.IntN(5)]
				dt := []tensor.DType{tensor.Float16, tensor.Float32}[r.IntN(2)]
				scope := []string{"global", "global", "ipc_memory"}[r.IntN(3)]
				live = append(live, b.AllocTensor("t", tensor.Shape{n}, dt, dev, scope))
			case k < 8:
				x := live[r.IntN(len(live))]
				b.Gelu(x, x)
			case k < 9:
				x := live[r.IntN(len(live))]
				tt, _ := b.TypeOf(x)
				n, _ := tt.(ir.TensorType).Shape.NumElements()
				live = append(live, b.Reshape("v", x, tensor.Shape{1, n}))
			default:
				if r.IntN(2) == 0 {
					b.NewBlock()
				} else {
					ret = append(ret, live[r.IntN(len(live))])
				}
			}
		}
		b.Return(ret...)
		f, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		m := &ir.Module{Name: "m", Funcs: []*ir.Function{f}}
		out, err := passes.Pipeline{Name: "p", Passes: []passes.Pass{passes.PlanMemory()}}.Run(m, passes.RunOptions{})
		if err != nil {
			t.Fatalf("iteration %d: %v\n%s", iter, err, m)
		}
		if err := checkPlan(out.Funcs[0]); err != nil {
			t.Fatalf("iteration %d: %v\nbefore:\n%s\nafter:\n%s", iter, err, m, out)
		}
		pb, _ := passes.PeakMemory(f)
		pa, _ := passes.PeakMemory(out.Funcs[0])
		if pa.Total > pb.Total {
			t.Fatalf("iteration %d: planning grew memory %d -> %d", iter, pb.Total, pa.Total)
		}
	}
}

func checkPlan(f *ir.Function) error {
	for bi, blk := range f.Blocks {
		roots := map[string]string{}
		storageOf := map[string]string{} // view -> storage
		sizes := map[string]int64{}
		types := map[string]ir.TensorType{}
		first, last := map[string]int{}, map[string]int{}
		for i, b := range blk.Bindings {
			switch b.Op {
			case ir.OpAllocStorage:
				sizes[b.Result] = int64(b.Args[0].(ir.Int))
				types[b.Result] = ir.TensorType{Device: b.Type.(ir.StorageType).Device}
			case ir.OpAllocTensorView:
				s, _ := b.Ref(0)
				storageOf[b.Result] = string(s)
				types[b.Result] = b.Type.(ir.TensorType)
				first[b.Result], last[b.Result] = i, i
			case ir.OpReshape:
				s, _ := b.Ref(0)
				roots[b.Result] = string(s)
				if rr, ok := roots[string(s)]; ok {
					roots[b.Result] = rr
				}
			}
			for _, r := range b.Refs() {
				name := string(r)
				if rr, ok := roots[name]; ok {
					name = rr
				}
				if _, ok := first[name]; ok {
					last[name] = i
				}
			}
		}
		for v, s := range storageOf {
			tt := types[v]
			n, _ := tt.Bytes()
			st := types[s]
			if n > sizes[s] || !st.Device.Equal(tt.Device) {
				return fmt.Errorf("block %d: %s (%d bytes, %v) on %s (%d bytes, %v)", bi, v, n, tt.Device, s, sizes[s], st.Device)
			}
			for w, s2 := range storageOf {
				if w <= v || s2 != s {
					continue
				}
				if types[w].DType != tt.DType {
					return fmt.Errorf("block %d: %s and %s share %s with different dtypes", bi, v, w, s)
				}
				if first[v] <= last[w] && first[w] <= last[v] {
					return fmt.Errorf("block %d: %s [%d, %d] and %s [%d, %d] overlap on %s", bi, v, first[v], last[v], w, first[w], last[w], s)
				}
			}
		}
	}
	return nil
}

// TestMalformedInput: passes, the pipeline and PeakMemory refuse
// malformed modules with errors, never panics.
func TestMalformedInput(t *testing.T) {
	tensorT := ir.TensorType{Shape: tensor.Shape{4}, DType: tensor.Float32}
	mods := []*ir.Module{
		nil,
		{Name: "m", Funcs: []*ir.Function{nil}},
		{Name: "m", Funcs: []*ir.Function{{Name: "f", Blocks: []*ir.Block{nil, {Bindings: []*ir.Binding{nil}}}}}},
		{Name: "m", Funcs: []*ir.Function{{Name: "f", Blocks: []*ir.Block{{Bindings: []*ir.Binding{
			{Result: "a", Type: tensorT, Op: ir.OpAllocTensor, Args: []ir.Arg{ir.Int(3)}},
			{Result: "s", Type: ir.StorageType{}, Op: ir.OpAllocStorage},
			{Op: ir.OpAllreduce, Args: []ir.Arg{ir.Ref("a"), nil, ir.Ref("a")}},
			{Op: ir.OpDeviceCopy, Args: []ir.Arg{ir.Ref("a")}},
			{Op: ir.OpMatmul},
			{Op: ir.Op(99)},
		}}}}}},
	}
	all := []passes.Pass{passes.PlanDevices(vdevice.Unconstrained), passes.IPCAllreduceRewrite("auto"), passes.PlanMemory(), passes.LowerGPUIPCAllocStorage()}
	for i, m := range mods {
		for _, p := range all {
			if _, err := p.Run(m); !errors.Is(err, passes.ErrInvalidIR) {
				t.Errorf("module %d, pass %s: %v", i, p.Name, err)
			}
		}
		if m != nil {
			_ = m.String()
			_ = m.Clone()
			for _, f := range m.Funcs {
				if f != nil {
					_, _ = passes.PeakMemory(f)
				}
			}
		}
	}
}

package kernels

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/runtime/registry"
)

// Programmatic dependent launch (PDL, compute capability 9.0+): a VM
// kernel launched with programmatic stream serialization starts while
// the kernel before it on the stream finishes, runs its prologue (the
// skinny products stream their first pieces of w towards L2) and then
// waits in griddepcontrol.wait until that kernel has completed and its
// writes are visible; early in its body it executes
// griddepcontrol.launch_dependents, so the next kernel's launch, block
// placement and prologue overlap its own run instead of following its
// tail. Only a kernel that waits before it touches any buffer another
// kernel writes or reads may be launched so (pdlWaits); the others, and
// cuBLAS, launch the ordinary way, which waits for everything before.

// pdlFamilies are the kernel families (a kernel's name up to its dtype
// suffix) whose source executes PDL_WAIT before touching any buffer but
// weights: the kernels of kernels.cu, kernels_model.cu, kernels_gemv.cu,
// kernels_fused.cu, kernels_attn.cu and kernels_tc.cu. The measurement
// kernels (kernels_bench.cu) do not wait.
var pdlFamilies = map[string]bool{
	"add": true, "gelu": true,
	"mul": true, "silu": true, "embedding": true, "rms_norm": true, "layer_norm": true,
	"rope": true, "rope_table": true, "kv_append": true, "attention": true, "argmax": true,
	"gemv_nt": true, "gemv_nt3": true, "gemv_gated": true, "add_rms_norm": true,
	"attn_split": true, "attn_rope_split": true, "attn_combine": true,
	"tc_nt": true, "tc_nt3": true, "tc_gated": true,
}

// pdlWaits reports whether kernel name waits (griddepcontrol.wait)
// before it touches another kernel's buffers, so it may be launched with
// programmatic stream serialization.
func pdlWaits(name string) bool {
	for _, suf := range []string{"_f32", "_f16", "_bf16"} {
		if i := strings.LastIndex(name, suf); i > 0 && (len(name) == i+len(suf) || name[i+len(suf)] == '_') {
			return pdlFamilies[name[:i]]
		}
	}
	return false
}

// pdlOn is the worker process's switch (PDLFunc): launch the kernels
// that wait with programmatic stream serialization on GPUs that take it.
var pdlOn atomic.Bool

func init() {
	pdlOn.Store(true)
	registry.MustRegisterTyped(PDLFunc, func(on bool) (bool, error) { return pdlOn.Swap(on), nil })
}

// PDLFunc (on bool) -> the previous value: the VM's kernels that wait
// for their predecessor in the kernel (pdlWaits) are launched with
// programmatic dependent launch on compute capability 9.0+ (default
// on); off launches every kernel the ordinary way. A decode graph
// captured while it is on keeps the programmatic edges. Benchmarks
// compare the two in one run.
const PDLFunc = "chorus.vm.pdl"

// launcher is the part of the CUDA driver the kernels launch through
// (*cuda.Driver; a recording fake in tests).
type launcher interface {
	LaunchKernel(f cuda.Function, grid, block [3]uint32, shared uint32, s cuda.Stream, params []unsafe.Pointer) error
	LaunchKernelPDL(f cuda.Function, grid, block [3]uint32, shared uint32, s cuda.Stream, params []unsafe.Pointer) error
}

// kernelFn is a loaded kernel and whether it may be launched with
// programmatic stream serialization (pdlWaits of its name).
type kernelFn struct {
	f   cuda.Function
	pdl bool
}

func (g *GPU) addFn(name string, f cuda.Function) {
	g.fns[name] = kernelFn{f: f, pdl: pdlWaits(name)}
}

// launchOn launches k on s: with programmatic stream serialization when
// the kernel waits for its predecessor, the GPU takes it (g.pdl) and the
// switch is on; else the ordinary way.
func (g *GPU) launchOn(s cuda.Stream, name string, k kernelFn, grid, block [3]uint32, params []unsafe.Pointer) error {
	var err error
	if k.pdl && g.pdl && pdlOn.Load() {
		err = g.l.LaunchKernelPDL(k.f, grid, block, 0, s, params)
	} else {
		err = g.l.LaunchKernel(k.f, grid, block, 0, s, params)
	}
	if err != nil {
		return fmt.Errorf("kernel %s: %w", name, err)
	}
	return nil
}

// pdlCapable reports whether a device of compute capability major can
// take programmatic dependent launches through drv (Hopper and later,
// with cuLaunchKernelEx).
func pdlCapable(drv *cuda.Driver, major int) bool {
	return major >= 9 && drv.HasLaunchEx()
}

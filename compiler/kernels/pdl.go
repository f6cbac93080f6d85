package kernels

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
)

// Programmatic dependent launch (PDL, compute capability 9.0+): a VM
// kernel launched with programmatic stream serialization starts while
// the kernel before it on the stream finishes, runs its prologue (the
// products and the residual norm load their first weights where the VM
// proves that safe: SetFixedWeights) and then waits in
// griddepcontrol.wait until that kernel has completed and its writes are
// visible; before that wait it executes
// griddepcontrol.launch_dependents (gpu/cudasrc/pdl.cuh), so the next
// kernel's launch, block placement and prologue overlap its own run
// instead of following its tail. Only a kernel that waits before it
// touches any buffer another kernel writes or reads may be launched so
// (pdlWaits); the others, and cuBLAS, launch the ordinary way, which
// waits for everything before. So does the first kernel of a VM call
// (BeginCall): kernels launch before their waits, so without that edge
// a prologue of this call (a product reading its fixed weights) could
// run beside a kernel of the call before, which may write them.

// pdlFamilies are the kernel families (a kernel's name up to its dtype
// suffix) whose source executes PDL_WAIT before touching any buffer but
// fixed weights (SetFixedWeights): the kernels of kernels.cu, kernels_model.cu, kernels_gemv.cu,
// kernels_fused.cu, kernels_attn.cu, kernels_tc.cu and
// kernels_prefill.cu. The measurement kernels (kernels_bench.cu) do not
// wait.
var pdlFamilies = map[string]bool{
	"add": true, "gelu": true,
	"mul": true, "silu": true, "embedding": true, "rms_norm": true, "layer_norm": true,
	"rope": true, "rope_table": true, "kv_append": true, "attention": true, "argmax": true,
	"gemv_nt": true, "gemv_nt3": true, "gemv_gated": true, "gemv1_nt": true, "gemv1_nt3": true, "gemv1_gated": true, "add_rms_norm": true, "add_rms_norm_v": true, "silu_mul": true,
	"attn_split": true, "attn_rope_split": true, "attn_combine": true,
	"tc_nt": true, "tc_nt3": true, "tc_nt3w": true, "tc_gated": true,
	"prefill_attn": true, "dec_attn": true, "dec_attn_rope": true,
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
	// smem is the dynamic shared memory every launch asks for (bytes;
	// the function's limit was raised to it when it was loaded).
	smem uint32
}

func (g *GPU) addFn(name string, f cuda.Function) {
	g.fns[name] = kernelFn{f: f, pdl: pdlWaits(name)}
}

// launchOn launches k on s: with programmatic stream serialization when
// the kernel waits for its predecessor, the GPU takes it (g.pdl) and it
// is not the first kernel of its VM call, else the ordinary way. On an
// H200 a Llama-3-8B decode step ran 2.5-3.9% faster graph-replayed with
// it than without, and 7-9% eager, measured in both orders in one run.
func (g *GPU) launchOn(s cuda.Stream, name string, k kernelFn, grid, block [3]uint32, params []unsafe.Pointer) error {
	var err error
	if k.pdl && g.pdl && g.callLaunches > 0 {
		err = g.l.LaunchKernelPDL(k.f, grid, block, k.smem, s, params)
	} else {
		err = g.l.LaunchKernel(k.f, grid, block, k.smem, s, params)
	}
	if err != nil {
		return fmt.Errorf("kernel %s: %w", name, err)
	}
	g.callLaunches++
	return nil
}

// pdlCapable reports whether a device of compute capability major can
// take programmatic dependent launches through drv (Hopper and later,
// with cuLaunchKernelEx).
func pdlCapable(drv *cuda.Driver, major int) bool {
	return major >= 9 && drv.HasLaunchEx()
}

// SetFixedWeights tells the kernels with weight operands (the skinny
// products on CUDA or tensor cores: matmul_nt, the q/k/v triple, the
// gated projection; the residual add and norm's norm weight) launched
// until the next call whether their weight operands are fixed: written
// by no kernel launched on the stream since the current VM call's first
// kernel, which has been launched and waits for everything before it.
// With the promise (and PDL), a kernel reads (the first pieces of) its
// weights before its PDL wait, while the kernel before it finishes;
// anything else it reads only after. x is always another kernel's
// output and is never read early. For the decode attention (dec_attn,
// dec_attn_rope) the promise covers pos and every cache row before each
// sequence's position: it reads those, and computes the rotation's
// sines and cosines, before its wait. The VM makes the promise per
// instruction (compiler/vm/interp: the weight is a parameter of the
// function that no instruction writes, the caches parameters only that
// attention writes, and an earlier instruction launched work).
func (g *GPU) SetFixedWeights(on bool) { g.fixedWeights = on }

// BeginCall marks the start of a VM call: until a kernel of it has been
// launched, no product reads its weights before its wait, whatever
// SetFixedWeights says (a kernel of the call before may still be
// writing them).
func (g *GPU) BeginCall() { g.callLaunches = 0 }

// preArg is the pre argument of a kernel with weights: 1 when its
// weights are fixed (SetFixedWeights), it is launched with PDL (the
// early reads overlap nothing otherwise) and not first in its call.
func (g *GPU) preArg() int32 {
	if g.fixedWeights && g.pdl && g.callLaunches > 0 {
		return 1
	}
	return 0
}

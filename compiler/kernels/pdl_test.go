package kernels

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/tensor"
)

// fakeLauncher records each launch: the function and whether it asked
// for programmatic stream serialization.
type fakeLauncher struct {
	launches []fakeLaunch
	err      error
}

type fakeLaunch struct {
	f   cuda.Function
	pdl bool
}

func (l *fakeLauncher) LaunchKernel(f cuda.Function, _, _ [3]uint32, _ uint32, _ cuda.Stream, _ []unsafe.Pointer) error {
	l.launches = append(l.launches, fakeLaunch{f, false})
	return l.err
}

func (l *fakeLauncher) LaunchKernelPDL(f cuda.Function, _, _ [3]uint32, _ uint32, _ cuda.Stream, _ []unsafe.Pointer) error {
	l.launches = append(l.launches, fakeLaunch{f, true})
	return l.err
}

// TestLaunchPDL: a kernel whose source waits (pdlWaits) launches with
// the attribute on a GPU that takes it; every other kernel, and every
// kernel on an older GPU, launches the ordinary way.
func TestLaunchPDL(t *testing.T) {
	names := []struct {
		name  string
		waits bool
	}{
		{"add_bf16", true}, {"gelu_f32", true}, {"mul_f16", true}, {"silu_bf16", true},
		{"embedding_bf16", true}, {"rms_norm_bf16", true}, {"layer_norm_f16", true},
		{"rope_bf16", true}, {"rope_table_bf16", true}, {"kv_append_bf16", true},
		{"attention_f32", true}, {"argmax_bf16", true},
		{"gemv_nt_bf16_m1", true}, {"gemv_nt3_f16_m8", true}, {"gemv_gated_bf16_m4", true},
		{"add_rms_norm_bf16", true}, {"add_rms_norm_f32", true}, {"add_rms_norm_v_f16", true}, {"silu_mul_bf16", true},
		{"attn_split_bf16_e8", true}, {"attn_rope_split_f16_e4", true}, {"attn_combine_f16", true},
		{"tc_nt_bf16_m16", true}, {"tc_nt3_bf16_m8", true}, {"tc_gated_f16_m32", true},
		{"prefill_attn_bf16_d128", true}, {"prefill_attn_f16_d64", true}, {"dec_attn_bf16_d128", true}, {"dec_attn_rope_f16_d64", true},
		{"bench_noop", false}, {"bench_stream", false}, {"fill_uniform_bf16", false},
		{"gemv_bf16", false}, {"unknown_bf16", false}, {"bf16", false},
	}
	for _, tc := range []struct {
		what string
		gpu  bool
	}{
		{"sm_90", true},
		{"sm_80", false},
	} {
		t.Run(tc.what, func(t *testing.T) {
			l := &fakeLauncher{}
			g := &GPU{fns: map[string]kernelFn{}, l: l, pdl: tc.gpu}
			g.callLaunches = 1 // not the first kernel of a call (TestLaunchPDLFirstOfCall)
			for i, n := range names {
				g.addFn(n.name, cuda.Function(i+1))
				if err := g.launchOn(0, n.name, g.fns[n.name], [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if len(l.launches) != len(names) {
				t.Fatalf("%d launches, want %d", len(l.launches), len(names))
			}
			for i, n := range names {
				want := n.waits && tc.gpu
				if got := l.launches[i]; got.f != cuda.Function(i+1) || got.pdl != want {
					t.Errorf("%s: launched function %d with PDL %v, want function %d with PDL %v", n.name, got.f, got.pdl, i+1, want)
				}
			}
		})
	}
}

// TestLaunchPDLFirstOfCall checks that the first kernel of a VM call
// launches the ordinary way (kernels launch their successors before
// they wait, so only that edge keeps this call's prologues from running
// beside the call before) and the ones after it with PDL.
func TestLaunchPDLFirstOfCall(t *testing.T) {
	l := &fakeLauncher{}
	g := &GPU{fns: map[string]kernelFn{}, l: l, pdl: true}
	g.addFn("add_bf16", 1)
	launch := func() {
		t.Helper()
		if err := g.launchOn(0, "add_bf16", g.fns["add_bf16"], [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, nil); err != nil {
			t.Fatal(err)
		}
	}
	g.BeginCall()
	launch()
	launch()
	g.BeginCall()
	launch()
	want := []bool{false, true, false}
	for i, w := range want {
		if l.launches[i].pdl != w {
			t.Errorf("launch %d: PDL %v, want %v", i, l.launches[i].pdl, w)
		}
	}
}

func TestLaunchPDLErrorNamesKernel(t *testing.T) {
	bad := errors.New("launch failed")
	g := &GPU{fns: map[string]kernelFn{}, l: &fakeLauncher{err: bad}, pdl: true}
	g.addFn("gemv_nt_bf16_m1", 1)
	err := g.launchOn(0, "gemv_nt_bf16_m1", g.fns["gemv_nt_bf16_m1"], [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, nil)
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "gemv_nt_bf16_m1") {
		t.Fatalf("error %v: want the launch error naming the kernel", err)
	}
}

// cuFunc is a function definition of a CUDA source: its name, whether
// it is a kernel, and its body.
type cuFunc struct {
	name   string
	kernel bool
	body   string
}

var cuDef = regexp.MustCompile(`(?:extern "C" __global__|__device__)[^;{}()]*?\b([A-Za-z_][A-Za-z0-9_#]*)\s*\(`)

// cuFuncs finds the function definitions of src (macro bodies
// included: a kernel named add_##name is family "add").
func cuFuncs(t *testing.T, src string) []cuFunc {
	t.Helper()
	var out []cuFunc
	for _, m := range cuDef.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		if name == "__launch_bounds__" {
			rest := src[m[1]:]
			close := strings.Index(rest, ")")
			n := regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_#]*)\s*\(`).FindStringSubmatch(strings.TrimLeft(rest[close+1:], " \\\n"))
			if n == nil {
				t.Fatalf("kernel after __launch_bounds__ at %q", rest[:min(len(rest), 80)])
			}
			name = n[1]
		}
		// the body: from the first '{' after the parameter list to its match
		i, depth := m[1]-1, 0
		for ; i < len(src); i++ {
			if src[i] == '(' {
				depth++
			} else if src[i] == ')' {
				depth--
				if depth == 0 {
					break
				}
			}
		}
		j := i + 1
		for j < len(src) && src[j] != '{' && src[j] != ';' {
			j++
		}
		if j >= len(src) || src[j] == ';' {
			continue // a declaration
		}
		k, depth := j, 0
		for ; k < len(src); k++ {
			if src[k] == '{' {
				depth++
			} else if src[k] == '}' {
				depth--
				if depth == 0 {
					break
				}
			}
		}
		out = append(out, cuFunc{name: name, kernel: strings.HasPrefix(src[m[0]:], `extern "C"`), body: src[j:k]})
	}
	return out
}

// TestKernelsWaitBeforeTouchingBuffers reads the kernel sources: a
// kernel of a family in pdlFamilies must reach PDL_WAIT (directly or
// through a function it calls), and one outside them must not be listed;
// every listed family must exist. The GPU tests check the numbers.
func TestKernelsWaitBeforeTouchingBuffers(t *testing.T) {
	src := strings.Join([]string{kernelSource, modelKernelSource, gemvKernelSource, fusedKernelSource, attnKernelSource, tcKernelSource, prefillKernelSource, benchKernelSource}, "\n")
	fs := cuFuncs(t, src)
	waits := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, f := range fs {
			if waits[f.name] {
				continue
			}
			w := strings.Contains(f.body, "PDL_WAIT()") || strings.Contains(f.body, "PDL_ENTRY()")
			for callee := range waits {
				if regexp.MustCompile(`\b` + regexp.QuoteMeta(callee) + `\s*[<(]`).MatchString(f.body) {
					w = true
				}
			}
			if w {
				waits[f.name], changed = true, true
			}
		}
	}
	seen := map[string]bool{}
	kernels := 0
	for _, f := range fs {
		if !f.kernel {
			continue
		}
		kernels++
		fam, _, _ := strings.Cut(f.name, "_##")
		seen[fam] = true
		if pdlFamilies[fam] && !waits[f.name] {
			t.Errorf("kernel %s: family %s is launched with PDL but its body never reaches PDL_WAIT", f.name, fam)
		}
		if !pdlFamilies[fam] && waits[f.name] {
			t.Errorf("kernel %s waits (PDL_WAIT) but family %s is not in pdlFamilies: it launches the ordinary way", f.name, fam)
		}
	}
	if kernels < 20 {
		t.Fatalf("found %d kernels in the sources: the parser is broken", kernels)
	}
	for fam := range pdlFamilies {
		if !seen[fam] {
			t.Errorf("pdlFamilies lists %s, which no source defines", fam)
		}
	}
}

// TestGPUPDLCapable: on Hopper and later the kernels launch with
// programmatic dependent launch (the driver has cuLaunchKernelEx), so
// the other GPU tests check the kernels' waits.
func TestGPUPDLCapable(t *testing.T) {
	g, dev := openTestGPU(t)
	var major int
	err := dev.Do(func(cuda.Stream) error {
		d, err := g.drv.DeviceGet(dev.Ordinal())
		if err != nil {
			return err
		}
		major, err = g.drv.DeviceAttribute(d, cuda.AttrComputeCapabilityMajor)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := major >= 9; g.pdl != want {
		t.Fatalf("compute capability %d.x: PDL launches %v, want %v (cuLaunchKernelEx found: %v)", major, g.pdl, want, g.drv.HasLaunchEx())
	}
	t.Logf("compute capability %d.x: PDL launches %v", major, g.pdl)
}

// TestPreArg: a product reads its weights before its wait only when they
// are fixed, it launches with PDL and a kernel of the call came first.
func TestPreArg(t *testing.T) {
	for _, c := range []struct {
		name           string
		pdl, fixed     bool
		launchesBefore int
		want           int32
	}{
		{"fixed after a launch", true, true, 1, 1},
		{"first of its call", true, true, 0, 0},
		{"not fixed", true, false, 3, 0},
		{"no PDL", false, true, 3, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &GPU{fns: map[string]kernelFn{}, l: &fakeLauncher{}, pdl: c.pdl}
			g.addFn("add_bf16", 1)
			g.BeginCall()
			for range c.launchesBefore {
				if err := g.launchOn(0, "add_bf16", g.fns["add_bf16"], [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, nil); err != nil {
					t.Fatal(err)
				}
			}
			g.SetFixedWeights(c.fixed)
			if got := g.preArg(); got != c.want {
				t.Errorf("pre %d, want %d", got, c.want)
			}
			g.BeginCall()
			if got := g.preArg(); got != 0 {
				t.Errorf("pre %d at the start of the next call", got)
			}
		})
	}
}

// TestPDLWaitsLaunchedNames: every name the host builds for a product
// kernel (each batch length of the one-row kernels, each row bucket of
// the tensor-core ones) resolves to a family that launches with PDL, so
// a suffix cannot silently turn it off.
func TestPDLWaitsLaunchedNames(t *testing.T) {
	var names []string
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		for _, rk := range rowKinds {
			for _, u := range rowBatches[rk.nw] {
				names = append(names, rowName(rk.kind, dt, rk.nw, u))
			}
			for _, mt := range tcRowBuckets {
				names = append(names, tcName(rk.kind, dt, mt))
			}
		}
	}
	for _, n := range names {
		if !pdlWaits(n) {
			t.Errorf("%s launches without PDL", n)
		}
	}
}

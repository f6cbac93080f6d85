package kernels

import (
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/gpu/nvrtc/nvrtctest"
	"github.com/chorus-rt/chorus/tensor"
)

// spillsAllowed are the kernels that spill where ptxas places them
// (NVRTC 11.8, CI's; the GPU machines' NVRTC may place them otherwise),
// all off the default path: the CUDA-core products of 4 and 8 rows
// (GemvDefaultCoreRows is 1).
var spillsAllowed = regexp.MustCompile(`^gemv_nt_(f16|bf16)_m[48]$`)

// reports keeps each module's resource report for an architecture, so
// the tests of this file compile a module once (tc's takes 25 s on CI's
// two cores).
var reports struct {
	sync.Mutex
	m map[string]map[string]nvrtc.Resources
}

func report(c *nvrtc.Compiler, m module, arch string) (map[string]nvrtc.Resources, error) {
	key := m.file + "/" + arch
	reports.Lock()
	rep, ok := reports.m[key]
	reports.Unlock()
	if ok {
		return rep, nil
	}
	rep, err := c.Report(m.file, m.src, arch)
	if err != nil {
		return nil, err
	}
	reports.Lock()
	if reports.m == nil {
		reports.m = map[string]map[string]nvrtc.Resources{}
	}
	reports.m[key] = rep
	reports.Unlock()
	return rep, nil
}

// TestModulesCompile builds every kernel module of the package with
// NVRTC, no GPU needed, for the architecture it is tuned on (sm_90),
// the small ones also for the oldest the VM takes (sm_80): each
// compiles, defines every kernel its loader resolves, and no kernel but
// spillsAllowed spills registers to local memory (a spill in a streaming
// loop costs more than the occupancy it buys: the decode attention
// capped at 168 registers took 203 against 141 us, docs/performance.md).
func TestModulesCompile(t *testing.T) {
	if raceBuild {
		t.Skip("compiles CUDA C only; the run without -race covers it")
	}
	c := nvrtctest.Load(t)
	for _, m := range modules() {
		// sm_80 takes the other side of pdl.cuh's architecture guards,
		// which every module shares: checked on the small modules, the
		// three large ones (41 s of CI's CPU at sm_80) at sm_90 only.
		archs := []string{"sm_80", "sm_90"}
		if m.file == "chorus_vm_tc.cu" || m.file == "chorus_vm_gemv.cu" || m.file == "chorus_vm_bench.cu" {
			archs = archs[1:]
		}
		for _, arch := range archs {
			t.Run(m.file+"/"+arch, func(t *testing.T) {
				t.Parallel()
				rep, err := report(c, m, arch)
				if err != nil {
					t.Fatal(err)
				}
				nvrtctest.Check(t, m.file+" "+arch, rep, m.names, spillsAllowed.MatchString)
			})
		}
	}
}

// TestTCOccupancy: the tensor-core kernels of every row bucket fit the
// blocks a multiprocessor that planTC's split counts on, tcBlocksPerSM,
// by registers (64K a multiprocessor, 128 threads a block) and shared
// memory (228 KB, 1 KB a block reserved), so a split launch runs in one
// wave. Before x was shared through shared memory, tc_nt took 168
// registers at 32 rows and tc_nt3 248 (its three tiles inlined apart).
func TestTCOccupancy(t *testing.T) {
	if raceBuild {
		t.Skip("compiles CUDA C only; the run without -race covers it")
	}
	c := nvrtctest.Load(t)
	m := tcModule()
	rep, err := report(c, m, "sm_90")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"nt", "nt3", "gated"} {
		nw := tcNW(kind)
		for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
			for _, mt := range tcRowBuckets {
				name := tcName(kind, dt, mt)
				r, ok := rep[name]
				if !ok {
					t.Fatalf("no kernel %s", name)
				}
				byRegs := r.BlocksByRegisters(tcWarps * 32)
				bySmem := (228 << 10) / (tcSmem(nw, mt, tcSharedX(kind, mt)) + r.Shared + 1<<10)
				if want := tcBlocksPerSM(nw, mt); min(byRegs, bySmem) < want {
					t.Errorf("%s: %d registers and %d bytes of shared memory a block fit %d blocks a multiprocessor (registers %d, shared memory %d); the split plans %d",
						name, r.Registers, tcSmem(nw, mt, tcSharedX(kind, mt))+r.Shared, min(byRegs, bySmem), byRegs, bySmem, want)
				}
			}
		}
	}
}

// TestDecodeCarveout: the shared-memory configuration each dec_attn
// kernel prefers (decodeCarveout from NVRTC's register and shared counts,
// rounded up to one of the device's capacities as the driver does) holds
// the blocks a multiprocessor its registers allow (128 threads a block,
// 64K registers; 1 KiB a block reserved) and is the least capacity that
// does or the next (the rest stays L1), on an H200 (228 KiB), an A100
// (164) and an L40S (100); on the H200 two blocks of head dim 128 prefer
// 15%, as measured.
func TestDecodeCarveout(t *testing.T) {
	if raceBuild {
		t.Skip("compiles CUDA C only; the run without -race covers it")
	}
	rep, err := report(nvrtctest.Load(t), prefillModule(), "sm_90")
	if err != nil {
		t.Fatal(err)
	}
	for _, gpu := range []struct {
		name    string
		most    int   // KiB
		configs []int // KiB
	}{
		{"H200", 228, []int{0, 8, 16, 32, 64, 100, 132, 164, 196, 228}},
		{"A100", 164, []int{0, 8, 16, 32, 64, 100, 132, 164}},
		{"L40S", 100, []int{0, 8, 16, 32, 64, 100}},
	} {
		for _, name := range decodeKernelNames {
			r, ok := rep[name]
			if !ok {
				t.Fatalf("%s: no report", name)
			}
			blocks := min((64<<10)/(max(r.Registers, 1)*prefillWarps*32), 16)
			need := blocks * (r.Shared + 1<<10)
			pct := decodeCarveout(blocks, r.Shared, gpu.most<<10)
			got, fit := -1, -1 // the capacities the preference rounds up to, and the least that holds need
			for i, c := range gpu.configs {
				if got < 0 && c<<10 >= pct*(gpu.most<<10)/100 {
					got = i
				}
				if fit < 0 && c<<10 >= need {
					fit = i
				}
			}
			if got < 0 || fit < 0 || got < fit || got > fit+1 {
				t.Errorf("%s, %s: %d blocks need %d bytes; %d%% gives capacity %d of %v, want the least that holds them or the next", gpu.name, name, blocks, need, pct, got, gpu.configs)
			}
			if gpu.name == "H200" && strings.HasPrefix(name, "dec_attn_rope_") && strings.HasSuffix(name, "_d128_g8") && pct != 15 { // Llama-3-8B's kernel
				t.Errorf("%s on an H200: %d%%, the measured preference was 15%%", name, pct)
			}
		}
	}
}

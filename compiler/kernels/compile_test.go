package kernels

import (
	"regexp"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/gpu/nvrtc/nvrtctest"
	"github.com/chorus-rt/chorus/tensor"
)

// spillsAllowed are the kernels that spill where ptxas places them
// (NVRTC 11.8, CI's; the GPU machines' NVRTC may place them otherwise),
// all off the default path: the CUDA-core products of 4 and 8 rows
// (GemvDefaultCoreRows is 1) and the tensor-core gated pair of 32 rows
// (tcMaxRows is 16).
var spillsAllowed = regexp.MustCompile(`^(gemv_nt_(f16|bf16)_m[48]|tc_gated_(f16|bf16)_m32)$`)

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

// TestTCOccupancy: the tensor-core kernels of the default path (up to
// tcMaxRows rows) fit the blocks a multiprocessor that planTC's split
// counts on, tcBlocksPerSM, by registers (64K a multiprocessor, 128
// threads a block) and shared memory (228 KB, 1 KB a block reserved), so
// a split launch runs in one wave. At 32 rows (cuBLAS's) they do not at
// CI's NVRTC: tc_nt 168 registers (3 blocks for 4) and tc_nt3 248 (2).
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
		nw := 1
		if kind == "gated" {
			nw = 2
		}
		for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
			for _, mt := range tcRowBuckets {
				if mt > tcMaxRows {
					continue
				}
				name := tcName(kind, dt, mt)
				r, ok := rep[name]
				if !ok {
					t.Fatalf("no kernel %s", name)
				}
				byRegs := r.BlocksByRegisters(tcWarps * 32)
				bySmem := (228 << 10) / (tcSmem(nw) + r.Shared + 1<<10)
				if want := tcBlocksPerSM(nw); min(byRegs, bySmem) < want {
					t.Errorf("%s: %d registers and %d bytes of shared memory a block fit %d blocks a multiprocessor (registers %d, shared memory %d); the split plans %d",
						name, r.Registers, tcSmem(nw)+r.Shared, min(byRegs, bySmem), byRegs, bySmem, want)
				}
			}
		}
	}
}

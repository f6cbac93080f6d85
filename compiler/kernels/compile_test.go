package kernels

import (
	"regexp"
	"slices"
	"testing"

	"github.com/chorus-rt/chorus/gpu/nvrtc/nvrtctest"
)

// spillsAllowed are the kernels that spill where ptxas places them
// (NVRTC 11.8, CI's; the GPU machines' NVRTC may place them otherwise),
// all off the default path: the CUDA-core products of 4 and 8 rows
// (GemvDefaultCoreRows is 1) and the tensor-core gated pair of 32 rows
// (tcMaxRows is 16).
var spillsAllowed = regexp.MustCompile(`^(gemv_nt_(f16|bf16)_m[48]|tc_gated_(f16|bf16)_m32)$`)

// TestModulesCompile builds every kernel module of the package with
// NVRTC, no GPU needed, for the oldest architecture the VM takes (sm_80)
// and the one it is tuned on (sm_90): each compiles, defines every
// kernel its loader resolves, and no kernel but spillsAllowed spills
// registers to local memory (a spill in a streaming loop costs more than
// the occupancy it buys: the decode attention capped at 168 registers
// took 203 against 141 us, docs/performance.md).
func TestModulesCompile(t *testing.T) {
	if raceBuild {
		t.Skip("compiles CUDA C only; the run without -race covers it")
	}
	c := nvrtctest.Load(t)
	for _, m := range modules() {
		for _, arch := range []string{"sm_80", "sm_90"} {
			t.Run(m.file+"/"+arch, func(t *testing.T) {
				t.Parallel()
				rep, err := c.Report(m.file, m.src, arch)
				if err != nil {
					t.Fatal(err)
				}
				for _, name := range m.names {
					if _, ok := rep[name]; !ok {
						t.Errorf("%s: no kernel %s (the loader resolves it)", m.file, name)
					}
				}
				var spills []string
				for name, r := range rep {
					if (r.SpillStores > 0 || r.SpillLoads > 0) && !spillsAllowed.MatchString(name) {
						spills = append(spills, name)
					}
				}
				slices.Sort(spills)
				for _, name := range spills {
					t.Errorf("%s: %s spills: %+v", m.file, name, rep[name])
				}
			})
		}
	}
}

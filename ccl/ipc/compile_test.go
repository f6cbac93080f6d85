package ipc

import (
	"testing"

	"github.com/chorus-rt/chorus/gpu/nvrtc/nvrtctest"
)

// TestKernelsCompile builds kernels.cu with NVRTC, no GPU needed, for
// sm_80 and sm_90: it compiles, defines every kernel the AllReducer
// resolves, and none spills registers to local memory.
func TestKernelsCompile(t *testing.T) {
	c := nvrtctest.Load(t)
	for _, arch := range []string{"sm_80", "sm_90"} {
		t.Run(arch, func(t *testing.T) {
			rep, err := c.Report(kernelFile, kernelModuleSource(), arch)
			if err != nil {
				t.Fatal(err)
			}
			nvrtctest.Check(t, kernelFile+" "+arch, rep, kernelNames(), nil)
		})
	}
}

package ipc

import (
	"errors"
	"testing"

	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
)

// TestKernelsCompile builds kernels.cu with NVRTC, no GPU needed, for
// sm_80 and sm_90: it compiles, defines every kernel the AllReducer
// resolves, and none spills registers to local memory.
func TestKernelsCompile(t *testing.T) {
	c, err := nvrtc.Load()
	if err != nil {
		if !errors.Is(err, nvrtc.ErrNotLoaded) {
			t.Fatal(err)
		}
		gputest.SkipfNVRTC(t, "no NVRTC here: %v", err)
	}
	for _, arch := range []string{"sm_80", "sm_90"} {
		t.Run(arch, func(t *testing.T) {
			rep, err := c.Report(kernelFile, kernelModuleSource(), arch)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range kernelNames() {
				r, ok := rep[name]
				switch {
				case !ok:
					t.Errorf("no kernel %s (the AllReducer resolves it)", name)
				case r.SpillStores > 0 || r.SpillLoads > 0:
					t.Errorf("%s spills: %+v", name, r)
				}
			}
		})
	}
}

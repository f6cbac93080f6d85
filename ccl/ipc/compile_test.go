package ipc

import (
	"regexp"
	"strings"
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

// TestKernelScopes: the kernels whose barriers publish data (two-shot's
// middle barrier, push one-shot's) have GPU-scope release and acquire
// forms for ranks that share one GPU (FLAG_ONE_GPU) beside the
// system-scope ones; the one-shot kernel, whose barriers are all
// relaxed, has no GPU-scope barrier access at all (a run-time choice
// there cost it 1.30x at 32 MB with 4 ranks under MPS).
func TestKernelScopes(t *testing.T) {
	c := nvrtctest.Load(t)
	ptx, err := c.PTX(kernelFile, kernelModuleSource(), "compute_90")
	if err != nil {
		t.Fatal(err)
	}
	entry := regexp.MustCompile(`(?s)\.entry (\w+)\(.*?\n}\n`)
	gpu := regexp.MustCompile(`(ld|st)\.(relaxed|acquire|release)\.gpu\.`)
	seen := 0
	for _, m := range entry.FindAllStringSubmatch(ptx, -1) {
		name, body := m[1], m[0]
		n := len(gpu.FindAllString(body, -1))
		switch {
		case strings.HasPrefix(name, "oneshot_"):
			if n != 0 {
				t.Errorf("%s: %d GPU-scope barrier accesses, want none", name, n)
			}
		case strings.HasPrefix(name, "twoshot_"), strings.HasPrefix(name, "push_"):
			if !strings.Contains(body, "st.release.gpu.") || !strings.Contains(body, "ld.acquire.gpu.") ||
				!strings.Contains(body, "st.release.sys.") || !strings.Contains(body, "ld.acquire.sys.") {
				t.Errorf("%s: want both GPU- and system-scope release and acquire forms", name)
			}
		default:
			continue
		}
		seen++
	}
	if seen != len(kernelNames()) {
		t.Fatalf("checked %d kernels, kernelNames has %d", seen, len(kernelNames()))
	}
}

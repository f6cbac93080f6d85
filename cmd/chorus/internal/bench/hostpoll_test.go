package bench

import (
	"testing"

	"github.com/chorus-rt/chorus/gpu/nvrtc/nvrtctest"
)

// TestHostPollCompiles builds the host-memory poll kernel with NVRTC for
// sm_80 and sm_90, no GPU needed.
func TestHostPollCompiles(t *testing.T) {
	c := nvrtctest.Load(t)
	for _, arch := range []string{"sm_80", "sm_90"} {
		rep, err := c.Report("chorus_hostpoll.cu", hostPollSource, arch)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		nvrtctest.Check(t, "chorus_hostpoll.cu "+arch, rep, []string{"hostpoll"}, nil)
	}
}

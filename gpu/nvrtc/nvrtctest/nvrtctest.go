package nvrtctest

import (
	"errors"
	"testing"

	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
)

// Load returns the loaded NVRTC, or ends the test: a skip where the
// library is missing (a failure when CHORUS_REQUIRE_NVRTC=1 or a GPU is
// promised), a failure for any other error.
func Load(tb testing.TB) *nvrtc.Compiler {
	tb.Helper()
	c, err := nvrtc.Load()
	if err != nil {
		if !errors.Is(err, nvrtc.ErrNotLoaded) {
			tb.Fatal(err)
		}
		gputest.SkipfNVRTC(tb, "no NVRTC here: %v", err)
	}
	return c
}

package nvrtctest

import (
	"errors"
	"slices"
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

// Check fails tb for each of names that rep (one compile's report) does
// not define, and for each kernel of rep that spills registers to local
// memory unless spillOK (nil: none may) allows it; what names a
// message with the unit it came from.
func Check(tb testing.TB, what string, rep map[string]nvrtc.Resources, names []string, spillOK func(kernel string) bool) {
	tb.Helper()
	for _, name := range names {
		if _, ok := rep[name]; !ok {
			tb.Errorf("%s: no kernel %s (its loader resolves it)", what, name)
		}
	}
	var spills []string
	for name, r := range rep {
		if r.Spills() && (spillOK == nil || !spillOK(name)) {
			spills = append(spills, name)
		}
	}
	slices.Sort(spills)
	for _, name := range spills {
		tb.Errorf("%s: %s spills: %+v", what, name, rep[name])
	}
}

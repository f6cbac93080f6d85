package gputest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended instead of
// ending this one.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Log(args ...any)              { r.msg = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any)             { r.skipped, r.msg = true, fmt.Sprint(args...) }
func (r *recorder) Fatal(args ...any)            { r.failed, r.msg = true, fmt.Sprint(args...) }
func (r *recorder) Fatalf(f string, args ...any) { r.failed, r.msg = true, fmt.Sprintf(f, args...) }

// TestGate: without CHORUS_REQUIRE_GPU a missing GPU skips; with it, a
// test needing no more GPUs than promised fails, one needing more still
// skips; a value that is not a count fails, naming the variable.
func TestGate(t *testing.T) {
	have, _ := Count()
	need := have + 1 // more than this machine has, wherever it runs
	cases := []struct {
		env        string
		need       int
		skip, fail bool
		msgHas     string
	}{
		{"", need, true, false, "needs"},
		{"0", need, true, false, "needs"},
		{strconv.Itoa(need), need, false, true, EnvRequire + "=" + strconv.Itoa(need)},
		{strconv.Itoa(need + 3), need, false, true, "found"},
		{strconv.Itoa(need - 1), need, true, false, "needs"},
		{"yes", need, false, true, EnvRequire + `="yes"`},
		{"-1", need, false, true, "want a GPU count"},
	}
	for _, tc := range cases {
		t.Setenv(EnvRequire, tc.env)
		r := &recorder{}
		Require(r, tc.need)
		if r.skipped != tc.skip || r.failed != tc.fail || !strings.Contains(r.msg, tc.msgHas) {
			t.Errorf("%s=%q, need %d: skipped %v failed %v (%q); want skipped %v failed %v, naming %q",
				EnvRequire, tc.env, tc.need, r.skipped, r.failed, r.msg, tc.skip, tc.fail, tc.msgHas)
		}
	}
	// Skipf counts as needing one GPU.
	t.Setenv(EnvRequire, "1")
	r := &recorder{}
	Skipf(r, "no NCCL here: %v", "gone")
	if !r.failed || !strings.Contains(r.msg, "no NCCL here: gone") {
		t.Errorf("Skipf with %s=1: failed %v (%q), want a failure with the reason", EnvRequire, r.failed, r.msg)
	}
	t.Setenv(EnvRequire, "")
	r = &recorder{}
	Skipf(r, "no NCCL here: %v", "gone")
	if !r.skipped || r.msg != "no NCCL here: gone" {
		t.Errorf("Skipf unset: skipped %v (%q), want a skip with the reason", r.skipped, r.msg)
	}
	// Missing logs without the variable and fails with it.
	r = &recorder{}
	Missing(r, "no GPU: testing the fake only")
	if r.skipped || r.failed || r.msg != "no GPU: testing the fake only" {
		t.Errorf("Missing unset: skipped %v failed %v (%q), want a log line", r.skipped, r.failed, r.msg)
	}
	t.Setenv(EnvRequire, "1")
	r = &recorder{}
	Missing(r, "no GPU: testing the fake only")
	if !r.failed {
		t.Errorf("Missing with %s=1 did not fail", EnvRequire)
	}
}

// TestGateNVRTC: SkipfNVRTC skips unless CHORUS_REQUIRE_NVRTC is 1 or a
// GPU is promised, and rejects other values naming the variable.
func TestGateNVRTC(t *testing.T) {
	for _, tc := range []struct {
		nvrtc, gpu string
		skip, fail bool
		msgHas     string
	}{
		{"", "", true, false, "no NVRTC here"},
		{"0", "", true, false, "no NVRTC here"},
		{"1", "", false, true, EnvRequireNVRTC + "=1: no NVRTC here"},
		{"", "1", false, true, EnvRequire + "=1: no NVRTC here"},
		{"yes", "", false, true, EnvRequireNVRTC + `="yes": want 0 or 1`},
	} {
		t.Setenv(EnvRequireNVRTC, tc.nvrtc)
		t.Setenv(EnvRequire, tc.gpu)
		r := &recorder{}
		SkipfNVRTC(r, "no NVRTC here: %v", "gone")
		if r.skipped != tc.skip || r.failed != tc.fail || !strings.Contains(r.msg, tc.msgHas) {
			t.Errorf("%s=%q %s=%q: skipped %v failed %v (%q); want skipped %v failed %v, naming %q",
				EnvRequireNVRTC, tc.nvrtc, EnvRequire, tc.gpu, r.skipped, r.failed, r.msg, tc.skip, tc.fail, tc.msgHas)
		}
	}
}

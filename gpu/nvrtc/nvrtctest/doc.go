// Package nvrtctest loads NVRTC for the tests that compile kernels
// without a GPU: it skips them where libnvrtc is missing, or fails them
// under CHORUS_REQUIRE_NVRTC=1 (internal/testutil/gputest.SkipfNVRTC).
package nvrtctest

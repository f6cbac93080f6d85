// Package gputest is the gate of every GPU test in chorus. A test that
// cannot run for want of a GPU, its driver or a GPU library calls Require
// or Skipf instead of t.Skip: on a CPU machine (CI) they skip, saying
// why; with CHORUS_REQUIRE_GPU=N (scripts/gpu-check.sh sets it) they fail
// instead, for every test that needs at most N GPUs, so a GPU run where
// the GPU tests silently skipped cannot look green. A test that needs
// more GPUs than the run promises still skips.
//
// It finds GPUs through the CUDA driver directly (internal/sys/dl:
// cuInit and cuDeviceGetCount), so any package's tests can use it.
package gputest

package gputest

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/dl"
)

// EnvRequire names the variable that turns skips into failures: the
// number of GPUs the run promises ("1" on a one-GPU machine).
const EnvRequire = "CHORUS_REQUIRE_GPU"

// Promised is how many GPUs CHORUS_REQUIRE_GPU promises (0 when unset),
// and an error for a value that is not a count.
func Promised() (int, error) {
	v := os.Getenv(EnvRequire)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a GPU count (0 or more)", EnvRequire, v)
	}
	return n, nil
}

var count struct {
	once sync.Once
	n    int
	err  error
}

// Count is the number of GPUs the CUDA driver sees, or 0 and why not
// (no driver, cuInit failed). It asks the driver once per process.
func Count() (int, error) {
	count.once.Do(func() { count.n, count.err = probe() })
	return count.n, count.err
}

func probe() (int, error) {
	lib, err := dl.Open("CUDA driver", []string{"libcuda.so.1", "libcuda.so"}, []string{"cuInit", "cuDeviceGetCount"})
	if err != nil {
		return 0, err
	}
	c := dl.NewCaller(lib, func(fn string, status int32) error {
		return fmt.Errorf("%s: CUresult %d", fn, status)
	})
	if err := c.Call("cuInit", 0); err != nil {
		return 0, err
	}
	var n int32
	if err := c.Call("cuDeviceGetCount", uintptr(unsafe.Pointer(&n))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Require returns when this machine has at least n GPUs; otherwise the
// test skips, or fails when CHORUS_REQUIRE_GPU promises n or more.
func Require(tb testing.TB, n int) {
	tb.Helper()
	have, err := Count()
	if have >= n {
		return
	}
	why := fmt.Sprintf("needs %d GPU(s), found %d", n, have)
	if err != nil {
		why += fmt.Sprintf(" (%v)", err)
	}
	end(tb, n, why)
}

// Skipf ends a test that cannot run for want of a GPU or a GPU library
// (NVRTC, NCCL, cuBLAS) with the reason: a skip, or a failure when
// CHORUS_REQUIRE_GPU is set.
func Skipf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	end(tb, 1, fmt.Sprintf(format, args...))
}

func end(tb testing.TB, need int, why string) {
	tb.Helper()
	promised, err := Promised()
	switch {
	case err != nil:
		tb.Fatal(err)
	case promised >= need:
		tb.Fatalf("%s=%d: %s", EnvRequire, promised, why)
	default:
		tb.Skip(why)
	}
}

// EnvRequireNVRTC names the variable that makes the tests that need
// only NVRTC (kernels compiled, no GPU) fail instead of skipping where
// libnvrtc cannot be loaded: "1" (CI sets it; a GPU run promises NVRTC
// too).
const EnvRequireNVRTC = "CHORUS_REQUIRE_NVRTC"

// SkipfNVRTC skips a test that needs only NVRTC, saying why; it fails
// instead when CHORUS_REQUIRE_NVRTC is 1 or CHORUS_REQUIRE_GPU promises a
// GPU.
func SkipfNVRTC(tb testing.TB, format string, args ...any) {
	tb.Helper()
	why := fmt.Sprintf(format, args...)
	switch v := os.Getenv(EnvRequireNVRTC); v {
	case "", "0":
		end(tb, 1, why)
	case "1":
		tb.Fatalf("%s=1: %s", EnvRequireNVRTC, why)
	default:
		tb.Fatalf("%s=%q: want 0 or 1", EnvRequireNVRTC, v)
	}
}

// Missing is for a test that runs without a GPU but covers one when
// there is (a fake device, then the real one): it logs why the GPU part
// did not run, or fails when CHORUS_REQUIRE_GPU is set.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	why := fmt.Sprintf(format, args...)
	promised, err := Promised()
	switch {
	case err != nil:
		tb.Fatal(err)
	case promised >= 1:
		tb.Fatalf("%s=%d: %s", EnvRequire, promised, why)
	default:
		tb.Log(why)
	}
}

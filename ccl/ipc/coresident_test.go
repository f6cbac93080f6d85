package ipc

import (
	"context"
	"errors"
	"testing"
)

func gpuA() [16]byte { return [16]byte{0xa} }
func gpuB() [16]byte { return [16]byte{0xb} }

// TestPlaceRanks: grid limits for ranks sharing a GPU, alone, time-sliced
// and under MPS with and without an active thread percentage.
func TestPlaceRanks(t *testing.T) {
	h100 := func(u [16]byte, mps bool, active, bps int) GPUShare {
		return GPUShare{UUID: u, MPS: mps, SMs: 132, ActiveSMs: active, BlocksPerSM: bps}
	}
	cases := []struct {
		name     string
		gs       []GPUShare
		perGPU   []int
		blocks   int
		mps, ts  bool
		errNamed string
	}{
		{"one rank per GPU", []GPUShare{h100(gpuA(), true, 0, 2), h100(gpuB(), true, 0, 2)}, []int{1, 1}, 0, false, false, ""},
		{"unknown devices are alone", []GPUShare{{SMs: 132, BlocksPerSM: 2}, {SMs: 132, BlocksPerSM: 2}}, []int{1, 1}, 0, false, false, ""},
		{"time-sliced: no limit", []GPUShare{h100(gpuA(), false, 0, 2), h100(gpuA(), false, 0, 2)}, []int{2, 2}, 0, false, true, ""},
		{"one rank not under MPS", []GPUShare{h100(gpuA(), true, 0, 2), h100(gpuA(), false, 0, 2)}, []int{2, 2}, 0, false, true, ""},
		{"2 ranks under MPS", []GPUShare{h100(gpuA(), true, 0, 2), h100(gpuA(), true, 0, 2)}, []int{2, 2}, 66, true, false, ""},
		{"4 ranks under MPS", []GPUShare{h100(gpuA(), true, 0, 4), h100(gpuA(), true, 0, 4), h100(gpuA(), true, 0, 4), h100(gpuA(), true, 0, 4)}, []int{4, 4, 4, 4}, 33, true, false, ""},
		{"active thread percentage", []GPUShare{h100(gpuA(), true, 20, 2), h100(gpuA(), true, 20, 2)}, []int{2, 2}, 20, true, false, ""},
		{"percentage above the share", []GPUShare{h100(gpuA(), true, 100, 2), h100(gpuA(), true, 100, 2)}, []int{2, 2}, 66, true, false, ""},
		{"one block a multiprocessor whatever fits", []GPUShare{h100(gpuA(), true, 0, 1), h100(gpuA(), true, 0, 3)}, []int{2, 2}, 66, true, false, ""},
		{"shared and alone", []GPUShare{h100(gpuA(), true, 0, 2), h100(gpuA(), true, 0, 2), h100(gpuB(), true, 0, 2)}, []int{2, 2, 1}, 66, true, false, ""},
		{"nothing fits", []GPUShare{h100(gpuA(), true, 0, 0), h100(gpuA(), true, 0, 2)}, []int{2, 2}, 0, true, false, "rank 0 shares its GPU with ranks [0 1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := PlaceRanks(c.gs)
			if c.errNamed != "" {
				if !errors.Is(err, ErrNotCoResident) || !contains(err.Error(), c.errNamed) || !contains(err.Error(), "MPS") {
					t.Fatalf("error %v, want ErrNotCoResident naming %q", err, c.errNamed)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Blocks != c.blocks || s.MPS != c.mps || s.TimeSliced != c.ts || !equalInts(s.PerGPU, c.perGPU) {
				t.Errorf("got %+v, want blocks %d, MPS %v, time-sliced %v, per GPU %v", s, c.blocks, c.mps, c.ts, c.perGPU)
			}
			if s.Shared() != (c.mps || c.ts) {
				t.Errorf("Shared() = %v", s.Shared())
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestGPUShareEncoding(t *testing.T) {
	for _, g := range []GPUShare{{}, {UUID: gpuA(), MPS: true, SMs: 132, ActiveSMs: 26, BlocksPerSM: 4}, {UUID: gpuB(), SMs: 70000, BlocksPerSM: 1}} {
		b := make([]byte, GPUShareBytes)
		g.Encode(b)
		got := DecodeGPUShare(b)
		want := g
		want.SMs = min(want.SMs, 0xffff)
		if got != want {
			t.Errorf("round trip of %+v gave %+v", g, got)
		}
	}
}

// TestDescribeGPU: the fake driver's device, MPS state, context SMs and
// the least occupancy of the kernels.
func TestDescribeGPU(t *testing.T) {
	f := &fakeDriver{uuid: gpuA(), mps: true, activeSMs: 33, bps: 3}
	g, err := DescribeGPU(f, 0, []Kernel{{Fn: 1, Threads: 512}, {Fn: 2, Threads: 512}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (GPUShare{UUID: gpuA(), MPS: true, SMs: 132, ActiveSMs: 33, BlocksPerSM: 3}); g != want {
		t.Errorf("got %+v, want %+v", g, want)
	}
	// A refused affinity query (no MPS) means every SM.
	g, err = DescribeGPU(&fakeDriver{}, 0, nil)
	if err != nil || g.ActiveSMs != 0 || g.MPS || g.SMs != 132 {
		t.Errorf("plain device: %+v, %v", g, err)
	}
}

// TestAllReducerSharedGPU: two ranks whose fakes report one GPU under
// MPS get grids that fit side by side (2 blocks per SM x 132 SMs / 2
// ranks = 132); the same without MPS, or on two GPUs, keep the default
// (2 x SMs) and the push grid of 32.
func TestAllReducerSharedGPU(t *testing.T) {
	cases := []struct {
		name            string
		u0, u1          [16]byte
		mps             bool
		active, bps     int
		maxBlocks, push int
	}{
		{"two GPUs", gpuA(), gpuB(), true, 0, 2, 264, 32},
		{"time-sliced", gpuA(), gpuA(), false, 0, 2, 264, 32},
		{"MPS", gpuA(), gpuA(), true, 0, 2, 66, 32},
		{"MPS at 10%", gpuA(), gpuA(), true, 13, 2, 13, 13},
		{"MPS, one block per SM at 5%", gpuA(), gpuA(), true, 7, 1, 7, 7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			as := setupRanks(t, 2)
			drv := []*fakeDriver{{uuid: c.u0, mps: c.mps, activeSMs: c.active, bps: c.bps}, {uuid: c.u1, mps: c.mps, activeSMs: c.active, bps: c.bps}}
			rs := make([]*AllReducer, 2)
			errs := onAll(as, func(q int, a *Allocator) error {
				var err error
				rs[q], err = newAllReducer(context.Background(), a, nil, Options{}, drv[q], drv[q].compile)
				return err
			})
			for q, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", q, err)
				}
				defer rs[q].Close()
				if rs[q].opts.MaxBlocks != c.maxBlocks || rs[q].pushGrid != c.push {
					t.Errorf("rank %d: max blocks %d, push grid %d; want %d, %d (%+v)", q, rs[q].opts.MaxBlocks, rs[q].pushGrid, c.maxBlocks, c.push, rs[q].Sharing())
				}
			}
		})
	}
	// Not one block of rank 1 fits: both ranks refuse at set-up, naming the cause.
	as := setupRanks(t, 2)
	drv := []*fakeDriver{{uuid: gpuA(), mps: true, bps: 2}, {uuid: gpuA(), mps: true, bps: -1}}
	rs := make([]*AllReducer, 2)
	errs := onAll(as, func(q int, a *Allocator) error {
		var err error
		rs[q], err = newAllReducer(context.Background(), a, nil, Options{}, drv[q], drv[q].compile)
		return err
	})
	for q, err := range errs {
		if !errors.Is(err, ErrNotCoResident) {
			t.Errorf("rank %d: %v, want ErrNotCoResident", q, err)
		}
		if rs[q] != nil {
			rs[q].Close()
		}
	}
	for q, d := range drv {
		if left := d.left(); left != "" {
			t.Errorf("rank %d keeps %s", q, left)
		}
	}
}

// TestUsePDL: the all-reduce kernels take early launches only on Hopper
// and later, with cuLaunchKernelEx, and with every rank alone on its GPU.
func TestUsePDL(t *testing.T) {
	alone := Sharing{PerGPU: []int{1, 1}}
	for _, c := range []struct {
		name     string
		major    int
		launchEx bool
		s        Sharing
		want     bool
	}{
		{"hopper", 9, true, alone, true},
		{"blackwell", 10, true, Sharing{PerGPU: []int{1, 1, 1, 1}}, true},
		{"ampere", 8, true, alone, false},
		{"no_launch_ex", 9, false, alone, false},
		{"shared_mps", 9, true, Sharing{PerGPU: []int{2, 2}, MPS: true}, false},
		{"shared_time_sliced", 9, true, Sharing{PerGPU: []int{1, 2, 2}, TimeSliced: true}, false},
	} {
		if got := usePDL(c.major, c.launchEx, c.s); got != c.want {
			t.Errorf("%s: usePDL = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestOneGPU: the kernels' barrier words are GPU-scope accesses only where
// every rank runs on the rank's own GPU.
func TestOneGPU(t *testing.T) {
	for _, c := range []struct {
		name   string
		perGPU []int
		me     int
		want   bool
	}{
		{"alone", []int{1}, 0, true},
		{"two_on_one", []int{2, 2}, 1, true},
		{"four_on_one", []int{4, 4, 4, 4}, 3, true},
		{"two_gpus", []int{1, 1}, 0, false},
		{"two_of_three_share", []int{2, 2, 1}, 0, false},
		{"the_one_apart", []int{2, 2, 1}, 2, false},
		{"pairs_on_two_gpus", []int{2, 2, 2, 2}, 0, false},
		{"no_rank", []int{2, 2}, 2, false},
	} {
		if got := (Sharing{PerGPU: c.perGPU}).OneGPU(c.me); got != c.want {
			t.Errorf("%s: Sharing{PerGPU: %v}.OneGPU(%d) = %v, want %v", c.name, c.perGPU, c.me, got, c.want)
		}
	}
}

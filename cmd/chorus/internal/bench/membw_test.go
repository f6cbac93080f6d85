package bench

import (
	"math"
	"testing"
)

func TestBoundFrac(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name     string
		bench    string
		n        int
		size     int64
		timeUs   float64
		gbs      float64
		want     float64
		wantWire float64 // boundBytes
	}{
		// 2 ranks, 1 MB: 4 MB of traffic at 10 GB/s is 419.4304 us.
		{"allreduce 2 ranks at the bound", "allreduce", 2, mb, 419.4304, 10, 1, 4 * mb},
		{"allreduce 2 ranks, twice the bound's time", "allreduce", 2, mb, 838.8608, 10, 0.5, 4 * mb},
		{"allreduce 8 ranks", "allreduce", 8, 16 * mb, 16 * 16 * mb / 1e4, 10, 1, 16 * 16 * mb},
		{"allgather 4 ranks", "allgather", 4, 4 * mb, 5 * 4 * mb / 1e4, 10, 1, 5 * 4 * mb},
		{"reducescatter 4 ranks", "reducescatter", 4, mb, 5 * mb / 2e4, 20, 1, 5 * mb},
		{"broadcast 2 ranks", "broadcast", 2, mb, 3 * mb / 1e4, 10, 1, 3 * mb},
		{"no bandwidth: no fraction", "allreduce", 2, mb, 100, 0, 0, 4 * mb},
		{"no time: no fraction", "allreduce", 2, mb, 0, 10, 0, 4 * mb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := boundBytes(tc.bench, tc.n, tc.size); got != tc.wantWire {
				t.Fatalf("boundBytes = %v, want %v", got, tc.wantWire)
			}
			if got := BoundFrac(tc.bench, tc.n, tc.size, tc.timeUs, tc.gbs); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("BoundFrac = %v, want %v", got, tc.want)
			}
		})
	}
}

// MemBW fills every field (no assertion on the rates' values).
func TestMemBWRuns(t *testing.T) {
	m := MemBW(2, 1<<20)
	if m.Bench != "membw" || m.Threads != 2 || m.ArrayBytes != 1<<20 {
		t.Fatalf("unexpected result %+v", m)
	}
	if !(m.CopyGBs > 0) || !(m.TriadGBs > 0) || m.Bound() != max(m.CopyGBs, m.TriadGBs) {
		t.Fatalf("rates not measured: %+v", m)
	}
}

func TestPathCode(t *testing.T) {
	for in, want := range map[string]int{"direct": 1, "cma": 2, "staged: disabled": 3, "staged": 3, "": 0, "other": 0,
		"shm": 4, "mixed: 1 of 3 peer buffers read with process_vm_readv": 5,
		"inline": 6, "gathered": 7, "multi-ring ring": 8, "multi-ring rhd": 9, "leader ring": 10, "leader rhd": 11, "carried": 12, "multi-ring ring, 8 groups": 8, "leader ring, 4 stripes": 10} {
		if got := pathCode(in); got != want {
			t.Errorf("pathCode(%q) = %d, want %d", in, got, want)
		}
	}
}

package shmem

import (
	"testing"
	"time"
)

func TestPausesFor(t *testing.T) {
	for _, tc := range []struct {
		per  time.Duration
		want uint32
	}{
		{0, 16},  // a clock too coarse to measure
		{1, 16},  // capped
		{4, 13},  // old Intel cores: about 10 cycles
		{25, 2},  // recent AMD: 65 cycles at 2.6 GHz
		{50, 1},  // Skylake and later: 140 cycles
		{200, 1}, // at least one
		{time.Microsecond, 1},
	} {
		if got := PausesFor(tc.per); got != tc.want {
			t.Errorf("PausesFor(%v) = %d, want %d", tc.per, got, tc.want)
		}
	}
	if n := PollPauses(); n < 1 || n > 16 {
		t.Fatalf("PollPauses() = %d, want 1..16", n)
	}
}

package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	us := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * 1e3)
		}
		return out
	}
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100 .. 1
	}
	for _, tc := range []struct {
		name string
		laps []time.Duration
		per  int
		want stats
	}{
		{"empty", nil, 1, stats{}},
		{"one", us(7), 1, stats{mean: 7, p50: 7, p99: 7, max: 7, first: 7}},
		// A single stall moves the mean and the max, not the median.
		{"stall", us(5, 5, 5, 505), 1, stats{mean: 130, p50: 5, p99: 505, max: 505, first: 5}},
		// nearest rank: p50 of 1..100 is 50, p99 is 99; the first lap
		// (100) is kept before the sort
		{"hundred", us(hundred...), 1, stats{mean: 50.5, p50: 50, p99: 99, max: 100, first: 100}},
		// graph replays of 10 calls: per-call values
		{"per", us(100, 200), 10, stats{mean: 15, p50: 10, p99: 20, max: 20, first: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.laps, tc.per); got != tc.want {
				t.Fatalf("summarize = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMedianRow(t *testing.T) {
	rows := []CollectiveResult{
		{Bytes: 1000, TimeUs: 10, P50Us: 9, P99Us: 30, MaxUs: 900, FirstUs: 7, B2BUs: 6, Wrong: 1},
		{Bytes: 1000, TimeUs: 50, P50Us: 8, P99Us: 12, MaxUs: 20, FirstUs: 40, B2BUs: 30},
		{Bytes: 1000, TimeUs: 11, P50Us: 10, P99Us: 13, MaxUs: 25, FirstUs: 9, B2BUs: 5, Wrong: 2},
	}
	got := medianRow(rows, CollectiveConfig{}, 1)
	want := CollectiveResult{Bytes: 1000, TimeUs: 11, P50Us: 9, P99Us: 13, MaxUs: 25, FirstUs: 9, B2BUs: 6, Wrong: 3, Rounds: 3, AlgBW: 1000 / 11.0 / 1e3, BusBW: 1000 / 11.0 / 1e3}
	if got != want {
		t.Fatalf("medianRow = %+v\nwant %+v", got, want)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("median of 1..4 = %v", m)
	}
}

func TestWriteLaps(t *testing.T) {
	t.Setenv(EnvLaps, "")
	if err := writeLaps(0, "allreduce", 8, []time.Duration{time.Microsecond}); err != nil {
		t.Fatalf("unset: %v", err)
	}
	dir := t.TempDir()
	t.Setenv(EnvLaps, dir)
	if err := writeLaps(3, "allreduce", 1024, []time.Duration{1500 * time.Nanosecond, 2 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "allreduce-1024-w3-*.txt"))
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "# worker 3 allreduce 1024 bytes") || lines[1] != "1.5" || lines[2] != "2000.0" {
		t.Fatalf("laps file:\n%s", b)
	}
	t.Setenv(EnvLaps, filepath.Join(dir, "missing"))
	if err := writeLaps(0, "allreduce", 8, []time.Duration{time.Microsecond}); err == nil || !strings.Contains(err.Error(), EnvLaps) {
		t.Fatalf("missing folder: %v", err)
	}
}

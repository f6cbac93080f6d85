package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MemBWResult is the host's memory bandwidth as a STREAM-like benchmark
// measures it: copy (c = a) and triad (a = b + q*c) over float64 arrays
// far larger than the last-level caches, every CPU working on its own
// slice, best of several repetitions. Bytes are counted as STREAM does:
// 16 per element for copy, 24 for triad (write-allocate traffic is not
// counted).
type MemBWResult struct {
	Bench      string  `json:"bench"` // "membw"
	Threads    int     `json:"threads"`
	ArrayBytes int64   `json:"array_bytes"`
	CopyGBs    float64 `json:"copy_gbs"`
	TriadGBs   float64 `json:"triad_gbs"`
}

// Bound is the bandwidth that collective results are compared with: the
// better of copy and triad.
func (m MemBWResult) Bound() float64 { return max(m.CopyGBs, m.TriadGBs) }

// MemBW measures with threads goroutines (0: one per CPU) and arrays of
// arrayBytes each (0: four times the last-level caches, at least 64 MiB).
func MemBW(threads int, arrayBytes int64) MemBWResult {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	if arrayBytes <= 0 {
		arrayBytes = max(64<<20, 4*llcBytes())
	}
	n := int(arrayBytes / 8)
	a, b, c := make([]float64, n), make([]float64, n), make([]float64, n)
	run := func(fn func(lo, hi int)) time.Duration {
		per := (n + threads - 1) / threads
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range threads {
			lo, hi := min(n, i*per), min(n, (i+1)*per)
			wg.Add(1)
			go func() { defer wg.Done(); fn(lo, hi) }()
		}
		wg.Wait()
		return time.Since(t0)
	}
	// First touch on the threads that use the pages (NUMA placement).
	run(func(lo, hi int) { fill(a[lo:hi], b[lo:hi], c[lo:hi]) })
	best := func(fn func(lo, hi int)) time.Duration {
		d := time.Duration(1 << 62)
		for range 5 {
			d = min(d, run(fn))
		}
		return d
	}
	tc := best(func(lo, hi int) { copy(c[lo:hi], a[lo:hi]) })
	const q = 3.0
	tt := best(func(lo, hi int) { triad(a[lo:hi], b[lo:hi], c[lo:hi], q) })
	gbs := func(bytes float64, d time.Duration) float64 { return bytes / d.Seconds() / 1e9 }
	return MemBWResult{Bench: "membw", Threads: threads, ArrayBytes: arrayBytes,
		CopyGBs: gbs(16*float64(n), tc), TriadGBs: gbs(24*float64(n), tt)}
}

// fill and triad are the measured loops. Each goroutine owns its range
// of the arrays, so the race detector has nothing to find in them; its
// instrumentation of every element made the measurement most of a race
// test run.
//
//go:norace
func fill(a, b, c []float64) {
	for i := range a {
		a[i], b[i], c[i] = 1, 2, 0
	}
}

//go:norace
func triad(x, y, z []float64, q float64) {
	for i := range x {
		x[i] = y[i] + q*z[i]
	}
}

// llcBytes sums the distinct level-3 caches of the host (0 if unknown).
func llcBytes() int64 {
	seen := map[string]bool{}
	var total int64
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*")
	for _, d := range dirs {
		if lvl, _ := os.ReadFile(filepath.Join(d, "level")); strings.TrimSpace(string(lvl)) != "3" {
			continue
		}
		shared, _ := os.ReadFile(filepath.Join(d, "shared_cpu_list"))
		if seen[string(shared)] {
			continue
		}
		seen[string(shared)] = true
		sz, _ := os.ReadFile(filepath.Join(d, "size"))
		s := strings.TrimSpace(string(sz))
		mult := int64(1)
		switch {
		case strings.HasSuffix(s, "K"):
			mult, s = 1<<10, strings.TrimSuffix(s, "K")
		case strings.HasSuffix(s, "M"):
			mult, s = 1<<20, strings.TrimSuffix(s, "M")
		}
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			total += v * mult
		}
	}
	return total
}

// WriteMemBW prints the measurement as a comment line of a table.
func WriteMemBW(w io.Writer, m MemBWResult) {
	fmt.Fprintf(w, "# host memory bandwidth (STREAM-like, %d threads, %d MiB arrays): copy %.1f GB/s, triad %.1f GB/s\n",
		m.Threads, m.ArrayBytes>>20, m.CopyGBs, m.TriadGBs)
}

// boundBytes is the least memory traffic, reads plus writes, any
// algorithm needs for one call of a collective of size bytes over n ranks
// on one host (size as in CollectiveResult.Bytes): every input read once,
// every output written once.
//
//	allreduce      n inputs of S, n outputs of S:       2nS
//	allgather      n inputs of S/n, n outputs of S:     (n+1)S
//	reducescatter  n inputs of S, n outputs of S/n:     (n+1)S
//	broadcast      one input of S, n outputs of S:      (n+1)S
func boundBytes(name string, n int, size int64) float64 {
	s := float64(size)
	if name == "allreduce" {
		return 2 * float64(n) * s
	}
	return float64(n+1) * s
}

// BoundFrac is the fraction of the memory-bandwidth bound a collective
// reached: (boundBytes / bandwidth) / measured time. Above 1 the data
// stayed in caches, which the bound does not model.
func BoundFrac(name string, n int, size int64, timeUs, gbs float64) float64 {
	if timeUs <= 0 || gbs <= 0 {
		return 0
	}
	return boundBytes(name, n, size) / (gbs * 1e3) / timeUs
}

package tsc

import (
	"testing"
	"time"
)

var sink int64

// BenchmarkRDTSC is the bare counter read.
func BenchmarkRDTSC(b *testing.B) {
	for b.Loop() {
		sink += int64(rdtsc())
	}
}

// BenchmarkClock is a Clock's read (the counter, the conversion, an OS
// read every AnchorEvery reads).
func BenchmarkClock(b *testing.B) {
	start := time.Now()
	c := New(func() int64 { return int64(time.Since(start)) })
	for b.Loop() {
		sink += c.Now()
	}
}

// BenchmarkSince is the OS clock a Clock replaces (vDSO).
func BenchmarkSince(b *testing.B) {
	start := time.Now()
	for b.Loop() {
		sink += int64(time.Since(start))
	}
}

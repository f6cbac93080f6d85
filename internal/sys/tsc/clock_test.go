package tsc

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fakeClock is a TSC at 3 ticks per ns and an OS clock, both advanced
// by the test.
type fakeClock struct {
	ticks  uint64
	ns     int64
	osRead int
}

func (f *fakeClock) advance(ns int64) { f.ns += ns; f.ticks += uint64(3 * ns) }

func newFakeTSC(f *fakeClock) *Clock {
	return &Clock{on: true, tick: func() uint64 { return f.ticks }, os: func() int64 { f.osRead++; return f.ns }}
}

// TestTSCClock: the clock reads the OS clock until it has calibrated
// over CalibrateNS, then estimates from the counter, exactly for a
// steady counter; it reads the OS clock again every AnchorEvery events
// and after AnchorMaxNS, and when the counter goes back; it never
// returns less than before.
func TestTSCClock(t *testing.T) {
	f := &fakeClock{ticks: 1 << 40, ns: 1 << 50}
	c := newFakeTSC(f)
	if got := c.Now(); got != f.ns || f.osRead != 1 {
		t.Fatalf("first read: %d (OS reads %d), want %d from the OS clock", got, f.osRead, f.ns)
	}
	f.advance(CalibrateNS / 2)
	c.Now()
	if c.rate != 0 {
		t.Fatal("calibrated before CalibrateNS")
	}
	f.advance(CalibrateNS)
	c.Now()
	if c.rate == 0 {
		t.Fatal("not calibrated after CalibrateNS")
	}
	reads := f.osRead
	for i := range AnchorEvery - 1 {
		f.advance(1000)
		if got := c.Now(); got != f.ns {
			t.Fatalf("estimate %d: %d, want %d", i, got, f.ns)
		}
	}
	if f.osRead != reads {
		t.Fatalf("%d OS reads in %d events after an anchor", f.osRead-reads, AnchorEvery-1)
	}
	f.advance(1000)
	c.Now()
	if f.osRead != reads+1 {
		t.Fatalf("no OS read after %d events", AnchorEvery)
	}
	// Long idle: re-anchored, not extrapolated.
	f.advance(AnchorMaxNS + 1)
	reads = f.osRead
	if got := c.Now(); got != f.ns || f.osRead != reads+1 {
		t.Fatalf("after %d ns idle: %d (OS reads +%d), want %d from the OS clock", AnchorMaxNS+1, got, f.osRead-reads, f.ns)
	}
	// The OS clock behind the estimates (a slewed clock, a late
	// anchor): timestamps do not go back.
	last := c.Now()
	f.ns -= 5000
	for range AnchorEvery + 2 {
		if got := c.Now(); got < last {
			t.Fatalf("time went back: %d after %d", got, last)
		} else {
			last = got
		}
	}
	// A pair read across a descheduling (the counter moved 1 ms during
	// the OS read): used for that timestamp, not as an anchor.
	f.advance(10_000_000 + 1)
	anchorTicks, anchorNS, rate := c.tb, c.nsb, c.rate
	wall := c.os
	c.os = func() int64 { f.ticks += 3_000_000; return wall() }
	c.Now()
	c.os = wall
	if c.tb != anchorTicks || c.nsb != anchorNS || c.rate != rate {
		t.Fatal("a pair with the counter 1 ms apart became the anchor")
	}
	// A counter below the anchor (another core's, unsynchronized):
	// read the OS clock.
	f.ticks = c.tb - 10
	reads = f.osRead
	c.Now()
	if f.osRead != reads+1 {
		t.Fatal("a counter below the anchor was extrapolated")
	}
}

// TestTSCClockOff: with the TSC off, every read is the OS clock.
func TestTSCClockOff(t *testing.T) {
	f := &fakeClock{ns: 77}
	c := newFakeTSC(f)
	c.on = false
	for range 3 {
		if c.Now() != 77 {
			t.Fatal("off: not the OS clock")
		}
	}
	if f.osRead != 3 {
		t.Fatalf("off: %d OS reads for 3 events", f.osRead)
	}
}

func TestChoose(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tsc, kvm := write("tsc", "tsc\n"), write("kvm", "kvm-clock\n")
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		env, file string
		want      bool
	}{
		{"", tsc, haveTSC},
		{"auto", tsc, haveTSC},
		{"", kvm, false},
		{"", missing, false},
		{"os", tsc, false},
		{"tsc", kvm, haveTSC},
		{"bogus", tsc, false},
	} {
		if got := choose(tc.env, tc.file); got != tc.want {
			t.Errorf("%s=%q, clocksource %s: tsc=%v, want %v", Env, tc.env, filepath.Base(tc.file), got, tc.want)
		}
	}
}

// TestNowAgreesWithOS: the real counter, calibrated, stays between
// Now readings taken around it (loose: an estimate may lead by a little;
// the check is that ticks became Now's nanoseconds, not their size).
func TestNowAgreesWithOS(t *testing.T) {
	if !haveTSC {
		t.Skip("no TSC on this architecture")
	}
	start := time.Now()
	Now := func() int64 { return int64(time.Since(start)) }
	c := &Clock{on: true, os: Now}
	c.Now()
	for c.rate == 0 {
		c.Now() // calibrates after CalibrateNS of real time
	}
	const slack = 50_000_000 // 50 ms: preemption between the two reads of an anchor
	for range 1000 {
		before := Now()
		got := c.Now()
		after := Now()
		if got < before-slack || got > after+slack {
			t.Fatalf("TSC estimate %d outside [%d, %d] by more than %d ns", got, before, after, slack)
		}
	}
}

package tsc

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/chorus-rt/chorus/internal/config"
)

// Env chooses the clock of the flight recorder and of benchmark
// stopwatches: "tsc" (the time-stamp counter, calibrated against the OS
// clock), "os" (the OS clock on every read), or unset/"auto": tsc where
// the kernel itself keeps time with the counter (clocksource "tsc":
// constant rate, synchronized across cores), os elsewhere. Any other
// value is reported once on stderr, and the clock is os.
const Env = "CHORUS_CLOCK"

const clocksourceFile = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

var (
	once    sync.Once
	enabled bool
)

// Enabled reports whether Clocks of this process read the counter
// (decided once, from Env and the kernel's clocksource).
func Enabled() bool {
	once.Do(func() { enabled = choose(config.Process().Get(config.Clock), clocksourceFile) })
	return enabled
}

// Source names the clock Clocks use in this process: "tsc" or "os" (for
// benchmark headers and reports).
func Source() string {
	if Enabled() {
		return "tsc"
	}
	return "os"
}

// choose decides from the variable's value and the clocksource file.
func choose(v, sourceFile string) bool {
	switch v {
	case "os":
		return false
	case "tsc":
		if !haveTSC {
			fmt.Fprintf(os.Stderr, "chorus: %s=tsc: no time-stamp counter on this architecture; using the OS clock\n", Env)
		}
		return haveTSC
	case "", "auto":
	default:
		fmt.Fprintf(os.Stderr, "chorus: %s=%q is not tsc, os or auto; using the OS clock\n", Env, v)
		return false
	}
	if !haveTSC {
		return false
	}
	b, err := os.ReadFile(sourceFile)
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
}

// Why: the OS clock goes through the vDSO, about 25 ns on the 2-vCPU VM
// (more with kvm-clock); the counter is read in a few ns, and a worker
// reads the time about four times per command and per collective.
const (
	// AnchorEvery: a Clock reads the OS clock again after this many
	// reads (the first counts) ...
	AnchorEvery = 256
	// ... or when AnchorMaxNS have passed since the last anchor, so an
	// estimate never extrapolates far (the counter and an NTP-slewed OS
	// clock may differ in rate by up to 500 ppm).
	AnchorMaxNS = 10_000_000
	// CalibrateNS: the rate is first measured over this long; until
	// then every read is the OS clock.
	CalibrateNS = 1_000_000
	// An anchor's OS reading must lie within pairMaxNS of the counter
	// readings around it (pairMaxTicks before calibration: 20 us at
	// 5 GHz), or it was descheduled in between and is not used.
	pairMaxNS    = 20_000
	pairMaxTicks = 100_000
)

// Clock turns counter readings into the nanoseconds of its OS clock. It
// is one reader's (not safe for concurrent use). The rate is measured
// from the first anchor to the latest, so it gets more precise the
// longer the clock runs; each estimate starts from the latest anchor.
// Its readings never decrease.
type Clock struct {
	on       bool
	os       func() int64 // the OS clock, ns
	t0       uint64       // first anchor: counter and ns
	ns0      int64
	tb       uint64 // latest anchor
	nsb      int64
	maxTicks uint64 // AnchorMaxNS in ticks (0 until calibrated)
	rate     uint64 // ns per tick in 32.32 fixed point; 0 until calibrated
	n        int    // reads since the latest anchor, its own included
	last     int64  // the latest reading handed out

	tick func() uint64 // tests: the counter (nil: rdtsc)
}

// New is a Clock on the OS clock osNow (ns; non-decreasing), reading the
// counter if Enabled.
func New(osNow func() int64) Clock { return Clock{on: Enabled(), os: osNow} }

// Now is the current time in the OS clock's nanoseconds.
func (c *Clock) Now() int64 {
	if !c.on {
		return c.os()
	}
	t := c.read()
	d := t - c.tb
	if c.rate == 0 || c.n >= AnchorEvery || d > c.maxTicks {
		// d > maxTicks also catches a counter below the anchor (d wraps).
		return c.anchor(t)
	}
	c.n++
	// d < maxTicks (10 ms: below 2^36 ticks up to 6 GHz) and rate below
	// 2^34 (a counter of at least 250 MHz): the product fits.
	ns := c.nsb + int64((d*c.rate+1<<31)>>32)
	ns = max(ns, c.last)
	c.last = ns
	return ns
}

// anchor reads the OS clock between the counter reading t and another,
// and recalibrates. A pair whose readings lie far apart (descheduled
// between them) would skew every estimate after it: it serves this
// reading only.
func (c *Clock) anchor(t uint64) int64 {
	ns := c.os()
	t2 := c.read()
	bracket := uint64(pairMaxTicks)
	if c.rate != 0 {
		bracket = c.maxTicks / (AnchorMaxNS / pairMaxNS)
	}
	if t2-t <= bracket {
		if c.t0 == 0 {
			c.t0, c.ns0 = t, ns
		} else if ns-c.ns0 >= CalibrateNS && t > c.t0 {
			rate := float64(ns-c.ns0) / float64(t-c.t0) // ns per tick
			if rate > 0 && rate < 4 {
				c.rate = uint64(rate*(1<<32) + 0.5)
				c.maxTicks = uint64(AnchorMaxNS / rate)
			}
		}
		c.tb, c.nsb, c.n = t, ns, 1
	}
	ns = max(ns, c.last)
	c.last = ns
	return ns
}

func (c *Clock) read() uint64 {
	if c.tick != nil {
		return c.tick()
	}
	return rdtsc()
}

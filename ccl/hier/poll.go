package hier

import (
	"fmt"
	"runtime"
	"time"
)

// Polled reads (off; tests only). A small collective between hosts is a
// few short exchanges, and each read that parks in Go's network poller
// is woken by epoll and the scheduler. With spinMode set, the links' reads
// poll the socket (internal/sys/pollread) for up to a budget before they
// park, in every collective of at most spinMax bytes and in every
// agreement round; larger collectives park at once (they are limited by
// the link, and a ring's polling readers would hold cores its senders'
// encryption needs). "auto" polls only on hosts with at least
// spinCoresPerRank cores per local rank.
//
// Off by default: on the 16-core host's namespaces (2026-11-25, session
// 9, docs/multi-host.md) polling changed the median of 1-16 KiB
// allreduces by -10% to +10% between runs, within the host's noise, and
// polling up to 1 MiB made 64 KiB-1 MiB up to 1.5x slower. The cost of a
// small step there is the kernel's send path (veth, bridge, qdisc), not
// the wake-up.
// spinMode is the budget (tests only): "off" or "0" (the default),
// "auto", or a duration ("50us"). A rank's own choice: ranks need not
// agree.
var spinMode = ""

const (
	// DefaultSpin is auto's budget where it polls.
	DefaultSpin = 50 * time.Microsecond
	// spinCoresPerRank: auto polls when the host has at least this many
	// cores (runtime.NumCPU) per local rank of the communicator.
	spinCoresPerRank = 4
)

// spinMax: collectives of at most this many bytes (one rank's send
// buffer) poll.
var spinMax = 16 << 10

// spinFor is the polling budget for a rank with local ranks on its host
// and cpus cores, given spinMode's value mode.
func spinFor(mode string, cpus, local int) (time.Duration, error) {
	switch mode {
	case "auto":
		if cpus >= spinCoresPerRank*local {
			return DefaultSpin, nil
		}
		return 0, nil
	case "", "off", "0":
		return 0, nil
	}
	d, err := time.ParseDuration(mode)
	if err != nil || d < 0 || d > time.Second {
		return 0, fmt.Errorf("spin budget %q: want off, auto, or a duration from 0 to 1s", mode)
	}
	return d, nil
}

// chooseSpin sets c.spin from spinMode at Join.
func (c *Comm) chooseSpin() error {
	d, err := spinFor(spinMode, runtime.NumCPU(), c.l)
	if err != nil {
		return err
	}
	c.spin, c.spinNow = d, -1
	return nil
}

// pollFor sets every link's polling budget for a collective of bytes
// bytes (0: an agreement round): c.spin up to spinMax, else none.
func (c *Comm) pollFor(bytes int) {
	want := c.spin
	if bytes > spinMax {
		want = 0
	}
	if want == c.spinNow {
		return
	}
	c.spinNow = want
	c.eachLink(func(p *peer) {
		if p.poll != nil {
			p.poll.SetSpin(want)
		}
	})
}

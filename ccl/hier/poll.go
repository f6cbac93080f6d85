package hier

import (
	"fmt"
	"os"
	"runtime"
	"time"
)

// Polled reads. A small collective between hosts is a few short
// exchanges; each read that parks in Go's network poller is woken by
// epoll and the scheduler, tens of microseconds on an idle core of a VM:
// more than the message's transfer (docs/multi-host.md, "Where the
// small-message gap to Open MPI is"). So the links' reads poll the socket
// (internal/pollread) for up to a budget before they park, in every
// collective of at most SpinMax bytes and in every agreement round. A
// polling read holds a core, so by default ("auto") links poll only on
// hosts with at least spinCoresPerRank cores per local rank: the readers
// of a rank (one per stripe of a ring, one in an exchange) and its
// senders then have cores of their own. Larger collectives park at once:
// they are limited by the link, and a ring's readers would hold cores its
// senders' encryption needs.
const (
	// EnvSpin sets the budget: "auto" (default), "off" or "0", or a
	// duration ("50us"). A rank's own choice: ranks need not agree.
	EnvSpin = "CHORUS_HIER_SPIN"
	// DefaultSpin is auto's budget where it polls.
	DefaultSpin = 50 * time.Microsecond
	// spinCoresPerRank: auto polls when the host has at least this many
	// cores (runtime.NumCPU) per local rank of the communicator.
	spinCoresPerRank = 4
)

// SpinMax: collectives of at most this many bytes (one rank's send
// buffer) poll (CHORUS_HIER_SPIN_MAX).
var SpinMax = envInt("CHORUS_HIER_SPIN_MAX", 16<<10)

// spinFor is the polling budget for a rank with local ranks on its host
// and cpus cores, given EnvSpin's value mode.
func spinFor(mode string, cpus, local int) (time.Duration, error) {
	switch mode {
	case "", "auto":
		if cpus >= spinCoresPerRank*local {
			return DefaultSpin, nil
		}
		return 0, nil
	case "off", "0":
		return 0, nil
	}
	d, err := time.ParseDuration(mode)
	if err != nil || d < 0 || d > time.Second {
		return 0, fmt.Errorf("%s=%q: want auto, off, or a duration from 0 to 1s", EnvSpin, mode)
	}
	return d, nil
}

// chooseSpin sets c.spin from EnvSpin at Join.
func (c *Comm) chooseSpin() error {
	d, err := spinFor(os.Getenv(EnvSpin), runtime.NumCPU(), c.l)
	if err != nil {
		return err
	}
	c.spin, c.spinNow = d, -1
	return nil
}

// pollFor sets every link's polling budget for a collective of bytes
// bytes (0: an agreement round): c.spin up to SpinMax, else none.
func (c *Comm) pollFor(bytes int) {
	want := c.spin
	if bytes > SpinMax {
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

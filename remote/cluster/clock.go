package cluster

// clockSample is one ping round trip: the controller's clock when the
// ping left (sent) and when the pong arrived (recv), and the agent's
// clock when the ping arrived there (remote). All in ns.
type clockSample struct{ sent, remote, recv int64 }

func (s clockSample) rtt() int64 { return s.recv - s.sent }

// clockEst estimates a host's clock offset to the controller's (NTP's
// idea with the best sample): the agent read its clock somewhere between
// sent and recv, so offset = remote - (sent+recv)/2 is right within
// half the round trip, exactly when the two directions took equally
// long. Queueing behind other frames only lengthens a round trip, so
// the sample with the smallest one is kept.
type clockEst struct {
	n    int // samples taken
	best clockSample
}

// add takes a sample; one whose pong arrived before its ping left is
// refused (false).
func (c *clockEst) add(s clockSample) bool {
	if s.recv < s.sent {
		return false
	}
	if c.n == 0 || s.rtt() < c.best.rtt() {
		c.best = s
	}
	c.n++
	return true
}

// estimate returns remote clock minus controller clock and its bound
// (half the best round trip, rounded up); ok is false without samples.
func (c *clockEst) estimate() (offset, uncertainty int64, ok bool) {
	if c.n == 0 {
		return 0, 0, false
	}
	b := c.best
	rtt := b.rtt()
	// remote - (sent+recv)/2 without overflowing the sum.
	return b.remote - b.sent - rtt/2, (rtt + 1) / 2, true
}

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
//
// Clocks also drift apart; a session is aligned with one offset per host,
// but the best samples of the start (the first burst of pings) and of
// the end (the samples after markEnd) are kept too, so the trace can say
// how far the offset moved (drift).
type clockEst struct {
	n             int // samples taken
	best          clockSample
	first         clockSample // best of the first startSamples before markEnd
	last          clockSample // best since markEnd
	nFirst, nLast int
	ended         bool
}

// startSamples is how many samples count as the session's start.
const startSamples = clockBurst

// markEnd: samples from now on describe the session's end.
func (c *clockEst) markEnd() { c.ended = true }

// add takes a sample; one whose pong arrived before its ping left is
// refused (false).
func (c *clockEst) add(s clockSample) bool {
	if s.recv < s.sent {
		return false
	}
	if c.n == 0 || s.rtt() < c.best.rtt() {
		c.best = s
	}
	if !c.ended && c.nFirst < startSamples {
		if c.nFirst == 0 || s.rtt() < c.first.rtt() {
			c.first = s
		}
		c.nFirst++
	}
	if c.ended {
		if c.nLast == 0 || s.rtt() < c.last.rtt() {
			c.last = s
		}
		c.nLast++
	}
	c.n++
	return true
}

// offsetOf is a sample's offset estimate and its bound.
func offsetOf(s clockSample) (offset, uncertainty int64) {
	rtt := s.rtt()
	// remote - (sent+recv)/2 without overflowing the sum.
	return s.remote - s.sent - rtt/2, (rtt + 1) / 2
}

// drift returns how far the offset moved from the session's start to
// its end (end minus start), the bound of that difference, and the time
// between the two samples; ok is false without samples from both.
func (c *clockEst) drift() (drift, uncertainty, over int64, ok bool) {
	if c.nFirst == 0 || c.nLast == 0 {
		return 0, 0, 0, false
	}
	o1, u1 := offsetOf(c.first)
	o2, u2 := offsetOf(c.last)
	return o2 - o1, u1 + u2, c.last.sent - c.first.sent, true
}

// estimate returns remote clock minus controller clock and its bound
// (half the best round trip, rounded up); ok is false without samples.
func (c *clockEst) estimate() (offset, uncertainty int64, ok bool) {
	if c.n == 0 {
		return 0, 0, false
	}
	offset, uncertainty = offsetOf(c.best)
	return offset, uncertainty, true
}

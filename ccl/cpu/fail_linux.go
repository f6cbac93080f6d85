package cpu

// Fail marks the communicator failed for every rank and wakes the ranks
// that wait in it: their collectives return ccl.ErrFailed. Layers built on
// this backend (ccl/hier) call it when the part of a collective outside
// shared memory fails, so that local ranks do not wait for their timeout.
// Safe from any goroutine while the Comm is open (not after Close).
func (c *Comm) Fail() {
	if !c.closed {
		c.seg.fail()
	}
}

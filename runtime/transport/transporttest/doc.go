// Package transporttest is the conformance suite that every transport.Conn
// implementation passes: ordering and integrity of frames of any size,
// context cancellation and deadlines, Abort and Close semantics, and no
// goroutine leaks.
package transporttest

//go:build !linux

package transport

// Pending reports false: there is no portable non-blocking peek.
func (s *Stream) Pending() bool { return s.nhdr > 0 || s.inBody }

// Package transport moves opaque frames between a controller and one
// worker. Implementations: a byte stream (pipes, unix or TCP sockets; see
// NewStream) and shared-memory rings (package transport/shm). Both satisfy
// Conn, so sessions are written once against this interface.
package transport

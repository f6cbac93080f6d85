package session

import (
	"io"
	"time"
)

// ProcessOptions configure NewProcess.
type ProcessOptions struct {
	Options
	// Transport is "shm" (shared-memory rings, the default) or "stream"
	// (a unix socket pair per worker).
	Transport string
	// Program is the worker executable; default: this program. It must call
	// worker.Main early (the chorus CLI and test binaries do).
	Program string
	// Args follow the program name on the worker's command line.
	Args []string
	// Env is added to the inherited environment.
	Env []string
	// Stderr receives the workers' stdout and stderr; default os.Stderr.
	Stderr io.Writer
	// StartTimeout bounds the start-up handshake (default 30 s).
	StartTimeout time.Duration
	// RingSize is the size of each shared-memory ring in bytes (0: default).
	RingSize int
	// Spin bounds how long a shared-memory waiter polls before it sleeps
	// (0: the transport's default, negative: never poll).
	Spin time.Duration
}

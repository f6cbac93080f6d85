package session

import (
	"fmt"
	"io"
	"time"

	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/runtime/worker"
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
	// Env is added to the inherited environment. The session reads the
	// chorus variables among them as it reads its own environment's
	// (CHORUS_FAKE_GPU=1 here gives these workers fake GPUs).
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

// ResolveWorker is the worker.Options a session with Options.Worker == w
// sends its workers: the fields left zero filled from the controller's
// environment. A driver that must tell its workers before the session
// exists (cluster) asks here.
func ResolveWorker(w worker.Options) (worker.Options, error) {
	return Options{Worker: w}.workerOptions(nil)
}

// workerOptions fills the fields of o.Worker left zero from the
// controller's environment with env (a process session's Env) over it.
func (o Options) workerOptions(env []string) (worker.Options, error) {
	w := o.Worker
	e := config.Process().With(env)
	if !w.FakeGPU {
		fake, err := e.Bool(config.FakeGPU)
		if err != nil {
			return w, fmt.Errorf("session: %w", err)
		}
		w.FakeGPU = fake
	}
	if w.CPUProfile == "" {
		w.CPUProfile = e.Get(config.CPUProfile)
	}
	if w.IPCAutoTable == "" {
		w.IPCAutoTable = e.Get(config.IPCAutoTable)
	}
	return w, nil
}

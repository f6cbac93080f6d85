package session

import (
	"context"
	"fmt"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/tensor"
)

// InitCCL creates a communicator of the named backend ("cpu", ...) over
// every worker, and one per group when the session has several groups:
// the controller makes the communicator id, every worker joins with it
// (worker i binds deviceIDs[i % len(deviceIDs)]), and InitCCL returns once
// all have joined. Calling it again replaces the communicators. timeout
// bounds every later collective's wait for other workers (0: 60 s).
func (s *Session) InitCCL(ctx context.Context, backend string, timeout time.Duration, deviceIDs ...int) error {
	var id []byte
	var err error
	if p := s.cclPreparer(); p != nil {
		// Multi-host sessions: workers learn their peers first, and a GPU
		// backend's id may come from a worker (the controller may have no
		// GPU library).
		name := backend
		if backend, id, err = p.PrepareCCL(ctx, s, backend); err != nil {
			return fmt.Errorf("session: InitCCL %s: %w", name, err)
		}
	}
	b, err := ccl.Lookup(backend)
	if err != nil {
		return fmt.Errorf("session: InitCCL: %w", err)
	}
	if id == nil {
		if id, err = b.NewID(); err != nil {
			return fmt.Errorf("session: InitCCL %s: %w", backend, err)
		}
	}
	f, err := s.GetGlobalFunc(ctx, "chorus.init_ccl")
	if err != nil {
		return fmt.Errorf("session: InitCCL: %w", err)
	}
	defer f.Release()
	devs := make(tensor.Shape, len(deviceIDs))
	for i, d := range deviceIDs {
		devs[i] = int64(d)
	}
	if err := s.CallPackedDiscard(f, backend, id, devs, timeout.Milliseconds()); err != nil {
		return fmt.Errorf("session: InitCCL: %w", err)
	}
	if err := s.Sync(ctx); err != nil {
		return fmt.Errorf("session: InitCCL %s: %w", backend, err)
	}
	return nil
}

//go:build !linux

package session

import (
	"context"
	"errors"
)

// NewProcess needs Linux (memfd, futex, socket pairs).
func NewProcess(ctx context.Context, opts ProcessOptions) (*Session, error) {
	return nil, errors.New("session: process sessions need linux")
}

// PIDs returns nil: there are no worker processes.
func (s *Session) PIDs() []int { return nil }

//go:build !linux

package cpu

import (
	"context"
	"errors"

	"github.com/chorus-rt/chorus/ccl"
)

// Backend is the "cpu" backend; it needs Linux (shared memory, futexes).
type Backend struct{}

func init() { _ = ccl.Register(&Backend{}) }

func (*Backend) Name() string           { return "cpu" }
func (*Backend) NewID() ([]byte, error) { return nil, errors.New("ccl/cpu: needs linux") }
func (*Backend) Join(ctx context.Context, cfg ccl.Config) (ccl.Comm, error) {
	return nil, errors.New("ccl/cpu: needs linux")
}

//go:build !linux

package worker

import (
	"errors"

	"github.com/chorus-rt/chorus/runtime/trace"
)

func attachFlight() (*trace.Ring, error) {
	return nil, errors.New("flight recorder in shared memory needs linux")
}

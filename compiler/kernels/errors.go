package kernels

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/runtime/registry"
)

// Sentinel errors that callers test with errors.Is (the VM's: package
// compiler/vm re-exports them).
var (
	// ErrUnsupported: the operands need something this worker's kernels
	// cannot do (a dtype a kernel lacks, a tensor on another device, a
	// GPU older than compute capability 8.0).
	ErrUnsupported = errors.New("vm: unsupported")
	// ErrShape: operands whose dtype or shape do not fit the op.
	ErrShape = errors.New("vm: shape mismatch")
	// ErrArgs: a measurement function called with arguments out of range
	// (wraps registry.ErrBadArgs, so the session reports it as bad
	// arguments).
	ErrArgs = fmt.Errorf("vm: %w", registry.ErrBadArgs)
)

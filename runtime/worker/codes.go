package worker

import (
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// The sentinels of the layers below the worker that codeOf maps to wire
// codes, registered with wire so that errors.Is sees them in a
// WorkerError on the controller. This package is where both directions
// live: codeOf on the worker, these on the controller (every controller
// links this package through runtime/session).
func init() {
	wire.MatchCode(wire.CodeUnknown, registry.ErrUnknownFunction)
	wire.MatchCode(wire.CodeBadArgs, registry.ErrBadArgs)
	wire.MatchCode(wire.CodeCCLBadArgs, ccl.ErrBadArgs, registry.ErrBadArgs)
	wire.MatchCode(wire.CodeCCLMismatch, ccl.ErrMismatch)
	wire.MatchCode(wire.CodeCCLTimeout, ccl.ErrTimeout, ccl.ErrFailed)
	wire.MatchCode(wire.CodeCCLFailed, ccl.ErrFailed)
}

package worker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// TestCodesRoundTrip: an error a function returns on a worker maps to a
// code (codeOf), and the WorkerError of that code, decoded on the
// controller, matches the same sentinels with errors.Is, and no others
// of the list.
func TestCodesRoundTrip(t *testing.T) {
	all := []error{
		registry.ErrUnknownFunction, registry.ErrBadArgs,
		ccl.ErrBadArgs, ccl.ErrMismatch, ccl.ErrTimeout, ccl.ErrFailed,
		wire.ErrFuncFailed, wire.ErrPanic, wire.ErrBadReg, wire.ErrDepFailed, wire.ErrInternal,
	}
	cases := []struct {
		code wire.Code
		want []error // the sentinels a WorkerError of this code matches
	}{
		{wire.CodeFailed, []error{wire.ErrFuncFailed}},
		{wire.CodePanic, []error{wire.ErrPanic}},
		{wire.CodeUnknown, []error{registry.ErrUnknownFunction}},
		{wire.CodeBadArgs, []error{registry.ErrBadArgs}},
		{wire.CodeBadReg, []error{wire.ErrBadReg}},
		{wire.CodeDepFailed, []error{wire.ErrDepFailed}},
		{wire.CodeInternal, []error{wire.ErrInternal}},
		{wire.CodeCCLBadArgs, []error{ccl.ErrBadArgs, registry.ErrBadArgs}},
		{wire.CodeCCLMismatch, []error{ccl.ErrMismatch}},
		{wire.CodeCCLTimeout, []error{ccl.ErrTimeout, ccl.ErrFailed}},
		{wire.CodeCCLFailed, []error{ccl.ErrFailed}},
	}
	for _, tc := range cases {
		err := fmt.Errorf("decoded: %w", &wire.WorkerError{Code: tc.code, Msg: "m"})
		for _, s := range all {
			want := false
			for _, w := range tc.want {
				want = want || w == s
			}
			if got := errors.Is(err, s); got != want {
				t.Errorf("code %d: errors.Is(%v) = %v, want %v", tc.code, s, got, want)
			}
		}
	}
	// The worker side: each sentinel a function may return maps to the
	// code whose WorkerError matches it again.
	for _, s := range []error{registry.ErrBadArgs, ccl.ErrBadArgs, ccl.ErrMismatch, ccl.ErrTimeout, ccl.ErrFailed} {
		c := codeOf(fmt.Errorf("f: %w", s))
		if !errors.Is(&wire.WorkerError{Code: c}, s) {
			t.Errorf("codeOf(%v) = %d, whose WorkerError does not match it", s, c)
		}
	}
}

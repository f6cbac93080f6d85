package interp

import (
	"fmt"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// RunStatsFunc (module) -> [calls, host seconds, ops, fused, fixed] of
// Module.Run and Capture since the last RunStatsFunc on this worker
// (fused: the instructions fuse.go made at load; fixed: those whose
// weights fixed.go found no instruction writes): the host time the VM
// spent issuing (interpreting and launching), which an eager step adds
// to the device time when nothing overlaps it.
const RunStatsFunc = "chorus.vm.run_stats"

func init() {
	registry.MustRegisterTyped(RunStatsFunc, func(m any) (*tensor.Tensor, error) {
		mod, ok := m.(*Module)
		if !ok || mod == nil {
			return nil, fmt.Errorf("%w: %s: argument is a %T, not a module loaded by %s", ErrArgs, RunStatsFunc, m, LoadFunc)
		}
		s := mod.stats
		mod.stats = runStats{}
		return tensor.FromSlice([]float64{float64(s.calls), s.host.Seconds(), float64(s.ops), float64(mod.fused), float64(mod.fixed)}), nil
	})
}

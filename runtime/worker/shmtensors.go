package worker

import (
	"fmt"
	"os"

	"github.com/chorus-rt/chorus/internal/sys/shmarena"
	"github.com/chorus-rt/chorus/tensor"
)

// Shared tensors: a process worker on the host allocates its large host
// tensors from a shared memory arena (internal/sys/shmarena) that the other
// workers map, so the cpu collectives read them directly instead of with
// process_vm_readv (docs/performance.md, "Shared tensors": on 2 processes
// the arena made 1-64 MB allreduces 2.3-4x faster than process_vm_readv,
// which is why there is no switch to keep tensors in the Go heap).
const (
	// DefaultShmTensorsMin: smaller tensors stay in the Go heap (the
	// one-shot staging path moves them anyway, and a block is a page).
	DefaultShmTensorsMin = 64 << 10
)

// installSharedTensors sets up the arena of a host worker process. A
// failure is reported on stderr and leaves tensors in the Go heap: the
// session works, its collectives take the cma path, and Comm.Path says
// why.
func installSharedTensors(spec Spec) {
	if spec.Device.Kind != tensor.CPU || spec.NoSharedTensors {
		return
	}
	minBytes := int64(DefaultShmTensorsMin)
	a, err := shmarena.New(shmarena.Config{Name: fmt.Sprintf("chorus-tensors-w%d", spec.ID)})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chorus worker %d: shared tensors off (host tensors stay private; collectives read them with process_vm_readv): %v\n", spec.ID, err)
		return
	}
	shmarena.SetProcess(a)
	tensor.SetHostAllocator(minBytes, a.Alloc)
}

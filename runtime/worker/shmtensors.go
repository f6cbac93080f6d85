package worker

import (
	"fmt"
	"os"
	"strconv"

	"github.com/chorus-rt/chorus/internal/sys/shmarena"
	"github.com/chorus-rt/chorus/tensor"
)

// Shared tensors: a process worker on the host allocates its large host
// tensors from a shared memory arena (internal/sys/shmarena) that the other
// workers map, so the cpu collectives read them directly instead of with
// process_vm_readv (docs/performance.md, "Shared tensors").
const (
	// EnvShmTensors=0 keeps every host tensor in the Go heap (the cpu
	// backend then reads peers with process_vm_readv, as before).
	EnvShmTensors = "CHORUS_SHM_TENSORS"
	// EnvShmTensorsMin sets the least storage size, in bytes, taken from
	// the arena (default DefaultShmTensorsMin).
	EnvShmTensorsMin = "CHORUS_SHM_TENSORS_MIN"
	// DefaultShmTensorsMin: smaller tensors stay in the Go heap (the
	// one-shot staging path moves them anyway, and a block is a page).
	DefaultShmTensorsMin = 64 << 10
)

// installSharedTensors sets up the arena of a host worker process, unless
// EnvShmTensors is 0. A failure is reported on stderr and leaves tensors in
// the Go heap: the session works, its collectives take the cma path, and
// Comm.Path says why.
func installSharedTensors(spec Spec) {
	if spec.Device.Kind != tensor.CPU || os.Getenv(EnvShmTensors) == "0" {
		return
	}
	minBytes := int64(DefaultShmTensorsMin)
	if v := os.Getenv(EnvShmTensorsMin); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "chorus worker %d: %s=%q: want a positive byte count; using %d\n", spec.ID, EnvShmTensorsMin, v, minBytes)
		} else {
			minBytes = n
		}
	}
	a, err := shmarena.New(shmarena.Config{Name: fmt.Sprintf("chorus-tensors-w%d", spec.ID)})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chorus worker %d: shared tensors off (host tensors stay private; collectives read them with process_vm_readv): %v\n", spec.ID, err)
		return
	}
	shmarena.SetProcess(a)
	tensor.SetHostAllocator(minBytes, a.Alloc)
}

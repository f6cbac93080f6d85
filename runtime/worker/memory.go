package worker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/chorus-rt/chorus/internal/sys/shmarena"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// MemoryFunc is the built-in that reports a worker's memory high-water
// marks: () -> the JSON of a MemoryStats.
const MemoryFunc = "chorus.memory"

// MemoryStats are one worker's memory high-water marks.
type MemoryStats struct {
	Worker int `json:"worker"`
	// PID is the worker's process. Workers of a threaded session share
	// the controller's process, so its host peak is theirs together.
	PID int `json:"pid"`
	// HostPeakBytes is the peak resident memory of the worker's process
	// (VmHWM in /proc/self/status); -1 when it cannot be read (HostError
	// says why, e.g. not on Linux).
	HostPeakBytes int64  `json:"host_peak_bytes"`
	HostError     string `json:"host_error,omitempty"`
	// GPU: the most device memory the worker's allocator held at once
	// (device.Stats.DevicePeak: tensors, workspace, cached buffers) and
	// the IPC memory it holds (custom all-reduce buffers and ipc_memory
	// tensors; that allocator keeps what it allocated until it closes, so
	// this is its peak too). Memory that CUDA, cuBLAS and NCCL take for
	// themselves is not counted. Zero on host-only workers.
	DevicePeakBytes int64 `json:"device_peak_bytes"`
	IPCBytes        int64 `json:"ipc_bytes"`
	// HasDevice: the worker is bound to a GPU (or a fake one).
	HasDevice bool `json:"has_device"`
	// HostShared is set by the controller (session.Memory), not the
	// worker: the worker's process is the controller's (a threaded
	// session) or another worker's, so HostPeakBytes is process-wide,
	// not this worker's alone.
	HostShared bool `json:"host_shared"`
	// SharedTensors is the worker process's shared tensor arena (process
	// workers on the host; nil when it has none) and HostAlloc what the
	// tensor package's host allocator did: Fallbacks counts tensors that
	// went to the Go heap because the arena could not serve them.
	SharedTensors *shmarena.Stats       `json:"shared_tensors,omitempty"`
	HostAlloc     tensor.HostAllocStats `json:"host_alloc"`
}

// DeviceTotalPeakBytes is DevicePeakBytes plus IPCBytes.
func (m MemoryStats) DeviceTotalPeakBytes() int64 { return m.DevicePeakBytes + m.IPCBytes }

// ParseVmHWM reads the VmHWM line ("VmHWM:   123456 kB") of a
// /proc/PID/status file and returns it in bytes.
func ParseVmHWM(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmHWM line %q: want \"VmHWM: N kB\"", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > 1<<53 {
			return 0, fmt.Errorf("VmHWM line %q: bad size", sc.Text())
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmHWM line")
}

// hostPeak is this process's VmHWM.
func hostPeak() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return ParseVmHWM(f)
}

// Memory returns the worker's memory high-water marks.
func (w *Worker) Memory() MemoryStats {
	m := MemoryStats{Worker: w.cfg.ID, PID: os.Getpid()}
	if b, err := hostPeak(); err != nil {
		m.HostPeakBytes, m.HostError = -1, err.Error()
	} else {
		m.HostPeakBytes = b
	}
	if a := shmarena.Process(); a != nil {
		st := a.Stats()
		m.SharedTensors = &st
	}
	m.HostAlloc = tensor.HostAllocatorStats()
	if w.pool != nil {
		m.HasDevice = true
		m.DevicePeakBytes = w.pool.Stats().DevicePeak
		if w.ipc.alloc != nil {
			m.IPCBytes = w.ipc.alloc.Stats().Bytes
		}
	}
	return m
}

func init() {
	if err := Builtins.RegisterTyped(MemoryFunc, func(env registry.Env) ([]byte, error) {
		w, ok := env.(*Worker)
		if !ok {
			return nil, fmt.Errorf("%s needs a chorus worker, got %T", MemoryFunc, env)
		}
		return json.Marshal(w.Memory())
	}); err != nil {
		panic(err)
	}
}

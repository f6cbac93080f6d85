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

// MemoryStats are one worker's memory high-water marks (the registry's
// Memory capability reports them).
type MemoryStats = registry.MemoryStats

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
		m, ok := env.(registry.Memory)
		if !ok {
			return nil, fmt.Errorf("%s: %w: the memory capability: %T is not a chorus worker", MemoryFunc, registry.ErrNoCapability, env)
		}
		return json.Marshal(m.Memory())
	}); err != nil {
		panic(err)
	}
}

package worker

import (
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/ccl/nccl"
)

// backend is the backend name joins with this worker's options: the
// cpu, cpu-hier and nccl backends take them from the worker's Config
// (the session's worker.Options); others are the registered ones.
func (w *Worker) backend(name string) (ccl.Backend, error) {
	switch name {
	case "cpu":
		return &cpu.Backend{Options: w.cfg.CPU}, nil
	case hier.Name:
		return &hier.Backend{CPU: w.cfg.CPU}, nil
	case "nccl":
		if w.cfg.SkipChecks {
			return &nccl.Backend{Options: nccl.Options{SkipChecks: true}}, nil
		}
	}
	return ccl.Lookup(name)
}

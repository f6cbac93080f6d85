package session

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/chorus-rt/chorus/runtime/worker"
)

// Memory returns every worker's memory high-water marks (worker.MemoryFunc),
// in worker order: the peak resident memory of its process and, on GPUs,
// the most device memory its allocator held. HostShared is set where the
// process is the controller's (threaded workers) or shared by several
// workers, so the host peak is process-wide there. It waits for the
// workers' earlier work (a sync), so the marks include it.
func (s *Session) Memory(ctx context.Context) ([]worker.MemoryStats, error) {
	f, err := s.GetGlobalFunc(ctx, worker.MemoryFunc)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	r, err := s.CallPacked(f)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	out := make([]worker.MemoryStats, s.NumWorkers())
	pids := map[int]int{}
	for w := range out {
		v, err := s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			return nil, fmt.Errorf("session: memory of worker %d: %w", w, err)
		}
		b, ok := v.([]byte)
		if !ok {
			return nil, fmt.Errorf("session: memory of worker %d: %s returned a %T", w, worker.MemoryFunc, v)
		}
		if err := json.Unmarshal(b, &out[w]); err != nil {
			return nil, fmt.Errorf("session: memory of worker %d: %w", w, err)
		}
		pids[out[w].PID]++
	}
	me := os.Getpid()
	for i := range out {
		out[i].HostShared = out[i].PID == me || pids[out[i].PID] > 1
	}
	return out, nil
}

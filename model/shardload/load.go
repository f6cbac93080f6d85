package shardload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/model/shard"
	"github.com/chorus-rt/chorus/runtime/session"
)

// ErrMismatch: workers see different checkpoints (or specs) at the path.
var ErrMismatch = errors.New("shardload: workers see different checkpoints")

// Options tune Load.
type Options struct {
	// Progress receives progress after each tensor. Nil: a line on
	// stderr (Terminal) when stderr is a terminal and the checkpoint
	// holds at least ProgressMin bytes; otherwise nothing.
	Progress Reporter
	// ProgressMin is the checkpoint size from which the default reporter
	// reports (0: DefaultProgressMin).
	ProgressMin int64
	// StagingBytes is the size of each of a GPU worker's two pinned
	// staging buffers (0: shard.DefaultStagingChunk, 8 MiB).
	StagingBytes int64
	// Stats, if set, receives every worker's counters after a
	// successful load.
	Stats *Stats
}

// Stats are what the workers read.
type Stats struct {
	// BytesRead is every worker's count of bytes read from the
	// checkpoint's data sections (chorus.shard.bytes_read), by worker.
	BytesRead []int64
}

// DefaultProgressMin: smaller checkpoints load without a progress line.
const DefaultProgressMin = 1 << 30

// LoadSharded is Load with default options.
func LoadSharded(ctx context.Context, s *session.Session, dir string, spec *shard.Spec) (map[string]*session.DRef, error) {
	return Load(ctx, s, dir, spec, Options{})
}

// Load opens the checkpoint at dir (a file, an index or a directory; the
// path is opened by each worker, so on several hosts it must name the
// same checkpoint on each) with spec on every worker, checks that every
// worker sees the same tensors, and loads each tensor sharded: worker w
// holds its part (rank = its rank in its group, of group size parts) on
// its own device. It returns one register per tensor. On an error it
// releases the registers it made, closes the checkpoint on the workers
// and returns the first cause (naming the tensor and the workers).
func Load(ctx context.Context, s *session.Session, dir string, spec *shard.Spec, opt Options) (out map[string]*session.DRef, err error) {
	if spec == nil {
		spec = &shard.Spec{}
	}
	js, err := spec.JSON()
	if err != nil {
		return nil, fmt.Errorf("shardload: spec: %w", err)
	}
	funcs := map[string]*session.DRef{}
	names := []string{FuncOpen, FuncInfo, FuncLoad, FuncClose}
	if opt.Stats != nil {
		names = append(names, FuncBytesRead)
	}
	for _, name := range names {
		f, err := s.GetGlobalFunc(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("shardload: %w", err)
		}
		defer f.Release()
		funcs[name] = f
	}
	h, err := s.CallPacked(funcs[FuncOpen], dir, string(js), opt.StagingBytes)
	if err != nil {
		return nil, fmt.Errorf("shardload: open %s: %w", dir, err)
	}
	defer h.Release()
	if err := s.Sync(ctx); err != nil {
		return nil, fmt.Errorf("shardload: open %s: %w", dir, err)
	}
	loaded := map[string]*session.DRef{}
	defer func() {
		// Close on the workers whatever happened; on an error, drop what
		// was loaded.
		cerr := s.CallPackedDiscard(funcs[FuncClose], h)
		if cerr == nil {
			cerr = s.Sync(ctx)
		}
		if err == nil && cerr != nil {
			err = fmt.Errorf("shardload: close %s: %w", dir, cerr)
		}
		if err != nil {
			// (not out: "return nil, err" has already set it to nil)
			for _, r := range loaded {
				r.Release()
			}
			out = nil
		}
	}()
	inf, err := infoEverywhere(ctx, s, funcs[FuncInfo], h)
	if err != nil {
		return nil, fmt.Errorf("shardload: %s: %w", dir, err)
	}
	rep := opt.Progress
	var total int64
	for _, b := range inf.Bytes {
		total += b
	}
	if rep == nil {
		min := opt.ProgressMin
		if min == 0 {
			min = DefaultProgressMin
		}
		if total >= min {
			rep = Terminal()
		}
	}
	var done int64
	for i, name := range inf.Names {
		r, err := s.CallPacked(funcs[FuncLoad], h, name)
		if err != nil {
			return nil, fmt.Errorf("shardload: load %q: %w", name, err)
		}
		loaded[name] = r
		// A sync per tensor: progress is exact, and the first failure
		// stops the load (it costs microseconds; a tensor takes longer).
		if err := s.Sync(ctx); err != nil {
			return nil, fmt.Errorf("shardload: load %q: %w", name, err)
		}
		done += inf.Bytes[i]
		if rep != nil {
			rep.Progress(i+1, len(inf.Names), done, total)
		}
	}
	if rep != nil {
		rep.Done()
	}
	if opt.Stats != nil {
		if opt.Stats.BytesRead, err = bytesRead(ctx, s, funcs[FuncBytesRead], h); err != nil {
			return nil, fmt.Errorf("shardload: %s: %w", dir, err)
		}
	}
	return loaded, nil
}

// bytesRead fetches every worker's chorus.shard.bytes_read.
func bytesRead(ctx context.Context, s *session.Session, fn, h *session.DRef) ([]int64, error) {
	r, err := s.CallPacked(fn, h)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	out := make([]int64, s.NumWorkers())
	for w := range out {
		v, err := s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			return nil, err
		}
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("worker %d: %s returned a %T", w, FuncBytesRead, v)
		}
		out[w] = n
	}
	return out, nil
}

// infoEverywhere fetches every worker's info and checks they agree.
func infoEverywhere(ctx context.Context, s *session.Session, fn, h *session.DRef) (*Info, error) {
	r, err := s.CallPacked(fn, h)
	if err != nil {
		return nil, err
	}
	defer r.Release()
	var first *Info
	for w := range s.NumWorkers() {
		v, err := s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			return nil, err
		}
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("worker %d: %s returned a %T", w, FuncInfo, v)
		}
		var inf Info
		if err := json.Unmarshal([]byte(str), &inf); err != nil || len(inf.Names) != len(inf.Bytes) {
			return nil, fmt.Errorf("worker %d: bad %s reply: %v", w, FuncInfo, err)
		}
		if first == nil {
			first = &inf
		} else if inf.Fingerprint != first.Fingerprint {
			return nil, fmt.Errorf("%w: worker %d's checkpoint differs from worker 0's (%d vs %d tensors)", ErrMismatch, w, len(inf.Names), len(first.Names))
		}
	}
	return first, nil
}

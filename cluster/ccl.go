package cluster

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/runtime/session"
)

// PrepareCCL readies InitCCL across hosts (single-host sessions are left
// alone):
//   - "cpu" (or "cpu-hier") becomes the cross-host backend cpu-hier: every
//     worker starts its data listener and the id lists every worker's
//     host and address;
//   - "nccl": worker 0 makes the NCCL unique id (the controller needs no
//     GPU library) and it travels inside a cpu-hier id, whose table the
//     workers' host control communicators (the cross-rank argument checks)
//     use; NCCL's own transports carry the data.
//
// Other backends are left alone (they then work only inside one host).
func (d *driver) PrepareCCL(ctx context.Context, s *session.Session, backend string) (string, []byte, error) {
	if len(d.hosts) == 1 {
		return backend, nil, nil
	}
	var nonce []byte
	switch backend {
	case "cpu", hier.Name:
		backend = hier.Name
		nonce = make([]byte, 16)
		if _, err := rand.Read(nonce); err != nil {
			return "", nil, err
		}
	case "nccl":
		v, err := callGet(ctx, s, "chorus.nccl.unique_id", 0)
		if err != nil {
			return "", nil, fmt.Errorf("NCCL unique id from worker 0: %w", err)
		}
		b, ok := v.([]byte)
		if !ok || len(b) == 0 {
			return "", nil, fmt.Errorf("worker 0 returned a %T for the NCCL unique id", v)
		}
		nonce = b
	default:
		return backend, nil, nil
	}
	addrs, err := callGetAll(ctx, s, "chorus.hier.endpoint")
	if err != nil {
		return "", nil, fmt.Errorf("workers' data listeners: %w", err)
	}
	hosts, strs := make([]int, len(addrs)), make([]string, len(addrs))
	for w, v := range addrs {
		a, ok := v.(string)
		if !ok {
			return "", nil, fmt.Errorf("worker %d returned a %T for its data address", w, v)
		}
		hosts[w], strs[w] = d.owner[w], a
	}
	id, err := hier.MakeID(nonce, hosts, strs)
	if err != nil {
		return "", nil, err
	}
	return backend, id, nil
}

// callGet calls fn on every worker and returns worker w's result.
func callGet(ctx context.Context, s *session.Session, fn string, w int) (any, error) {
	f, err := s.GetGlobalFunc(ctx, fn)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	ref, err := s.CallPacked(f)
	if err != nil {
		return nil, err
	}
	defer ref.Release()
	if err := s.Sync(ctx); err != nil {
		return nil, err
	}
	return s.DebugGetFromRemote(ctx, ref, w)
}

// callGetAll calls fn on every worker and returns every result.
func callGetAll(ctx context.Context, s *session.Session, fn string) ([]any, error) {
	f, err := s.GetGlobalFunc(ctx, fn)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	ref, err := s.CallPacked(f)
	if err != nil {
		return nil, err
	}
	defer ref.Release()
	if err := s.Sync(ctx); err != nil {
		return nil, err
	}
	out := make([]any, s.NumWorkers())
	for w := range out {
		if out[w], err = s.DebugGetFromRemote(ctx, ref, w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

package cluster

import (
	"context"
	"fmt"

	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/session"
)

// PrepareCCL turns InitCCL("cpu") of a session spanning several hosts
// into the cross-host backend: every worker starts its data listener, and
// the id lists every worker's host and address. Other backends, and
// single-host sessions, are left alone.
func (d *driver) PrepareCCL(ctx context.Context, s *session.Session, backend string, id []byte) (string, []byte, error) {
	if len(d.hosts) == 1 {
		return backend, id, nil
	}
	switch backend {
	case "cpu":
	case hier.Name:
	default:
		return backend, id, nil
	}
	f, err := s.GetGlobalFunc(ctx, "chorus.hier.endpoint")
	if err != nil {
		return "", nil, err
	}
	defer f.Release()
	ref, err := s.CallPacked(f)
	if err != nil {
		return "", nil, err
	}
	defer ref.Release()
	if err := s.Sync(ctx); err != nil {
		return "", nil, fmt.Errorf("workers' data listeners: %w", err)
	}
	n := s.NumWorkers()
	hosts, addrs := make([]int, n), make([]string, n)
	for w := range n {
		v, err := s.DebugGetFromRemote(ctx, ref, w)
		if err != nil {
			return "", nil, err
		}
		a, ok := v.(string)
		if !ok {
			return "", nil, fmt.Errorf("worker %d returned a %T for its data address", w, v)
		}
		hosts[w], addrs[w] = d.owner[w], a
	}
	hid, err := hier.MakeID(id, hosts, addrs)
	if err != nil {
		return "", nil, err
	}
	return hier.Name, hid, nil
}

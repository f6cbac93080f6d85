package worker

import (
	"fmt"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/runtime/registry"
)

func init() {
	must := func(name string, fn any) {
		if err := Builtins.RegisterTyped(name, fn); err != nil {
			panic(err)
		}
	}
	// chorus.hier.endpoint() starts this worker process's data listener
	// for cross-host collectives (once) and returns its host:port;
	// multi-host sessions collect the addresses before InitCCL
	// (cluster).
	must("chorus.hier.endpoint", func(env registry.Env) (string, error) {
		w, ok := env.(*Worker)
		if !ok {
			return "", fmt.Errorf("chorus.hier.endpoint needs a chorus worker, got %T", env)
		}
		return hier.Endpoint(w.cfg.Endpoint)
	})
	// chorus.nccl.unique_id() makes an NCCL unique id on worker 0 (nil
	// elsewhere): multi-host sessions hand it out, so the controller needs
	// no GPU library.
	must("chorus.nccl.unique_id", func(env registry.Env) ([]byte, error) {
		if env.WorkerID() != 0 {
			return nil, nil
		}
		b, err := ccl.Lookup("nccl")
		if err != nil {
			return nil, err
		}
		return b.NewID()
	})
}

// splitID separates a GPU backend's own id from the cpu-hier id that
// carries it across hosts (see cluster's PrepareCCL): the backend
// joins with the first, host control communicators with the second.
func splitID(backend string, id []byte) (own, control []byte) {
	if backend != hier.Name && backend != "cpu" && hier.IsID(id) {
		return hier.Nonce(id), id
	}
	return id, id
}

// controlBackend is the host backend of control communicators: cpu-hier
// when the ranks span hosts.
func controlBackend(id []byte) string {
	if hier.IsID(id) {
		return hier.Name
	}
	return "cpu"
}

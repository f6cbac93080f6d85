package worker

import (
	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/registry"
)

// chorus.hier.endpoint() starts this worker process's data listener for
// cross-host collectives (once) and returns its host:port; multi-host
// sessions collect the addresses before InitCCL (remote/cluster).
func init() {
	if err := Builtins.RegisterTyped("chorus.hier.endpoint", func(env registry.Env) (string, error) {
		return hier.Endpoint()
	}); err != nil {
		panic(err)
	}
}

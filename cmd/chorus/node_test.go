package main

import (
	"testing"
)

func TestLaunchEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want launchEnv
		bad  bool
	}{
		{"empty", nil, launchEnv{NodeRank: -1}, false},
		{"chorus", map[string]string{"CHORUS_CONTROLLER": "c:1", "CHORUS_NODE_RANK": "2", "CHORUS_NNODES": "4", "CHORUS_WORKERS_PER_NODE": "8", "CHORUS_TOKEN_FILE": "/t"},
			launchEnv{Connect: "c:1", NodeRank: 2, Nodes: 4, Workers: 8}, false},
		{"torchrun", map[string]string{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "NODE_RANK": "1", "NNODES": "2", "NPROC_PER_NODE": "4"},
			launchEnv{Connect: "10.0.0.1:29500", NodeRank: 1, Nodes: 2, Workers: 4}, false},
		{"torchrun ipv6", map[string]string{"MASTER_ADDR": "fd00::1", "MASTER_PORT": "1"}, launchEnv{Connect: "[fd00::1]:1", NodeRank: -1}, false},
		{"slurm", map[string]string{"SLURM_NODEID": "3", "SLURM_NNODES": "4"}, launchEnv{NodeRank: 3, Nodes: 4}, false},
		{"chorus over torchrun over slurm", map[string]string{"CHORUS_NODE_RANK": "0", "NODE_RANK": "1", "SLURM_NODEID": "2", "LOCAL_WORLD_SIZE": "3"},
			launchEnv{NodeRank: 0, Workers: 3}, false},
		{"bad rank", map[string]string{"NODE_RANK": "x"}, launchEnv{}, true},
		{"negative workers", map[string]string{"CHORUS_WORKERS_PER_NODE": "-1"}, launchEnv{}, true},
	}
	for _, c := range cases {
		got, err := fromEnv(func(k string) string { return c.env[k] })
		if (err != nil) != c.bad {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		if c.bad {
			continue
		}
		if got.Connect != c.want.Connect || got.NodeRank != c.want.NodeRank || got.Nodes != c.want.Nodes || got.Workers != c.want.Workers {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	e, _ := fromEnv(func(k string) string { return map[string]string{"CHORUS_TOKEN_FILE": "/t", "CHORUS_CA": "/ca"}[k] })
	if e.Files.Token != "/t" || e.Files.CA != "/ca" {
		t.Errorf("credential files: %+v", e.Files)
	}
}

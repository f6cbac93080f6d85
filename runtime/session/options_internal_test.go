package session

import (
	"errors"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/runtime/worker"
)

// TestWorkerOptions: the workers' settings left zero come from the
// environment (a process session's Env over the controller's); a set
// option wins; a bad value is an error naming the variable.
func TestWorkerOptions(t *testing.T) {
	t.Setenv("CHORUS_CPUPROFILE", "/from/controller")
	env := []string{"CHORUS_FAKE_GPU=1", "CHORUS_IPC_AUTO_TABLE=t.json"}
	for _, tc := range []struct {
		name string
		in   worker.Options
		env  []string
		want worker.Options
	}{
		{"environment", worker.Options{}, env, worker.Options{FakeGPU: true, CPUProfile: "/from/controller", IPCAutoTable: "t.json"}},
		{"option wins", worker.Options{CPUProfile: "/mine", IPCAutoTable: "mine.json"}, env, worker.Options{FakeGPU: true, CPUProfile: "/mine", IPCAutoTable: "mine.json"}},
		{"Env over the controller's", worker.Options{}, []string{"CHORUS_CPUPROFILE=/from/env"}, worker.Options{CPUProfile: "/from/env"}},
	} {
		got, err := Options{Worker: tc.in}.workerOptions(tc.env)
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	_, err := Options{}.workerOptions([]string{"CHORUS_FAKE_GPU=yes"})
	if !errors.Is(err, config.ErrBadValue) || !strings.Contains(err.Error(), "CHORUS_FAKE_GPU") {
		t.Errorf("CHORUS_FAKE_GPU=yes: %v; want ErrBadValue naming it", err)
	}
	if got, err := ResolveWorker(worker.Options{}); err != nil || got.CPUProfile != "/from/controller" {
		t.Errorf("ResolveWorker: %+v, %v", got, err)
	}
}

package session_test

import (
	"runtime"
	"testing"

	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
	"github.com/chorus-rt/chorus/tensor"
)

// TestMemory: every worker reports its process's peak resident memory
// (process-wide and flagged shared for threaded workers, one process
// each otherwise) and, on (fake) GPUs, a device peak that covers what it
// allocated, also after the memory is dropped again.
func TestMemory(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name   string
		gpu    bool
		shared bool
		new    func(t *testing.T) *session.Session
	}{
		{"threaded-cpu", false, true, func(t *testing.T) *session.Session {
			s, err := session.NewThreaded(session.Options{NumWorkers: 2})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"threaded-fake", true, true, func(t *testing.T) *session.Session {
			s, err := session.NewThreaded(session.Options{NumWorkers: 2, DeviceIDs: []int{0, 1}, OpenDevice: worker.OpenFake})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"process-fake", true, false, func(t *testing.T) *session.Session {
			s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, DeviceIDs: []int{0, 0}},
				Env: []string{worker.EnvFakeGPU + "=1"}})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := bg(t)
			s := tc.new(t)
			defer s.Shutdown()
			empty, err := s.GetGlobalFunc(ctx, "chorus.empty")
			if err != nil {
				t.Fatal(err)
			}
			defer empty.Release()
			// 3 MiB on every worker's device, then dropped.
			r, err := s.CallPacked(empty, tensor.Shape{3 * mib}, tensor.Uint8, nil, false, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			r.Release()
			ms, err := s.Memory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 2 {
				t.Fatalf("%d reports for 2 workers", len(ms))
			}
			for w, m := range ms {
				if m.Worker != w || m.HasDevice != tc.gpu || m.HostShared != tc.shared {
					t.Errorf("worker %d: %+v (want device %v, shared %v)", w, m, tc.gpu, tc.shared)
				}
				if runtime.GOOS == "linux" && (m.HostPeakBytes < mib || m.HostError != "") {
					t.Errorf("worker %d: host peak %d bytes, %q", w, m.HostPeakBytes, m.HostError)
				}
				if want := int64(0); !tc.gpu && m.DevicePeakBytes != want {
					t.Errorf("worker %d without a GPU: device peak %d", w, m.DevicePeakBytes)
				}
				if tc.gpu && (m.DevicePeakBytes < 3*mib || m.DeviceTotalPeakBytes() < m.DevicePeakBytes) {
					t.Errorf("worker %d: device peak %d bytes after allocating 3 MiB", w, m.DevicePeakBytes)
				}
			}
			if !tc.shared && ms[0].PID == ms[1].PID {
				t.Errorf("process workers report one pid %d", ms[0].PID)
			}
		})
	}
}

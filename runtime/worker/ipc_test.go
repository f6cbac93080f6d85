package worker

import (
	"testing"
	"unsafe"

	"github.com/chorus-rt/chorus/ccl/ipc"
)

// TestCustomAllReduceTraceNames: a custom all-reduce's span names are the
// same strings at every call, so its trace site is found again (sites
// match by string identity) and a call's span allocates nothing.
func TestCustomAllReduceTraceNames(t *testing.T) {
	for _, s := range []ipc.Strategy{ipc.Auto, ipc.OneShot, ipc.TwoShot, ipc.NCCL} {
		a, b := ipcTraceNames(s), ipcTraceNames(s)
		if a.backend != "ipc/"+s.String() || a.gpu != "allreduce ipc/"+s.String() {
			t.Errorf("%s: names %+v", s, a)
		}
		if unsafe.StringData(a.backend) != unsafe.StringData(b.backend) || unsafe.StringData(a.gpu) != unsafe.StringData(b.gpu) {
			t.Errorf("%s: names made anew at each call", s)
		}
	}
	w := newTestWorker(t, 0, 1)
	span := func() {
		sp := w.BeginCollective("allreduce", "ipc", ipcTraceNames(ipc.OneShot).backend, 1024)
		sp.End(nil)
	}
	span()
	if n := testing.AllocsPerRun(100, span); n != 0 {
		t.Errorf("a custom all-reduce's span allocates %v times a call", n)
	}
}

package node

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/cluster/ctrl"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// TestFrameWriter: part lines are cut into TTrace frames of whole lines
// within ctrl.MaxTrace; a line longer than a frame is skipped, counted.
func TestFrameWriter(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := ctrl.NewConn(a, 10*time.Second), ctrl.NewConn(b, 10*time.Second)
	defer ca.Close()
	defer cb.Close()
	tr := trace.Track{Process: trace.ProcWorker(0), Thread: trace.ThreadCommands}
	var evs []trace.Event
	for i := range 20_000 {
		evs = append(evs, trace.Event{Track: tr, Name: "f", Cat: trace.CatCommand, Phase: trace.Instant, TS: int64(i + 1)})
	}
	// One event too long for any frame, in the middle.
	evs[10_000].Args.Error = strings.Repeat("x", ctrl.MaxTrace)
	fw := &frameWriter{c: ca}
	errc := make(chan error, 1)
	go func() {
		err := trace.WritePart(fw, evs)
		if err == nil {
			err = fw.flush()
		}
		if err == nil {
			err = ca.Write(ctrl.TDone, []byte("{}"))
		}
		errc <- err
	}()
	var got []trace.Event
	frames := 0
	for {
		typ, p, err := cb.Read()
		if err != nil {
			t.Fatal(err)
		}
		if typ == ctrl.TDone {
			break
		}
		frames++
		if typ != ctrl.TTrace || len(p) > ctrl.MaxTrace || !bytes.HasSuffix(p, []byte("\n")) {
			t.Fatalf("frame %d: %s of %d bytes", frames, typ, len(p))
		}
		part, err := trace.ReadPart(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, part...)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if frames < 2 || fw.skipped != 1 || len(got) != len(evs)-1 {
		t.Fatalf("%d frames, %d events of %d, %d skipped", frames, len(got), len(evs), fw.skipped)
	}
	for i, e := range got {
		want := int64(i + 1)
		if i >= 10_000 {
			want++
		}
		if e.TS != want {
			t.Fatalf("event %d at %d, want %d", i, e.TS, want)
		}
	}
}

// TestAgentTraceBound: the agent keeps its newest events within its
// share and counts the others.
func TestAgentTraceBound(t *testing.T) {
	at := newAgentTrace(2, 3, 4*256*bytesPerEvent) // share: 256 events
	if at.proc != "agent 2" || cap(at.ring) != 256 {
		t.Fatalf("%q, ring of %d", at.proc, cap(at.ring))
	}
	for i := range 1000 {
		at.relayed(&wire.Command{Action: wire.ActCallPacked, Seq: uint64(i + 1)}, int64(i+1))
	}
	evs, dropped := at.take()
	if len(evs) != 256 || dropped != 1000-256 {
		t.Fatalf("%d events kept, %d dropped", len(evs), dropped)
	}
	for i, e := range evs {
		if want := uint64(1000 - 256 + i + 1); e.Args.Seq != want || e.Track.Process != "agent 2" || e.Name != "relay CallPacked" {
			t.Fatalf("event %d: %+v, want seq %d", i, e, want)
		}
	}
	var nilTrace *agentTrace
	nilTrace.relayed(&wire.Command{}, 0) // tracing off: nothing, no panic
	nilTrace.fault("x", "y")
}

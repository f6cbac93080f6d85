package worker

import (
	"context"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/runtime/transport/shm"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// Over shared memory, a reply with no value and no failures is an
// acknowledgement of its sequence number; one with failures is a frame,
// sent before any later acknowledgement.
func TestServeAcknowledges(t *testing.T) {
	ctl, memfd, err := shm.Create(shm.Options{RingSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	wc, err := shm.Open(memfd)
	memfd.Close()
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{ID: 0, NumWorkers: 1, NumGroups: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	served := make(chan error, 1)
	go func() { served <- Serve(w, wc) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(c *wire.Command) {
		t.Helper()
		b, err := wire.AppendCommand(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := ctl.Send(b); err != nil {
			t.Fatal(err)
		}
		if err := ctl.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	send(&wire.Command{Action: wire.ActSyncWorker, Seq: 1, Worker: 0})
	if f, ack, err := ctl.RecvOrAck(ctx, 1); err != nil || f != nil || ack != 1 {
		t.Fatalf("plain sync: frame %q, ack %d, %v; want ack 1", f, ack, err)
	}
	// A failing lookup, then a sync: the failure comes as frames (the
	// notice and the reply carrying it), then the next sync's ack.
	send(&wire.Command{Action: wire.ActGetGlobalFunc, Seq: 2, Worker: wire.AllWorkers, Reg: 1, Name: "no.such.function"})
	send(&wire.Command{Action: wire.ActSyncWorker, Seq: 3, Worker: 0})
	send(&wire.Command{Action: wire.ActSyncWorker, Seq: 4, Worker: 0})
	var sawErr bool
	for {
		f, ack, err := ctl.RecvOrAck(ctx, 4) // 4, not 2: ack 3 may come before 4 is published
		if err != nil {
			t.Fatal(err)
		}
		if f == nil {
			if ack != 4 || !sawErr {
				t.Fatalf("ack %d (failure frame seen: %v); want ack 4 after the failure", ack, sawErr)
			}
			break
		}
		r, err := wire.DecodeReply(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Errors) > 0 {
			sawErr = true
		}
	}
	send(&wire.Command{Action: wire.ActShutdown, Seq: 5, Worker: wire.AllWorkers})
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

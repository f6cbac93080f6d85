package worker

import (
	"context"
	"fmt"
	"os"

	"github.com/chorus-rt/chorus/runtime/transport"
	"github.com/chorus-rt/chorus/runtime/wire"
)

// Serve runs w's command loop over conn until Shutdown (nil) or a transport
// or protocol error. A frame that does not decode means the stream can no
// longer be trusted, so the worker stops rather than guess.
//
// On a connection that can acknowledge (shared memory), a reply with no
// value and no failures, the answer to nearly every Sync, is an
// acknowledgement of its sequence number instead of a frame: the
// controller reads one word per worker instead of reading and decoding N
// frames.
func Serve(w *Worker, conn transport.Conn) error {
	var out []byte
	acker, _ := conn.(interface{ Ack(uint64) error })
	send := func(r *wire.Reply) error {
		if acker != nil && r.Plain() {
			return acker.Ack(r.Seq)
		}
		var err error
		out, err = wire.AppendReply(out[:0], r)
		if err != nil {
			// The value cannot be encoded (should have been caught by
			// Handle); report that instead of dropping the reply.
			r.Value = nil
			r.Errors = append(r.Errors, &wire.WorkerError{Worker: r.Worker, Code: wire.CodeInternal, Op: wire.ActReply, Msg: err.Error()})
			if out, err = wire.AppendReply(out[:0], r); err != nil {
				return err
			}
		}
		if err := conn.Send(out); err != nil {
			return err
		}
		return conn.Flush()
	}
	ctx := context.Background()
	for {
		frame, err := conn.Recv(ctx)
		if err != nil {
			return fmt.Errorf("worker %d: receive: %w", w.cfg.ID, err)
		}
		cmd, err := wire.DecodeCommand(frame)
		if err != nil {
			return fmt.Errorf("worker %d: %w", w.cfg.ID, err)
		}
		reply, notice, stop := w.Handle(cmd)
		if notice != nil {
			if err := send(notice); err != nil {
				return fmt.Errorf("worker %d: send: %w", w.cfg.ID, err)
			}
		}
		if reply != nil {
			if err := send(reply); err != nil {
				return fmt.Errorf("worker %d: send: %w", w.cfg.ID, err)
			}
			w.FinishCommand()
			// Trace events go to their file after every reply (the
			// controller does not wait for the write), so a worker that
			// dies loses only what its flight recorder does not hold.
			if err := w.FlushTrace(); err != nil {
				fmt.Fprintf(os.Stderr, "chorus worker %d: trace: %v (tracing stops)\n", w.cfg.ID, err)
				w.traceOut = nil
			}
		}
		if stop {
			return nil
		}
	}
}

package wire

import (
	"testing"

	"github.com/chorus-rt/chorus/runtime/value"
	"github.com/chorus-rt/chorus/tensor"
)

// benchCommand is a typical hot-path command: a call with register
// references and a few scalars.
var benchCommand = &Command{Action: ActCallPacked, Seq: 12345, Reg: 40, Func: 3,
	Args: []any{value.Ref(31), value.Ref(32), int64(4096), 0.125, true}}

func BenchmarkAppendCommand(b *testing.B) {
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendCommand(buf[:0], benchCommand); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeCommand(b *testing.B) {
	frame, err := AppendCommand(nil, benchCommand)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCommand(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func benchTensorCommand(b *testing.B) *Command {
	return &Command{Action: ActCopyToWorker0, Seq: 1, Reg: 7,
		Args: []any{randTensor(b, tensor.Float32, tensor.Shape{256, 1024}, "", 1)}} // 1 MiB
}

func BenchmarkAppendCommandTensor1MiB(b *testing.B) {
	c := benchTensorCommand(b)
	buf := make([]byte, 0, 2<<20)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendCommand(buf[:0], c)
	}
}

func BenchmarkDecodeCommandTensor1MiB(b *testing.B) {
	frame, err := AppendCommand(nil, benchTensorCommand(b))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCommand(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReplyRoundTrip(b *testing.B) {
	r := &Reply{Action: ActReply, Seq: 9, Worker: 1, Value: int64(1 << 40)}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendReply(buf[:0], r)
		if _, err := DecodeReply(buf); err != nil {
			b.Fatal(err)
		}
	}
}

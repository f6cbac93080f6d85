package wire

import (
	"bytes"
	"errors"
	"testing"
)

// checkDecodeErr fails unless err wraps one of the package's sentinels.
func checkDecodeErr(t *testing.T, err error) {
	if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
		t.Fatalf("decode error wraps neither ErrMalformed nor ErrVersion: %v", err)
	}
}

func addJunk(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("CHR"))
	f.Add([]byte("CHR\x01"))
	f.Add([]byte("CHR\x02\x04\x00\x00\x00"))
	f.Add(frame(ActCallPacked, fb{}.u32(0).i64(1).i64(2).u32(1).raw(tensorVal(9, "global", []int64{1 << 40}, 4<<40, []byte{1}))))
	f.Add(frame(ActCallPacked, fb{}.u32(0).i64(1).i64(2).u32(0xFFFFFFFF)))
	f.Add(frame(ActReply, fb{}.u32(0).u8(0).u32(0).u32(3)))
	f.Add(bytes.Repeat([]byte{0xff}, 64))
}

// Property: decoding never panics and fails only with the sentinels; a frame
// that decodes re-encodes to exactly the same bytes (the encoding is
// canonical), which decode to an equal command.
func FuzzDecodeCommand(f *testing.F) {
	cmds, reps := validFrames(f)
	for _, b := range cmds {
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add(reps[0])
	addJunk(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		c, err := DecodeCommand(frame)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if a, err := PeekAction(frame); err != nil || a != c.Action {
			t.Fatalf("PeekAction = %v, %v; decoded %v", a, err, c.Action)
		}
		again, err := AppendCommand(nil, c)
		if err != nil {
			t.Fatalf("re-encoding a decoded command: %v", err)
		}
		if !bytes.Equal(again, frame) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, frame)
		}
		c2, err := DecodeCommand(again)
		if err != nil {
			t.Fatalf("decoding the re-encoded frame: %v", err)
		}
		if !equalCommand(c, c2) {
			t.Fatalf("round trip changed the command: %+v vs %+v", c, c2)
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	cmds, reps := validFrames(f)
	for _, b := range reps {
		f.Add(b)
	}
	f.Add(cmds[0])
	addJunk(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := DecodeReply(frame)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		again, err := AppendReply(nil, r)
		if err != nil {
			t.Fatalf("re-encoding a decoded reply: %v", err)
		}
		if !bytes.Equal(again, frame) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, frame)
		}
		r2, err := DecodeReply(again)
		if err != nil {
			t.Fatalf("decoding the re-encoded frame: %v", err)
		}
		if !equalReply(r, r2) {
			t.Fatalf("round trip changed the reply: %+v vs %+v", r, r2)
		}
	})
}

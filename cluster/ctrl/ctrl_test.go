package ctrl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"
)

func frame(t Type, p []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(p)))
	return append(append(b, byte(t)), p...)
}

func TestReadFrameLimits(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"heartbeat", frame(THeartbeat, nil), true},
		{"hello", frame(THello, []byte(`{"version":1}`)), true},
		{"heartbeat with payload", frame(THeartbeat, []byte{1}), false},
		{"unknown type", frame(Type(42), nil), false},
		{"huge hello", append(binary.LittleEndian.AppendUint32(nil, MaxMessage+1), byte(THello)), false},
		{"huge wire", append(binary.LittleEndian.AppendUint32(nil, 0xffffffff), byte(TWire)), false},
		{"short", frame(THello, []byte(`{}`))[:6], false},
		{"ping", frame(TPing, PingPayload(7)), true},
		{"long ping", frame(TPing, make([]byte, 9)), false},
		{"long pong", frame(TPong, make([]byte, 17)), false},
		{"huge trace", append(binary.LittleEndian.AppendUint32(nil, MaxTrace+1), byte(TTrace)), false},
	}
	for _, c := range cases {
		var buf []byte
		_, _, err := ReadFrame(bytes.NewReader(c.in), &buf)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v", c.name, err)
		}
		if cap(buf) > 1<<20 {
			t.Errorf("%s: allocated %d bytes", c.name, cap(buf))
		}
	}
}

func TestDecodeStrict(t *testing.T) {
	var h Hello
	if err := Decode(THello, []byte(`{"version":1,"workers":2,"node_rank":-1}`), &h); err != nil || h.Workers != 2 {
		t.Fatal(h, err)
	}
	for _, bad := range []string{`{"version":1,"evil":2}`, `{"version":1} {}`, `[`, `{"workers":"x"}`} {
		if err := Decode(THello, []byte(bad), &h); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestConnRoundTripAndIdle(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := NewConn(a, time.Second), NewConn(b, 50*time.Millisecond)
	defer ca.Close()
	defer cb.Close()
	go func() { _ = ca.WriteJSON(TAbort, Abort{Reason: "x"}) }()
	typ, p, err := cb.Read()
	if err != nil || typ != TAbort {
		t.Fatal(typ, err)
	}
	var ab Abort
	if err := Decode(typ, p, &ab); err != nil || ab.Reason != "x" {
		t.Fatal(ab, err)
	}
	// Nothing more comes: the idle deadline ends the read.
	if _, _, err := cb.Read(); err == nil {
		t.Fatal("Read returned without data")
	}
	if err := ca.Write(THeartbeat, []byte{1}); err == nil {
		t.Fatal("heartbeat with payload written")
	}
}

// TestPingPong: a pong echoes the ping's clock and carries the agent's;
// payloads of another size are refused.
func TestPingPong(t *testing.T) {
	pong, err := PongPayload(PingPayload(-5), 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	sent, remote, err := ParsePong(pong)
	if err != nil || sent != -5 || remote != 1<<62 {
		t.Fatal(sent, remote, err)
	}
	if _, err := PongPayload(make([]byte, 7), 0); !errors.Is(err, ErrMalformed) {
		t.Fatal(err)
	}
	if _, _, err := ParsePong(make([]byte, 15)); !errors.Is(err, ErrMalformed) {
		t.Fatal(err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frame(THello, []byte(`{"version":1,"node_rank":0,"workers":1}`)))
	f.Add(frame(TWire, []byte("CHR\x01")))
	f.Add(frame(THeartbeat, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 4})
	f.Add(frame(TPong, make([]byte, 16)))
	f.Add(frame(TTraceEnd, []byte(`{"events":3,"dropped":1}`)))
	f.Fuzz(func(t *testing.T, in []byte) {
		var buf []byte
		typ, p, err := ReadFrame(bytes.NewReader(in), &buf)
		if err != nil {
			return
		}
		if len(p) > typ.limit() {
			t.Fatalf("%s of %d bytes accepted", typ, len(p))
		}
		for _, v := range []any{&Hello{}, &Assign{}, &Ready{}, &Lost{}, &Abort{}, &Done{}, &Refuse{}, &TraceEnd{}} {
			_ = Decode(typ, p, v)
		}
		_, _, _ = ParsePong(p)
		_, _ = PongPayload(p, 1)
	})
}

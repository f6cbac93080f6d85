package loopback

import (
	"io"
	"testing"
)

// TestTCPPair: bytes written on one end arrive on the other.
func TestTCPPair(t *testing.T) {
	a, b := TCPPair(t)
	if _, err := a.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "ping" {
		t.Fatalf("read %q, %v", got, err)
	}
}

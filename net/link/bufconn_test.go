package link

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestUnbuffer: what the buffer had read ahead comes back, buffered
// writes are flushed, and the bare connection carries the rest.
func TestUnbuffer(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	// A missing flush fails the reads below instead of hanging the test.
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))

	// A connection without link buffering comes back as it is.
	if c, left, err := Unbuffer(a); c != a || left != nil || err != nil {
		t.Fatalf("Unbuffer(unbuffered) = %v, %q, %v", c, left, err)
	}

	bc := newBufConn(a, 64)
	bc.enable()
	done := make(chan error, 1)
	go func() {
		// The peer sends "hello world" in one write; the buffered reader
		// takes all of it while its owner reads 5 bytes.
		_, err := b.Write([]byte("hello world"))
		if err == nil {
			var got [3]byte
			if _, err = io.ReadFull(b, got[:]); err == nil && string(got[:]) != "abc" {
				err = io.ErrUnexpectedEOF
			}
		}
		if err == nil {
			_, err = b.Write([]byte("!"))
		}
		done <- err
	}()
	var first [5]byte
	if _, err := io.ReadFull(bc, first[:]); err != nil || string(first[:]) != "hello" {
		t.Fatalf("read %q, %v", first, err)
	}
	if _, err := bc.Write([]byte("abc")); err != nil { // held in the buffer
		t.Fatal(err)
	}
	raw, left, err := Unbuffer(bc)
	if err != nil {
		t.Fatal(err)
	}
	if raw != a {
		t.Fatalf("Unbuffer returned %v, want the connection under the buffer", raw)
	}
	if string(left) != " world" {
		t.Fatalf("left over %q, want %q", left, " world")
	}
	rest := make([]byte, 1)
	if _, err := io.ReadFull(raw, rest); err != nil || !bytes.Equal(rest, []byte("!")) {
		t.Fatalf("after Unbuffer: read %q, %v", rest, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("peer: %v (the buffered write was not flushed?)", err)
	}
}

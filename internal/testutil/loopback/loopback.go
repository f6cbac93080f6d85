package loopback

import (
	"net"
	"testing"
)

// TCPPair returns the dialing and the accepted end of a fresh loopback
// TCP connection; both are closed when the test ends.
func TCPPair(t testing.TB) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err) // the listener's close ends the Accept
	}
	r := <-ch
	if r.err != nil {
		d.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() { d.Close(); r.c.Close() })
	return d.(*net.TCPConn), r.c.(*net.TCPConn)
}

package link

import (
	"net"
	"syscall"
	"testing"

	"github.com/chorus-rt/chorus/internal/testutil/loopback"
)

// TestSetNotSentLowat: the option lands on the socket under a TCP
// connection; a connection without a socket is an error, not a no-op.
func TestSetNotSentLowat(t *testing.T) {
	a, _ := loopback.TCPPair(t)
	for _, n := range []int{1 << 10, 256 << 10} {
		if err := SetNotSentLowat(a, n); err != nil {
			t.Fatal(err)
		}
		rc, err := a.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var got int
		var gerr error
		_ = rc.Control(func(fd uintptr) {
			got, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat)
		})
		if gerr != nil || got != n {
			t.Fatalf("TCP_NOTSENT_LOWAT = %d (%v), want %d", got, gerr, n)
		}
	}
	// Through the link buffer.
	if err := SetNotSentLowat(newBufConn(a, 4096), 4096); err != nil {
		t.Fatal(err)
	}
	if err := SetNotSentLowat(a, 1<<40); err == nil {
		t.Fatal("TCP_NOTSENT_LOWAT of 1 TiB accepted (the socket option is 32 bits)")
	}
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if err := SetNotSentLowat(p, 4096); err == nil {
		t.Fatal("a pipe took TCP_NOTSENT_LOWAT")
	}
}

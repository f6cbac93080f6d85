package link

import (
	"fmt"
	"math"
	"net"
	"syscall"
)

// tcpNotSentLowat is TCP_NOTSENT_LOWAT (linux/tcp.h; not in package
// syscall).
const tcpNotSentLowat = 25

// SetNotSentLowat bounds the bytes the kernel holds unsent for c's
// socket (TCP_NOTSENT_LOWAT): a write returns only when at most n of its
// bytes are still queued, so a writer that spreads work over several
// connections hands more to those that drain faster. c is a connection
// from Dial or Accept (TLS over the link buffer), one Unbuffer returned,
// or a *net.TCPConn.
func SetNotSentLowat(c net.Conn, n int) error {
	if n < 0 || n > math.MaxInt32 {
		return fmt.Errorf("link: TCP_NOTSENT_LOWAT %d: want 0 to %d bytes", n, math.MaxInt32)
	}
	for {
		switch x := c.(type) {
		case interface{ NetConn() net.Conn }: // *tls.Conn
			c = x.NetConn()
			continue
		case *bufConn:
			c = x.Conn
			continue
		}
		break
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("link: TCP_NOTSENT_LOWAT: a %T has no socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("link: TCP_NOTSENT_LOWAT: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, n)
	}); err != nil {
		return fmt.Errorf("link: TCP_NOTSENT_LOWAT: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("link: TCP_NOTSENT_LOWAT %d: %w", n, serr)
	}
	return nil
}

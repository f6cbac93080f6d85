package link

import (
	"bufio"
	"net"
	"sync"

	"github.com/chorus-rt/chorus/internal/sys/pollread"
)

// bufConn buffers a connection under TLS (Config.Buffer): reads fill a
// large buffer per system call and TLS parses its records from memory;
// after authentication, writes collect in a buffer until Flush, so a
// message of many 16 KiB records costs one system call per buffer, not
// one per record. (Before that, handshake writes go straight through:
// the peer waits for them.) Reads go through a pollread.Reader when the
// connection has a descriptor, with no polling until its owner asks for
// it (Poller).
type bufConn struct {
	net.Conn
	poll *pollread.Reader // nil: the connection has no descriptor
	r    *bufio.Reader
	mu   sync.Mutex // TLS may write (KeyUpdate) while its owner flushes
	w    *bufio.Writer
	on   bool
}

func newBufConn(c net.Conn, size int) *bufConn {
	b := &bufConn{Conn: c, w: bufio.NewWriterSize(c, size)}
	var rd interface{ Read([]byte) (int, error) } = c
	if p, err := pollread.New(c); err == nil {
		b.poll, rd = p, p
	}
	b.r = bufio.NewReaderSize(rd, size)
	return b
}

// Poller returns the pollread.Reader under a connection made with
// Config.Buffer (a *tls.Conn from Dial or Accept), so that its owner can
// set how long reads poll; nil for other connections and for connections
// without a descriptor.
func Poller(c interface{ NetConn() net.Conn }) *pollread.Reader {
	if b, ok := c.NetConn().(*bufConn); ok {
		return b.poll
	}
	return nil
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bufConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.on {
		return b.Conn.Write(p)
	}
	return b.w.Write(p)
}

func (b *bufConn) enable() {
	b.mu.Lock()
	b.on = true
	b.mu.Unlock()
}

// Flush writes what is buffered.
func (b *bufConn) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}

// Flush sends what a connection made with Config.Buffer holds; other
// connections need nothing.
func Flush(c interface{ NetConn() net.Conn }) error {
	if b, ok := c.NetConn().(*bufConn); ok {
		return b.Flush()
	}
	return nil
}

// Unbuffer returns the connection under c's link buffering
// (Config.Buffer) after flushing c's writes, and the bytes c had already
// read from it but not yet returned, which the caller must consume before
// anything it reads from the connection; a connection without link
// buffering comes back as it is. It is for a caller that stops using TLS
// on a link and wants its system calls straight on the socket (ccl/hier's
// plaintext data links); c must not be used afterwards.
func Unbuffer(c net.Conn) (net.Conn, []byte, error) {
	b, ok := c.(*bufConn)
	if !ok {
		return c, nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.w.Flush(); err != nil {
		return nil, nil, err
	}
	var left []byte
	if n := b.r.Buffered(); n > 0 {
		p, _ := b.r.Peek(n)
		left = append([]byte(nil), p...)
	}
	return b.Conn, left, nil
}

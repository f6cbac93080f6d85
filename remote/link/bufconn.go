package link

import (
	"bufio"
	"net"
	"sync"
)

// bufConn buffers a connection under TLS (Config.Buffer): reads fill a
// large buffer per system call and TLS parses its records from memory;
// after authentication, writes collect in a buffer until Flush, so a
// message of many 16 KiB records costs one system call per buffer, not
// one per record. (Before that, handshake writes go straight through:
// the peer waits for them.)
type bufConn struct {
	net.Conn
	r  *bufio.Reader
	mu sync.Mutex // TLS may write (KeyUpdate) while its owner flushes
	w  *bufio.Writer
	on bool
}

func newBufConn(c net.Conn, size int) *bufConn {
	return &bufConn{Conn: c, r: bufio.NewReaderSize(c, size), w: bufio.NewWriterSize(c, size)}
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

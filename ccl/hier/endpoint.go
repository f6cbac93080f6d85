package hier

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/chorus-rt/chorus/remote/link"
)

// EnvAddr is the address this host's data listeners bind to (set by the
// node agent: the address the controller reached the host at).
const EnvAddr = "CHORUS_NODE_ADDR"

// LinkBuffer is the data links' buffer under TLS (link.Config.Buffer).
const LinkBuffer = 256 << 10

// maxParked bounds connections waiting for a Join.
const maxParked = 4096

const helloBytes = 4 + 32 + 4 + 4

// endpoint is this process's data listener: it accepts authenticated
// connections, reads their hello and parks them until a Join claims them.
type endpoint struct {
	ln   *link.Listener
	cfg  *link.Config
	addr string

	mu      sync.Mutex
	parked  map[connKey]net.Conn
	changed chan struct{} // closed and replaced whenever parked grows
}

type connKey struct {
	comm     [32]byte
	from, to uint32
}

var (
	epOnce sync.Once
	ep     *endpoint
	epErr  error
)

// Endpoint starts this process's data listener (once) on EnvAddr
// (default 127.0.0.1), authenticating peers with the credentials in the
// link.Env* variables, and returns its host:port.
func Endpoint() (string, error) {
	epOnce.Do(func() { ep, epErr = startEndpoint() })
	if epErr != nil {
		return "", epErr
	}
	return ep.addr, nil
}

func startEndpoint() (*endpoint, error) {
	cfg, err := link.FilesFromEnv().Load()
	if err != nil {
		return nil, fmt.Errorf("ccl/hier: data link credentials: %w", err)
	}
	// Bulk links: buffer under TLS (one system call per 256 KiB instead of
	// one per 16 KiB record); send flushes at the end of every message.
	cfg.Buffer = LinkBuffer
	host := os.Getenv(EnvAddr)
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := link.Listen(net.JoinHostPort(host, "0"), cfg, "data")
	if err != nil {
		return nil, fmt.Errorf("ccl/hier: %w", err)
	}
	e := &endpoint{ln: ln, cfg: cfg, addr: ln.Addr().String(), parked: map[connKey]net.Conn{}, changed: make(chan struct{})}
	// The accept loop lives as long as the worker process.
	go e.loop()
	return e, nil
}

func (e *endpoint) loop() {
	for {
		c, err := e.ln.Accept(context.Background())
		if err != nil {
			return
		}
		go e.hello(c)
	}
}

// hello reads an authenticated connection's fixed-size hello and parks it.
func (e *endpoint) hello(c net.Conn) {
	var h [helloBytes]byte
	_ = c.SetReadDeadline(time.Now().Add(link.DefaultHandshakeTimeout))
	if _, err := io.ReadFull(c, h[:]); err != nil || string(h[:4]) != dataMagic {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var k connKey
	copy(k.comm[:], h[4:36])
	k.from, k.to = binary.LittleEndian.Uint32(h[36:]), binary.LittleEndian.Uint32(h[40:])
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, ok := e.parked[k]; ok || len(e.parked) >= maxParked {
		if ok {
			old.Close()
			delete(e.parked, k)
		}
		c.Close()
		return
	}
	e.parked[k] = c
	close(e.changed)
	e.changed = make(chan struct{})
}

// claim waits for the connection of k.
func (e *endpoint) claim(ctx context.Context, k connKey) (net.Conn, error) {
	for {
		e.mu.Lock()
		c, ok := e.parked[k]
		if ok {
			delete(e.parked, k)
		}
		ch := e.changed
		e.mu.Unlock()
		if ok {
			return c, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func commKey(id []byte) [32]byte { return sha256.Sum256(id) }

// dialPeer connects to a peer's endpoint and sends the hello.
func dialPeer(ctx context.Context, cfg *link.Config, addr string, k connKey) (net.Conn, error) {
	var last error
	for {
		c, err := cfg.Dial(ctx, addr, "data")
		if err == nil {
			var h [helloBytes]byte
			copy(h[:4], dataMagic)
			copy(h[4:36], k.comm[:])
			binary.LittleEndian.PutUint32(h[36:], k.from)
			binary.LittleEndian.PutUint32(h[40:], k.to)
			_, err := c.Write(h[:])
			if err == nil {
				err = link.Flush(c)
			}
			if err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		}
		if errors.Is(err, link.ErrAuth) {
			return nil, err
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

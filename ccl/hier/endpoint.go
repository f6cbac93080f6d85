package hier

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
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
	ln    *link.Listener
	cfg   *link.Config
	addr  string
	plain bool // EnvPlaintext: links switch to plain TCP after authentication

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
	plain, err := plaintextFromEnv()
	if err != nil {
		return nil, err
	}
	host := os.Getenv(EnvAddr)
	if host == "" {
		host = "127.0.0.1"
	}
	return newEndpoint(cfg, host, plain)
}

// newEndpoint listens on host and starts the accept loop, which lives as
// long as the listener (the worker process, for the process's endpoint).
func newEndpoint(cfg *link.Config, host string, plain bool) (*endpoint, error) {
	ln, err := link.Listen(net.JoinHostPort(host, "0"), cfg, "data")
	if err != nil {
		return nil, fmt.Errorf("ccl/hier: %w", err)
	}
	e := &endpoint{ln: ln, cfg: cfg, addr: ln.Addr().String(), plain: plain, parked: map[connKey]net.Conn{}, changed: make(chan struct{})}
	go e.loop()
	return e, nil
}

// refuse closes a connection after authentication failed a data-link
// check, and logs why (as remote/link logs its refusals).
func (e *endpoint) refuse(c net.Conn, why string) {
	msg := fmt.Sprintf("chorus: refused data link from %s: %s", c.RemoteAddr(), why)
	if e.cfg.Log != nil {
		e.cfg.Log(msg)
	} else {
		log.Print(msg)
	}
	c.Close()
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

// hello reads an authenticated connection's fixed-size hello, switches
// it to plain TCP if this endpoint is plaintext (plain.go), and parks it.
func (e *endpoint) hello(tc *tls.Conn) {
	var c net.Conn = tc
	var h [helloBytes]byte
	_ = c.SetDeadline(time.Now().Add(link.DefaultHandshakeTimeout))
	if _, err := io.ReadFull(c, h[:]); err != nil {
		c.Close()
		return
	}
	switch m := string(h[:4]); {
	case m == dataMagic && e.plain:
		e.refuse(c, fmt.Sprintf("a TLS data link to a plaintext endpoint (%s=1 here: set it on every host or none)", EnvPlaintext))
		return
	case m == plainMagic && !e.plain:
		e.refuse(c, fmt.Sprintf("a plaintext data link to a TLS endpoint (%s is not 1 here: set it on every host or none)", EnvPlaintext))
		return
	case m == plainMagic:
		pc, err := plainServer(tc, h[:])
		if err != nil {
			e.refuse(c, err.Error())
			return
		}
		c = pc
	case m != dataMagic:
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
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

// dialPeer connects to a peer's endpoint and sends the hello; plain
// switches the link to plain TCP after it (plain.go).
func dialPeer(ctx context.Context, cfg *link.Config, addr string, k connKey, plain bool) (net.Conn, error) {
	var last error
	for {
		c, err := cfg.Dial(ctx, addr, "data")
		if err == nil {
			var h [helloBytes]byte
			copy(h[:4], dataMagic)
			if plain {
				copy(h[:4], plainMagic)
			}
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
			if plain {
				pc, err := plainClient(c, h[:])
				if err != nil {
					c.Close()
					return nil, fmt.Errorf("%w: %v", link.ErrAuth, err)
				}
				return pc, nil
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

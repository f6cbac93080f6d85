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
	"sync"
	"time"

	"github.com/chorus-rt/chorus/net/link"
)

// LinkBuffer is the data links' buffer under TLS (link.Config.Buffer).
const LinkBuffer = 256 << 10

// maxParked bounds connections waiting for a Join.
const maxParked = 4096

// helloBytes: magic, communicator key, from and to rank, stripe index,
// the dialer's stripe count (stripe.go) and its agreeInlineMax (which sizes
// every agreement message, so the acceptor refuses a join whose ranks
// differ in it).
const helloBytes = 4 + 32 + 4 + 4 + 2 + 2 + 4

// endpoint is this process's data listener: it accepts authenticated
// connections, reads their hello and parks them until a Join claims them.
type endpoint struct {
	ln   *link.Listener
	cfg  *link.Config
	addr string
	mode linkMode // what links carry after authentication (seal.go)

	mu      sync.Mutex
	parked  map[connKey]parkedConn
	changed chan struct{} // closed and replaced whenever parked grows
}

// connKey names a data link: its communicator, the dialing and the
// accepting rank, and the stripe (0: the link every pair has; 1.. the
// leader ring's extra links, stripe.go).
type connKey struct {
	comm     [32]byte
	from, to uint32
	stripe   uint16
}

// parkedConn is an accepted link waiting for its Join, with the number
// of stripes its dialer makes to this rank (its hello's count) and the
// dialer's agreeInlineMax.
type parkedConn struct {
	c       net.Conn
	stripes int
	inline  int
}

// encodeHello fills a hello (helloBytes) for link k with magic, the
// dialer's stripe count and its agreeInlineMax.
func encodeHello(magic string, k connKey, stripes, inline int) []byte {
	h := make([]byte, helloBytes)
	copy(h[:4], magic)
	copy(h[4:36], k.comm[:])
	binary.LittleEndian.PutUint32(h[36:], k.from)
	binary.LittleEndian.PutUint32(h[40:], k.to)
	binary.LittleEndian.PutUint16(h[44:], k.stripe)
	binary.LittleEndian.PutUint16(h[46:], uint16(stripes))
	binary.LittleEndian.PutUint32(h[48:], uint32(inline))
	return h
}

// parseHello decodes an (authenticated) hello: its magic, the link's key,
// the dialer's stripe count and agreeInlineMax. It refuses a stripe count
// outside 1 to MaxStripes, a stripe index not below the count and an
// agreeInlineMax above MaxInline.
func parseHello(h []byte) (magic string, k connKey, stripes, inline int, err error) {
	if len(h) != helloBytes {
		return "", k, 0, 0, fmt.Errorf("a hello of %d bytes, want %d", len(h), helloBytes)
	}
	magic = string(h[:4])
	if _, ok := modeOf(magic); !ok {
		return "", k, 0, 0, fmt.Errorf("bad hello magic %q", magic)
	}
	copy(k.comm[:], h[4:36])
	k.from, k.to = binary.LittleEndian.Uint32(h[36:]), binary.LittleEndian.Uint32(h[40:])
	k.stripe, stripes = binary.LittleEndian.Uint16(h[44:]), int(binary.LittleEndian.Uint16(h[46:]))
	if stripes < 1 || stripes > MaxStripes || int(k.stripe) >= stripes {
		return "", connKey{}, 0, 0, fmt.Errorf("stripe %d of %d (want 0 <= stripe < stripes <= %d)", k.stripe, stripes, MaxStripes)
	}
	u := binary.LittleEndian.Uint32(h[48:])
	if u > MaxInline {
		return "", connKey{}, 0, 0, fmt.Errorf("an inline maximum of %d bytes (at most %d)", u, MaxInline)
	}
	return magic, k, stripes, int(u), nil
}

// EndpointOptions configure this process's data listener. A node agent
// hands them to its workers in their spec (session.ProcessOptions.Worker).
type EndpointOptions struct {
	// Addr is the address the listener binds to: the address the
	// controller reached the host at. Default 127.0.0.1.
	Addr string
	// Files are the credentials that authenticate peers (the node
	// agent's own).
	Files link.Files
	// Plaintext: after authentication the links carry plain TCP (plain.go;
	// trusted networks only). Every host must have the same.
	Plaintext bool
}

var (
	epMu   sync.Mutex
	ep     *endpoint
	epOpts EndpointOptions
	epErr  error
	epDone bool
)

// ErrEndpointOptions: the process's endpoint was started with other
// options than a later call asked for.
var ErrEndpointOptions = errors.New("ccl/hier: the data endpoint runs with other options")

// Endpoint starts this process's data listener (once) with options o and
// returns its host:port; a later call must pass the same options.
func Endpoint(o EndpointOptions) (string, error) {
	epMu.Lock()
	defer epMu.Unlock()
	if !epDone {
		epDone, epOpts = true, o
		ep, epErr = startEndpoint(o)
	}
	if epErr != nil {
		return "", epErr
	}
	if o != epOpts {
		return "", fmt.Errorf("%w: started with address %q, plaintext %v; asked for %q, plaintext %v", ErrEndpointOptions, epOpts.Addr, epOpts.Plaintext, o.Addr, o.Plaintext)
	}
	return ep.addr, nil
}

// ensureEndpoint starts the endpoint with the default options unless it
// runs (Endpoint, called by chorus.hier.endpoint before the controller
// makes the communicator's id, started it with the worker's).
func ensureEndpoint() error {
	epMu.Lock()
	defer epMu.Unlock()
	if !epDone {
		epDone = true
		ep, epErr = startEndpoint(EndpointOptions{})
	}
	return epErr
}

func startEndpoint(o EndpointOptions) (*endpoint, error) {
	cfg, err := o.Files.Load()
	if err != nil {
		return nil, fmt.Errorf("ccl/hier: data link credentials: %w", err)
	}
	// Bulk links: buffer under TLS (one system call per 256 KiB instead of
	// one per 16 KiB record); send flushes at the end of every message.
	cfg.Buffer = LinkBuffer
	host := o.Addr
	if host == "" {
		host = "127.0.0.1"
	}
	return newEndpoint(cfg, host, o.mode())
}

// newEndpoint listens on host and starts the accept loop, which lives as
// long as the listener (the worker process, for the process's endpoint).
func newEndpoint(cfg *link.Config, host string, mode linkMode) (*endpoint, error) {
	ln, err := link.Listen(net.JoinHostPort(host, "0"), cfg, "data")
	if err != nil {
		return nil, fmt.Errorf("ccl/hier: %w", err)
	}
	e := &endpoint{ln: ln, cfg: cfg, addr: ln.Addr().String(), mode: mode, parked: map[connKey]parkedConn{}, changed: make(chan struct{})}
	go e.loop()
	return e, nil
}

// refuse closes a connection after authentication failed a data-link
// check, and logs why (as net/link logs its refusals).
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
// it to sealed records or plain TCP as this endpoint's mode says
// (seal.go, plain.go), and parks it. Nothing of the hello is decoded
// before the TLS layer has authenticated the peer; a hello that does not
// parse, or asks for another mode, is refused (logged).
func (e *endpoint) hello(tc *tls.Conn) {
	var c net.Conn = tc
	var h [helloBytes]byte
	_ = c.SetDeadline(time.Now().Add(link.DefaultHandshakeTimeout))
	if _, err := io.ReadFull(c, h[:]); err != nil {
		c.Close()
		return
	}
	m, k, stripes, inline, err := parseHello(h[:])
	if err != nil {
		e.refuse(c, err.Error())
		return
	}
	if mode, _ := modeOf(m); mode != e.mode {
		e.refuse(c, fmt.Sprintf("a %s data link to a %s endpoint (set the plaintext option alike on every host)", mode, e.mode))
		return
	}
	switch e.mode {
	case modePlain:
		pc, err := plainServer(tc, h[:])
		if err != nil {
			e.refuse(c, err.Error())
			return
		}
		c = pc
	case modeSealed:
		sc, err := sealServer(tc, h[:])
		if err != nil {
			e.refuse(c, err.Error())
			return
		}
		c = sc
	}
	_ = c.SetDeadline(time.Time{})
	e.mu.Lock()
	defer e.mu.Unlock()
	if old, ok := e.parked[k]; ok || len(e.parked) >= maxParked {
		if ok {
			old.c.Close()
			delete(e.parked, k)
		}
		c.Close()
		return
	}
	e.parked[k] = parkedConn{c, stripes, inline}
	close(e.changed)
	e.changed = make(chan struct{})
}

// claim waits for the connection of k; stripes and inline are its
// dialer's stripe count and agreeInlineMax (its hello's).
func (e *endpoint) claim(ctx context.Context, k connKey) (c net.Conn, stripes, inline int, err error) {
	for {
		e.mu.Lock()
		pc, ok := e.parked[k]
		if ok {
			delete(e.parked, k)
		}
		ch := e.changed
		e.mu.Unlock()
		if ok {
			return pc.c, pc.stripes, pc.inline, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, 0, ctx.Err()
		}
	}
}

func commKey(id []byte) [32]byte { return sha256.Sum256(id) }

// dialPeer connects to a peer's endpoint and sends the hello, which
// tells the peer that this rank makes stripes links to it (stripe.go)
// and its agreeInlineMax; mode says what the link carries after it (sealed
// records, plain TCP or TLS records: seal.go, plain.go).
func dialPeer(ctx context.Context, cfg *link.Config, addr string, k connKey, stripes, inline int, mode linkMode) (net.Conn, error) {
	var last error
	for {
		c, err := cfg.Dial(ctx, addr, "data")
		if err == nil {
			h := encodeHello(mode.magic(), k, stripes, inline)
			_, err := c.Write(h)
			if err == nil {
				err = link.Flush(c)
			}
			if err != nil {
				c.Close()
				return nil, err
			}
			var sw func(*tls.Conn, []byte) (net.Conn, error)
			switch mode {
			case modePlain:
				sw = plainClient
			case modeSealed:
				sw = sealClient
			default:
				return c, nil
			}
			sc, err := sw(c, h)
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("%w: %v", link.ErrAuth, err)
			}
			return sc, nil
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

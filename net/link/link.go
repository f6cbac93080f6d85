package link

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/chorus-rt/chorus/net/cert"
)

// ErrAuth: the peer did not authenticate (wrong token, a certificate the
// cluster CA did not sign or that expired, not TLS at all, ...).
var ErrAuth = errors.New("link: peer not authenticated")

// ErrNoCredentials: a Config with neither certificates nor a token.
var ErrNoCredentials = errors.New("link: no credentials (give a CA with a node certificate, or a token)")

// DefaultHandshakeTimeout bounds a handshake (TLS plus proof).
const DefaultHandshakeTimeout = 10 * time.Second

// MaxPendingHandshakes bounds the handshakes a Listener runs at once.
// Further connections wait in the kernel's accept queue until one ends
// (each within its handshake deadline) instead of being refused: a job
// joins many links at once (every rank dials every lower rank of the
// other hosts, leaders several stripes each), and a refused dial failed
// the whole join.
const MaxPendingHandshakes = 32

// MinTokenBytes is the shortest token accepted.
const MinTokenBytes = 16

// Config holds a peer's credentials. Set CA and Cert for mutual TLS, Token
// for the token proof, or both (then both are required of the peer).
type Config struct {
	CA               *x509.CertPool
	Cert             *tls.Certificate
	Token            []byte
	HandshakeTimeout time.Duration
	// Buffer > 0 buffers connections under TLS (bytes per direction):
	// written data then stays in the buffer until Flush (bulk links).
	Buffer int
	// Log receives one line per refused connection; nil: the standard
	// logger.
	Log func(msg string)

	once      sync.Once
	ephemeral *tls.Certificate
	ephErr    error
}

func (c *Config) mtls() bool { return c.CA != nil && c.Cert != nil }

func (c *Config) check() error {
	if !c.mtls() && len(c.Token) == 0 {
		return ErrNoCredentials
	}
	if len(c.Token) > 0 && len(c.Token) < MinTokenBytes {
		return fmt.Errorf("link: token of %d bytes; at least %d required", len(c.Token), MinTokenBytes)
	}
	if (c.CA == nil) != (c.Cert == nil) {
		return errors.New("link: mutual TLS needs both the CA and this node's certificate")
	}
	return nil
}

func (c *Config) timeout() time.Duration {
	if c.HandshakeTimeout > 0 {
		return c.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

func (c *Config) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if c.Log != nil {
		c.Log(msg)
		return
	}
	log.Print(msg)
}

// Files names credential files; node agents hand them to their workers
// (in the worker spec) so that workers authenticate their data links the
// same way.
type Files struct {
	CA, Cert, Key, Token string
}

// Load reads the files into a Config.
func (f Files) Load() (*Config, error) {
	c := &Config{}
	if f.CA != "" || f.Cert != "" || f.Key != "" {
		if f.CA == "" || f.Cert == "" || f.Key == "" {
			return nil, errors.New("link: mutual TLS needs the CA, the certificate and its key")
		}
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("link: CA: %w", err)
		}
		c.CA = x509.NewCertPool()
		if !c.CA.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("link: CA %s: no certificate", f.CA)
		}
		kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("link: node certificate: %w", err)
		}
		c.Cert = &kp
	}
	if f.Token != "" {
		tok, err := ReadToken(f.Token)
		if err != nil {
			return nil, err
		}
		c.Token = tok
	}
	return c, c.check()
}

// ReadToken reads a token file: its content with surrounding white space
// removed; a hex string is decoded.
func ReadToken(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("link: token: %w", err)
	}
	if st.Size() > 4096 {
		return nil, fmt.Errorf("link: token file %s: %d bytes, too large", path, st.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("link: token: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if h, err := hex.DecodeString(s); err == nil && len(h) > 0 {
		return h, nil
	}
	if len(s) < MinTokenBytes {
		return nil, fmt.Errorf("link: token file %s: %d bytes, at least %d required", path, len(s), MinTokenBytes)
	}
	return []byte(s), nil
}

func (c *Config) ephemeralCert() (*tls.Certificate, error) {
	c.once.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			c.ephErr = err
			return
		}
		now := time.Now()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chorus ephemeral"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames: []string{cert.ServerName}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			c.ephErr = err
			return
		}
		c.ephemeral = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	})
	return c.ephemeral, c.ephErr
}

func (c *Config) serverTLS() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS13}
	if c.mtls() {
		tc.Certificates = []tls.Certificate{*c.Cert}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		tc.ClientCAs = c.CA
		tc.VerifyPeerCertificate = requireName
	} else {
		ec, err := c.ephemeralCert()
		if err != nil {
			return nil, fmt.Errorf("link: ephemeral certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{*ec}
	}
	return tc, nil
}

func (c *Config) clientTLS() *tls.Config {
	tc := &tls.Config{MinVersion: tls.VersionTLS13, MaxVersion: tls.VersionTLS13, ServerName: cert.ServerName}
	if c.mtls() {
		tc.Certificates = []tls.Certificate{*c.Cert}
		tc.RootCAs = c.CA
	} else {
		// The token proof, bound to this channel's keying material,
		// authenticates the server (see the package comment).
		tc.InsecureSkipVerify = true
	}
	return tc
}

// requireName checks that a verified client certificate names
// cert.ServerName (Go verifies the chain, validity and key usage).
func requireName(_ [][]byte, chains [][]*x509.Certificate) error {
	for _, ch := range chains {
		if len(ch) > 0 && ch[0].VerifyHostname(cert.ServerName) == nil {
			return nil
		}
	}
	return fmt.Errorf("client certificate does not name %s", cert.ServerName)
}

const (
	nonceBytes = 32
	macBytes   = sha256.Size
	exportLbl  = "EXPORTER-chorus-link-v1"
	accepted   = 0xA5
)

func proof(token []byte, role string, ekm, a, b []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("chorus-link-v1 " + role))
	m.Write(ekm)
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

func exporter(tc *tls.Conn, purpose string) ([]byte, error) {
	st := tc.ConnectionState()
	return st.ExportKeyingMaterial(exportLbl, []byte(purpose), 32)
}

// deadline applies the handshake deadline and ctx to raw; the returned
// function lifts both.
func (c *Config) deadline(ctx context.Context, raw net.Conn) func() {
	_ = raw.SetDeadline(time.Now().Add(c.timeout()))
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		_ = raw.SetDeadline(time.Time{})
	}
}

// Server authenticates the client on raw (an accepted connection) for the
// given purpose and returns the TLS connection. On failure raw is closed,
// the refusal logged, and the error wraps ErrAuth.
func (c *Config) Server(ctx context.Context, raw net.Conn, purpose string) (*tls.Conn, error) {
	if err := c.check(); err != nil {
		raw.Close()
		return nil, err
	}
	tc, err := c.server(ctx, raw, purpose)
	if err != nil {
		raw.Close()
		err = fmt.Errorf("%w: %s connection from %s: %v", ErrAuth, purpose, raw.RemoteAddr(), err)
		c.logf("chorus: refused %v", err)
		return nil, err
	}
	return tc, nil
}

func (c *Config) server(ctx context.Context, raw net.Conn, purpose string) (*tls.Conn, error) {
	cfg, err := c.serverTLS()
	if err != nil {
		return nil, err
	}
	lift := c.deadline(ctx, raw)
	defer lift()
	under, bc := c.buffered(raw)
	tc := tls.Server(under, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %v", err)
	}
	defer bc.enableIf()
	if len(c.Token) > 0 {
		ekm, err := exporter(tc, purpose)
		if err != nil {
			return nil, err
		}
		ns := make([]byte, nonceBytes)
		if _, err := rand.Read(ns); err != nil {
			return nil, err
		}
		if _, err := tc.Write(ns); err != nil {
			return nil, fmt.Errorf("send challenge: %v", err)
		}
		resp := make([]byte, nonceBytes+macBytes)
		if _, err := io.ReadFull(tc, resp); err != nil {
			return nil, fmt.Errorf("read token proof: %v", err)
		}
		nc, mac := resp[:nonceBytes], resp[nonceBytes:]
		if !hmac.Equal(mac, proof(c.Token, "client", ekm, ns, nc)) {
			return nil, errors.New("wrong token proof (a wrong token, or a proof replayed from another connection)")
		}
		if _, err := tc.Write(proof(c.Token, "server", ekm, nc, ns)); err != nil {
			return nil, fmt.Errorf("send token proof: %v", err)
		}
		return tc, nil
	}
	if _, err := tc.Write([]byte{accepted}); err != nil {
		return nil, fmt.Errorf("send acceptance: %v", err)
	}
	return tc, nil
}

// Client authenticates to the server on raw (a dialed connection). On
// failure raw is closed and the error wraps ErrAuth.
func (c *Config) Client(ctx context.Context, raw net.Conn, purpose string) (*tls.Conn, error) {
	if err := c.check(); err != nil {
		raw.Close()
		return nil, err
	}
	tc, err := c.client(ctx, raw, purpose)
	if err != nil {
		raw.Close()
		err = fmt.Errorf("%w: %s connection to %s: %v", ErrAuth, purpose, raw.RemoteAddr(), err)
		c.logf("chorus: refused %v", err)
		return nil, err
	}
	return tc, nil
}

func (c *Config) client(ctx context.Context, raw net.Conn, purpose string) (*tls.Conn, error) {
	lift := c.deadline(ctx, raw)
	defer lift()
	under, bc := c.buffered(raw)
	tc := tls.Client(under, c.clientTLS())
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %v", err)
	}
	if len(c.Token) > 0 {
		ekm, err := exporter(tc, purpose)
		if err != nil {
			return nil, err
		}
		ns := make([]byte, nonceBytes)
		if _, err := io.ReadFull(tc, ns); err != nil {
			return nil, fmt.Errorf("read challenge (the server refused us?): %v", err)
		}
		nc := make([]byte, nonceBytes)
		if _, err := rand.Read(nc); err != nil {
			return nil, err
		}
		if _, err := tc.Write(append(nc, proof(c.Token, "client", ekm, ns, nc)...)); err != nil {
			return nil, fmt.Errorf("send token proof: %v", err)
		}
		mac := make([]byte, macBytes)
		if _, err := io.ReadFull(tc, mac); err != nil {
			return nil, fmt.Errorf("the server refused our token proof: %v", err)
		}
		if !hmac.Equal(mac, proof(c.Token, "server", ekm, nc, ns)) {
			return nil, errors.New("the server's token proof is wrong (it does not hold our token)")
		}
		bc.enableIf()
		return tc, nil
	}
	var ok [1]byte
	if _, err := io.ReadFull(tc, ok[:]); err != nil || ok[0] != accepted {
		return nil, fmt.Errorf("the server refused our certificate: %v", err)
	}
	bc.enableIf()
	return tc, nil
}

// buffered wraps raw when Config.Buffer asks for it.
func (c *Config) buffered(raw net.Conn) (net.Conn, *bufConn) {
	if c.Buffer <= 0 {
		return raw, nil
	}
	b := newBufConn(raw, c.Buffer)
	return b, b
}

func (b *bufConn) enableIf() {
	if b != nil {
		b.enable()
	}
}

// Dial connects to addr and authenticates as a client.
func (c *Config) Dial(ctx context.Context, addr, purpose string) (*tls.Conn, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: c.timeout()}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("link: dial %s: %w", addr, err)
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		_ = tcp.SetNoDelay(true)
	}
	return c.Client(ctx, raw, purpose)
}

// Listener accepts and authenticates connections.
type Listener struct {
	ln      net.Listener
	cfg     *Config
	purpose string
	out     chan *tls.Conn
	sem     chan struct{}
	done    chan struct{}
	ctx     context.Context // ends handshakes in progress at Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
}

// Listen binds addr (host:port; loopback unless told otherwise is the
// caller's default) and starts accepting.
func Listen(addr string, cfg *Config, purpose string) (*Listener, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("link: listen %s: %w", addr, err)
	}
	l := &Listener{ln: ln, cfg: cfg, purpose: purpose, out: make(chan *tls.Conn), sem: make(chan struct{}, MaxPendingHandshakes), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.loop()
	return l, nil
}

// Addr is the bound address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

func (l *Listener) loop() {
	defer l.wg.Done()
	for {
		// A slot first: at most MaxPendingHandshakes run; the rest wait
		// in the kernel's accept queue.
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return
		}
		raw, err := l.ln.Accept()
		if err != nil {
			<-l.sem
			return
		}
		if tcp, ok := raw.(*net.TCPConn); ok {
			_ = tcp.SetNoDelay(true)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-l.sem }()
			tc, err := l.cfg.Server(l.ctx, raw, l.purpose)
			if err != nil {
				return
			}
			select {
			case l.out <- tc:
			case <-l.done:
				tc.Close()
			}
		}()
	}
}

// Accept returns the next authenticated connection.
func (l *Listener) Accept(ctx context.Context) (*tls.Conn, error) {
	select {
	case tc := <-l.out:
		return tc, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and waits for handshakes in progress to end.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		l.cancel()
		err = l.ln.Close()
		l.wg.Wait()
	})
	return err
}

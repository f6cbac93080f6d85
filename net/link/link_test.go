package link

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/net/cert"
)

type logbuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logbuf) log(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *logbuf) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func tlsPair(t *testing.T, ca *cert.Pair, name string, notBefore time.Time, valid time.Duration) (*x509.CertPool, *tls.Certificate) {
	t.Helper()
	p, err := ca.Issue(name, nil, notBefore, valid)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	return pool, &kp
}

func newCA(t *testing.T) *cert.Pair {
	t.Helper()
	ca, err := cert.NewCA("test", time.Now().Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// pipe runs the server side on an accepted loopback connection and the
// client side on a dialed one, and returns both errors.
func pipe(t *testing.T, srv, cli *Config) (serr, cerr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		raw, err := ln.Accept()
		if err != nil {
			serr = err
			return
		}
		tc, err := srv.Server(context.Background(), raw, "test")
		if err == nil {
			// Prove the channel works after authentication.
			if _, err = tc.Write([]byte("ok")); err == nil {
				err = Flush(tc) // needed with Config.Buffer
			}
			tc.Close()
		}
		serr = err
	}()
	tc, err := cli.Dial(context.Background(), ln.Addr().String(), "test")
	if err == nil {
		var b [2]byte
		_, err = io.ReadFull(tc, b[:])
		tc.Close()
	}
	cerr = err
	wg.Wait()
	return serr, cerr
}

func TestHandshakes(t *testing.T) {
	leaktest.Check(t)
	ca := newCA(t)
	pool, kp := tlsPair(t, ca, "a", time.Now().Add(-time.Hour), time.Hour*2)
	_, kp2 := tlsPair(t, ca, "b", time.Now().Add(-time.Hour), time.Hour*2)
	foreign := newCA(t)
	fpool, fkp := tlsPair(t, foreign, "f", time.Now().Add(-time.Hour), 2*time.Hour)
	_, expired := tlsPair(t, ca, "old", time.Now().Add(-3*time.Hour), time.Hour)
	tok := []byte("0123456789abcdef-token")
	bad := []byte("0123456789abcdef-wrong")
	cases := []struct {
		name     string
		srv, cli *Config
		ok       bool
		why      string // in the server's log line when refused
	}{
		{"token", &Config{Token: tok}, &Config{Token: tok}, true, ""},
		{"token, buffered", &Config{Token: tok, Buffer: 4096}, &Config{Token: tok, Buffer: 4096}, true, ""},
		{"mtls, buffered", &Config{CA: pool, Cert: kp, Buffer: 4096}, &Config{CA: pool, Cert: kp2, Buffer: 4096}, true, ""},
		{"mtls", &Config{CA: pool, Cert: kp}, &Config{CA: pool, Cert: kp2}, true, ""},
		{"mtls+token", &Config{CA: pool, Cert: kp, Token: tok}, &Config{CA: pool, Cert: kp2, Token: tok}, true, ""},
		{"wrong token", &Config{Token: tok}, &Config{Token: bad}, false, "wrong token proof"},
		{"foreign cert", &Config{CA: pool, Cert: kp}, &Config{CA: pool, Cert: fkp}, false, "TLS handshake"},
		{"foreign CA server", &Config{CA: fpool, Cert: fkp}, &Config{CA: pool, Cert: kp2}, false, "TLS handshake"},
		{"expired cert", &Config{CA: pool, Cert: kp}, &Config{CA: pool, Cert: expired}, false, "expired"},
		{"mtls+token wrong token", &Config{CA: pool, Cert: kp, Token: tok}, &Config{CA: pool, Cert: kp2, Token: bad}, false, "wrong token proof"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var slog, clog logbuf
			tc.srv.Log, tc.cli.Log = slog.log, clog.log
			tc.srv.HandshakeTimeout, tc.cli.HandshakeTimeout = 5*time.Second, 5*time.Second
			serr, cerr := pipe(t, tc.srv, tc.cli)
			if tc.ok {
				if serr != nil || cerr != nil {
					t.Fatalf("server %v, client %v", serr, cerr)
				}
				return
			}
			if serr == nil && cerr == nil {
				t.Fatal("both sides accepted")
			}
			if cerr == nil {
				t.Fatal("client went on after the server refused it")
			}
			if tc.name != "foreign CA server" {
				if !errors.Is(serr, ErrAuth) {
					t.Fatalf("server error %v, want ErrAuth", serr)
				}
				if !strings.Contains(slog.text(), "refused") || !strings.Contains(slog.text(), tc.why) {
					t.Fatalf("server log %q lacks %q", slog.text(), tc.why)
				}
			}
			if !errors.Is(cerr, ErrAuth) {
				t.Fatalf("client error %v, want ErrAuth", cerr)
			}
		})
	}
}

// TestPlaintextClient: a client that speaks no TLS is refused and logged.
func TestPlaintextClient(t *testing.T) {
	leaktest.Check(t)
	var lb logbuf
	l, err := Listen("127.0.0.1:0", &Config{Token: []byte("0123456789abcdef"), Log: lb.log}, "control")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("GET / HTTP/1.0\r\n\r\nhello chorus, here is a command\n")); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(raw)
	if err != nil {
		t.Fatalf("server kept a plaintext client open: %v", err)
	}
	if strings.Contains(string(b), "chorus") {
		t.Fatalf("server answered a plaintext client: %q", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if c, err := l.Accept(ctx); err == nil {
		c.Close()
		t.Fatal("a plaintext client was accepted")
	}
	waitLog(t, &lb, "TLS handshake")
}

func waitLog(t *testing.T, lb *logbuf, want string) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if s := lb.text(); strings.Contains(s, "refused") && strings.Contains(s, want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("log %q lacks a refusal mentioning %q", lb.text(), want)
}

// TestSilentClient: a client that connects and sends nothing is dropped
// at the handshake deadline.
func TestSilentClient(t *testing.T) {
	leaktest.Check(t)
	var lb logbuf
	l, err := Listen("127.0.0.1:0", &Config{Token: []byte("0123456789abcdef"), Log: lb.log, HandshakeTimeout: 100 * time.Millisecond}, "control")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(raw); err != nil {
		t.Fatalf("the server did not close a silent client: %v", err)
	}
	waitLog(t, &lb, "timeout")
}

// TestHandshakesQueue: more connections than MaxPendingHandshakes wait
// for a slot instead of being refused. With every slot held by a silent
// client, a real client's connection queues; when the silent ones go,
// it is authenticated. Then 2 x MaxPendingHandshakes dialled at once all
// are.
func TestHandshakesQueue(t *testing.T) {
	leaktest.Check(t)
	tok := []byte("0123456789abcdef-token")
	var lb logbuf
	cfg := &Config{Token: tok, Log: lb.log, HandshakeTimeout: 30 * time.Second}
	l, err := Listen("127.0.0.1:0", cfg, "control")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var silent []net.Conn
	for range MaxPendingHandshakes {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := &Config{Token: tok, HandshakeTimeout: 30 * time.Second}
	// Connected (in the accept queue, behind the silent ones) before its
	// handshake starts.
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan error, 1)
	go func() {
		c, err := cli.Client(ctx, raw, "control")
		if err == nil {
			c.Close()
		}
		queued <- err
	}()
	for _, c := range silent {
		c.Close()
	}
	if err := <-queued; err != nil {
		t.Fatalf("queued client: %v (log %q)", err, lb.text())
	}
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatalf("the queued client was not accepted: %v (log %q)", err, lb.text())
	}
	c.Close()
	n := 2 * MaxPendingHandshakes
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := cli.Dial(ctx, l.Addr().String(), "control")
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	for i := range n {
		c, err := l.Accept(ctx)
		if err != nil {
			t.Fatalf("accepted %d of %d: %v (log %q)", i, n, err, lb.text())
		}
		c.Close()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("dial: %v (log %q)", err, lb.text())
		}
	}
	if strings.Contains(lb.text(), "too many") {
		t.Fatalf("a connection was refused for want of a slot: %q", lb.text())
	}
}

// TestReplayedProof: a token proof recorded from one connection, replayed
// on another, is refused (it is bound to the first connection's keying
// material and nonce).
func TestReplayedProof(t *testing.T) {
	leaktest.Check(t)
	tok := []byte("0123456789abcdef-token")
	// Record what an honest client sends, as a server would see it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	recorded := make(chan []byte, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			recorded <- nil
			return
		}
		defer raw.Close()
		srv := &Config{Token: tok}
		cfg, _ := srv.serverTLS()
		tc := tls.Server(raw, cfg)
		if tc.Handshake() != nil {
			recorded <- nil
			return
		}
		ns := make([]byte, nonceBytes)
		tc.Write(ns)
		resp := make([]byte, nonceBytes+macBytes)
		io.ReadFull(tc, resp)
		recorded <- resp
	}()
	cli := &Config{Token: tok, HandshakeTimeout: time.Second, Log: func(string) {}}
	if c, err := cli.Dial(context.Background(), ln.Addr().String(), "control"); err == nil {
		c.Close()
	}
	resp := <-recorded
	if len(resp) != nonceBytes+macBytes {
		t.Fatal("recording failed")
	}
	// Replay it to a real server.
	var lb logbuf
	l, err := Listen("127.0.0.1:0", &Config{Token: tok, Log: lb.log}, "control")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, (&Config{Token: tok}).clientTLS())
	defer tc.Close()
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	ns := make([]byte, nonceBytes)
	if _, err := io.ReadFull(tc, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Write(resp); err != nil {
		t.Fatal(err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.ReadFull(tc, make([]byte, macBytes)); err == nil {
		t.Fatalf("the server answered a replayed proof (%d bytes)", n)
	}
	waitLog(t, &lb, "wrong token proof")
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []*Config{{}, {Token: []byte("short")}, {CA: x509.NewCertPool()}} {
		if _, err := Listen("127.0.0.1:0", c, "x"); err == nil {
			t.Errorf("%+v: Listen accepted bad credentials", c)
		}
	}
	if _, err := Listen("127.0.0.1:0", &Config{}, "x"); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("no credentials: %v", err)
	}
}

package hier

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/tensor"
)

// testEndpoint is a data endpoint on loopback with the process's
// credentials whose links carry what mode says; its refusals arrive on
// the returned channel. The caller closes it.
func testEndpoint(t *testing.T, mode linkMode) (*endpoint, <-chan string) {
	t.Helper()
	cfg, err := testFiles.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Buffer = LinkBuffer
	logs := make(chan string, 16)
	cfg.Log = func(s string) {
		select {
		case logs <- s:
		default:
		}
	}
	e, err := newEndpoint(cfg, "127.0.0.1", mode)
	if err != nil {
		t.Fatal(err)
	}
	return e, logs
}

// usePlainEndpoint stands a plaintext endpoint in for the process's one
// until the test ends; its refusals arrive on the returned channel.
func usePlainEndpoint(t *testing.T) (*endpoint, <-chan string) {
	t.Helper()
	return useEndpoint(t, modePlain)
}

// useEndpoint stands an endpoint of mode in for the process's one until
// the test ends; its refusals arrive on the returned channel.
func useEndpoint(t *testing.T, mode linkMode) (*endpoint, <-chan string) {
	t.Helper()
	pe, logs := testEndpoint(t, mode)
	old := ep
	ep = pe
	t.Cleanup(func() {
		ep = old
		pe.ln.Close()
		pe.mu.Lock()
		for _, pc := range pe.parked {
			pc.c.Close()
		}
		pe.mu.Unlock()
	})
	return pe, logs
}

// TestPlaintextAllReduce: with a plaintext endpoint the links are
// plain TCP (not TLS) and the collectives give the same results.
func TestPlaintextAllReduce(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch, rp int) { smallMax, chunkBytes, reducePieceBytes = a, ch, rp }(smallMax, chunkBytes, reducePieceBytes)
	smallMax, chunkBytes, reducePieceBytes = 64, 1000, 200
	multiRingFrom(t, 0)
	usePlainEndpoint(t)
	for _, lay := range [][]int{{2, 2}, {1, 1, 1}} {
		comms := world(t, lay, 10*time.Second)
		for r, c := range comms {
			for q, p := range c.peers {
				if p == nil {
					continue
				}
				if _, ok := p.c.(*tls.Conn); ok {
					t.Fatalf("%v: rank %d's link to rank %d is TLS", lay, r, q)
				}
				// Straight on the socket, not through the link buffer
				// of its TLS set-up.
				if _, ok := p.c.(*net.TCPConn); !ok || !p.bare {
					t.Fatalf("%v: rank %d's link to rank %d is a %T (bare %v), want a bare *net.TCPConn", lay, r, q, p.c, p.bare)
				}
			}
		}
		checkAllReduce(t, "plaintext f32", comms, tensor.Float32, reduce.Sum, 20000, 1, func(r int) bool { return r == 0 })
		checkAllReduce(t, "plaintext bf16", comms, tensor.BFloat16, reduce.Avg, 777, 2, func(int) bool { return false })
	}
}

// plainHello is a plaintext hello for comm key k.
func plainHello(k connKey) []byte { return encodeHello(plainMagic, k, 1, 0) }

// startSwitch dials pe over TLS (authenticated), asks for plain TCP and
// reads the acceptance: the server's nonce.
func startSwitch(t *testing.T, pe *endpoint, k connKey) (*tls.Conn, []byte) {
	t.Helper()
	tc, err := pe.cfg.Dial(context.Background(), pe.addr, "data")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Write(plainHello(k)); err != nil {
		t.Fatal(err)
	}
	if err := link.Flush(tc); err != nil {
		t.Fatal(err)
	}
	acc := make([]byte, 33)
	if _, err := io.ReadFull(tc, acc); err != nil || acc[0] != plainOK {
		t.Fatalf("acceptance %x: %v", acc, err)
	}
	return tc, acc[1:]
}

// wantRefused waits for the endpoint's refusal naming why, checks the
// client sees its link closed and that nothing was parked.
func wantRefused(t *testing.T, pe *endpoint, logs <-chan string, c net.Conn, why string) {
	t.Helper()
	select {
	case msg := <-logs:
		if !strings.Contains(msg, why) {
			t.Fatalf("refusal %q does not say %q", msg, why)
		}
	case <-time.After(20 * time.Second): // a hang guard, not a measurement
		t.Fatalf("no refusal logged (want %q)", why)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the refused link still delivers data")
	}
	c.Close()
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if len(pe.parked) != 0 {
		t.Fatalf("%d links parked after a refusal", len(pe.parked))
	}
}

// TestPlaintextRefused: a plaintext endpoint refuses, and logs, a link
// whose switch proof is wrong, one whose proof is keyed by another TLS
// session (replayed from another link), and a TLS-record link; a sealed
// endpoint refuses a plaintext request; a client without TLS never gets
// that far. A correct switch parks the link and data flows both ways.
func TestPlaintextRefused(t *testing.T) {
	leaktest.Check(t)
	sealedAddr, err := Endpoint(testOpts) // the process's (sealed) endpoint, before the swap
	if err != nil {
		t.Fatal(err)
	}
	pe, logs := usePlainEndpoint(t)
	k := connKey{from: 1, to: 2}
	copy(k.comm[:], "plaintext test")

	// A wrong proof.
	tc, _ := startSwitch(t, pe, k)
	raw := tc.NetConn()
	if err := writeFlush(raw, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, pe, logs, raw, "wrong plaintext-switch proof")

	// A proof keyed by another link's TLS session.
	other, _ := startSwitch(t, pe, connKey{comm: k.comm, from: 3, to: 2})
	otherKey, err := plainKey(other, plainHello(connKey{comm: k.comm, from: 3, to: 2}))
	if err != nil {
		t.Fatal(err)
	}
	tc, ns := startSwitch(t, pe, k)
	nc := make([]byte, 32)
	raw = tc.NetConn()
	if err := writeFlush(raw, append(nc, plainProof(otherKey, "client", ns, nc)...)); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, pe, logs, raw, "wrong plaintext-switch proof")
	other.Close()
	wantRefused(t, pe, logs, other.NetConn(), "plaintext-switch proof")

	// A TLS-mode hello to the plaintext endpoint.
	c, err := dialPeer(context.Background(), pe.cfg, pe.addr, k, 1, 0, modeTLS)
	if err != nil {
		t.Fatal(err)
	}
	wantRefused(t, pe, logs, c, "a TLS-record data link to a plaintext endpoint")

	// A plaintext request to a sealed endpoint.
	if _, err := dialPeer(context.Background(), pe.cfg, sealedAddr, k, 1, 0, modePlain); !errors.Is(err, link.ErrAuth) || !strings.Contains(err.Error(), "plaintext") {
		t.Fatalf("plaintext request to a TLS endpoint: %v", err)
	}

	// No TLS at all: the hello in the clear is refused by the TLS layer.
	nt, err := net.Dial("tcp", pe.addr)
	if err != nil {
		t.Fatal(err)
	}
	nt.Write(plainHello(k))
	_ = nt.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadAll(nt); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("plain TCP client: %v", err)
	}
	nt.Close()

	// The right proof: parked, and bytes flow both ways in the clear.
	c, err = dialPeer(context.Background(), pe.cfg, pe.addr, k, 1, 0, modePlain)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*tls.Conn); ok {
		t.Fatal("the switched link is still TLS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, _, _, err := pe.claim(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := writeFlush(c, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "ping" {
		t.Fatalf("server read %q: %v", got, err)
	}
	if err := writeFlush(s, []byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "pong" {
		t.Fatalf("client read %q: %v", got, err)
	}
}

// flakyConn is a buffered net.Conn whose Write or Flush fails on demand,
// and which counts the flushes it was asked for.
type flakyConn struct {
	net.Conn
	writeErr, flushErr error
	flushes            int
}

func (c *flakyConn) Write(p []byte) (int, error) {
	if c.writeErr != nil {
		return 0, c.writeErr
	}
	return len(p), nil
}

func (c *flakyConn) Flush() error { c.flushes++; return c.flushErr }

// TestWriteFlushReportsEither: a failed write is reported (and nothing
// is flushed after it), and so is a failed flush after a good write;
// sealClient's first sealed record and the handshakes rely on it.
func TestWriteFlushReportsEither(t *testing.T) {
	errWrite, errFlush := errors.New("write broke"), errors.New("flush broke")
	cases := []struct {
		name             string
		writeErr, flushE error
		want             error
		flushes          int
	}{
		{"both succeed", nil, nil, nil, 1},
		{"write fails", errWrite, nil, errWrite, 0},
		{"flush fails", nil, errFlush, errFlush, 1},
		{"both fail", errWrite, errFlush, errWrite, 0},
	}
	for _, tc := range cases {
		c := &flakyConn{writeErr: tc.writeErr, flushErr: tc.flushE}
		err := writeFlush(c, []byte(sealReady))
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: writeFlush = %v, want %v", tc.name, err, tc.want)
		}
		if c.flushes != tc.flushes {
			t.Errorf("%s: %d flushes, want %d", tc.name, c.flushes, tc.flushes)
		}
	}
}

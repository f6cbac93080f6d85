package hier

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/net/seal"
	"github.com/chorus-rt/chorus/tensor"
)

// TestEndpointMode: sealed records unless the options ask for plaintext.
func TestEndpointMode(t *testing.T) {
	for _, tc := range []struct {
		o    EndpointOptions
		want linkMode
	}{
		{EndpointOptions{}, modeSealed},
		{EndpointOptions{Plaintext: true}, modePlain},
	} {
		if got := tc.o.mode(); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.o, got, tc.want)
		}
	}
	// The process's endpoint runs with testOpts: other options are refused.
	if _, err := Endpoint(EndpointOptions{Files: testFiles, Plaintext: true}); !errors.Is(err, ErrEndpointOptions) {
		t.Errorf("Endpoint with other options: %v, want ErrEndpointOptions", err)
	}
}

// TestLinkModes: the process's endpoint (the default) makes sealed links,
// a TLS-record endpoint (tests only) TLS-record links; on every layout (leader ring,
// multi-ring, striped) every link is of that kind, reads through a
// poller, and the collectives match the float64 reference.
func TestLinkModes(t *testing.T) {
	leaktest.Check(t)
	defer func(a, ch, rp int) { smallMax, chunkBytes, reducePieceBytes = a, ch, rp }(smallMax, chunkBytes, reducePieceBytes)
	smallMax, chunkBytes, reducePieceBytes = 64, 1000, 200
	stripesFrom(t, 0)
	multiRingFrom(t, 0)
	for _, mode := range []linkMode{modeSealed, modeTLS} {
		if mode != modeSealed {
			useEndpoint(t, mode)
		}
		for _, lay := range [][]int{{2, 2}, {1, 1, 1}} {
			stripesByRank(t, "2")
			comms := world(t, lay, 10*time.Second)
			links := 0
			for r, c := range comms {
				c.eachLink(func(p *peer) {
					links++
					var ok bool
					switch mode {
					case modeSealed:
						_, ok = p.c.(*sealedConn)
					case modeTLS:
						_, ok = p.c.(*tls.Conn)
					}
					if !ok || p.bare || p.poll == nil {
						t.Fatalf("%v %v: rank %d's stripe-%d link to rank %d is a %T (bare %v, poller %v)", mode, lay, r, p.stripe, p.rank, p.c, p.bare, p.poll != nil)
					}
				})
			}
			if links == 0 {
				t.Fatalf("%v %v: no links", mode, lay)
			}
			name := fmt.Sprintf("%v %v", mode, lay)
			checkAllReduce(t, name+" f32", comms, tensor.Float32, reduce.Sum, 20000, 1, func(r int) bool { return r == 0 })
			checkAllReduce(t, name+" bf16", comms, tensor.BFloat16, reduce.Avg, 777, 2, func(int) bool { return false })
			checkAllReduce(t, name+" f64 large", comms, tensor.Float64, reduce.Max, 3<<16, 3, func(r int) bool { return r%2 == 1 })
		}
	}
}

// sealedHello dials e over TLS and sends a sealed hello for k; it returns
// the TLS connection with the acceptance read.
func sealedHello(t *testing.T, e *endpoint, k connKey) (*tls.Conn, []byte) {
	t.Helper()
	tc, err := e.cfg.Dial(context.Background(), e.addr, "data")
	if err != nil {
		t.Fatal(err)
	}
	h := encodeHello(sealMagic, k, 1, 0)
	if err := writeFlush(tc, h); err != nil {
		t.Fatal(err)
	}
	acc := make([]byte, 1)
	if _, err := io.ReadFull(tc, acc); err != nil || acc[0] != sealOK {
		t.Fatalf("acceptance %x: %v", acc, err)
	}
	return tc, h
}

// TestSealRefused: an endpoint refuses, and logs, a link of another mode
// (each pair of modes, both ways), a sealed link whose first record is
// keyed by another context or another link's TLS session, says the wrong
// thing, or is not a record at all; a correct switch parks the link and
// data flows both ways.
func TestSealRefused(t *testing.T) {
	leaktest.Check(t)
	sealedAddr, err := Endpoint(testOpts)
	if err != nil {
		t.Fatal(err)
	}
	k := connKey{from: 1, to: 2}
	copy(k.comm[:], "seal test")
	for _, tc := range []struct {
		endpoint, dialer linkMode
	}{
		{modeTLS, modeSealed},
		{modePlain, modeSealed},
		{modeSealed, modeTLS},
		{modeSealed, modePlain},
	} {
		e, logs := testEndpoint(t, tc.endpoint)
		c, err := dialPeer(context.Background(), e.cfg, e.addr, k, 1, 0, tc.dialer)
		if tc.dialer == modeTLS {
			if err != nil {
				t.Fatalf("%v to %v: %v", tc.dialer, tc.endpoint, err)
			}
			wantRefused(t, e, logs, c, fmt.Sprintf("a %s data link to a %s endpoint", tc.dialer, tc.endpoint))
		} else {
			if !errors.Is(err, link.ErrAuth) || !strings.Contains(err.Error(), "refused a") {
				t.Fatalf("%v to %v: %v, want a refusal", tc.dialer, tc.endpoint, err)
			}
			select {
			case msg := <-logs:
				if want := fmt.Sprintf("a %s data link to a %s endpoint", tc.dialer, tc.endpoint); !strings.Contains(msg, want) {
					t.Fatalf("refusal %q does not say %q", msg, want)
				}
			case <-time.After(20 * time.Second): // a hang guard
				t.Fatalf("%v to %v: no refusal logged", tc.dialer, tc.endpoint)
			}
		}
		e.ln.Close()
	}

	se, logs := useEndpoint(t, modeSealed)
	if se.addr == sealedAddr {
		t.Fatal("the test endpoint is the process's")
	}
	// First records that must be refused.
	other, otherHello := sealedHello(t, se, connKey{comm: k.comm, from: 3, to: 2})
	otherState := other.ConnectionState()
	for _, bad := range []struct {
		name string
		keys func(tc *tls.Conn, h []byte) (seal.Keys, error)
		msg  string
		why  string
	}{
		{"another context", func(tc *tls.Conn, h []byte) (seal.Keys, error) {
			st := tc.ConnectionState()
			return seal.Derive(&st, append([]byte("x"), h...), true)
		}, sealReady, "authentication"},
		{"another link's session", func(*tls.Conn, []byte) (seal.Keys, error) {
			return seal.Derive(&otherState, otherHello, true)
		}, sealReady, "authentication"},
		{"the server's keys", func(tc *tls.Conn, h []byte) (seal.Keys, error) {
			st := tc.ConnectionState()
			return seal.Derive(&st, h, false)
		}, sealReady, "authentication"},
		{"the wrong words", func(tc *tls.Conn, h []byte) (seal.Keys, error) {
			st := tc.ConnectionState()
			return seal.Derive(&st, h, true)
		}, strings.ToUpper(sealReady), "first sealed record"},
		{"no record", nil, "", "length"},
	} {
		c, h := sealedHello(t, se, k)
		raw := c.NetConn()
		if bad.keys == nil {
			raw.Write([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
			link.Flush(c)
		} else {
			keys, err := bad.keys(c, h)
			if err != nil {
				t.Fatal(err)
			}
			sc := seal.New(raw, nil, keys)
			sc.Write([]byte(bad.msg))
			sc.Flush()
			link.Flush(c) // raw is the link buffer under c's TLS
		}
		wantRefused(t, se, logs, raw, bad.why)
	}
	other.Close()
	wantRefused(t, se, logs, other.NetConn(), "first sealed record")

	// The right switch: parked, and data flows both ways sealed.
	c, err := dialPeer(context.Background(), se.cfg, se.addr, k, 1, 0, modeSealed)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, _, _, err := se.claim(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, x := range []net2{{c, s, "ping"}, {s, c, "pong"}} {
		if err := writeFlush(x.from, []byte(x.msg)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(x.msg))
		if _, err := io.ReadFull(x.to, got); err != nil || string(got) != x.msg {
			t.Fatalf("read %q, want %q: %v", got, x.msg, err)
		}
	}
}

// net2 is a message from one end of a link to the other.
type net2 struct {
	from, to net.Conn
	msg      string
}

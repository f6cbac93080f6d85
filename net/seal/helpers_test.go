package seal

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/loopback"
)

var _ net.Conn = (*Conn)(nil)

// fakeEx is an Exporter of a pretend TLS session: the same secret gives
// the same keying material for the same label and context.
type fakeEx struct{ secret string }

func (f fakeEx) ExportKeyingMaterial(label string, context []byte, length int) ([]byte, error) {
	return hkdf.Expand(sha256.New, []byte(f.secret + "0123456789abcdef0123456789abcdef")[:32], label+"|"+string(context), length)
}

// errEx is an Exporter that fails.
type errEx struct{ err error }

func (e errEx) ExportKeyingMaterial(string, []byte, int) ([]byte, error) { return nil, e.err }

// shortEx returns too few bytes.
type shortEx struct{}

func (shortEx) ExportKeyingMaterial(string, []byte, int) ([]byte, error) {
	return make([]byte, 32), nil
}

// keyPair derives both ends' keys from one fake session.
func keyPair(t testing.TB, session, context string) (client, server Keys) {
	t.Helper()
	ex := fakeEx{session}
	c, err := Derive(ex, []byte(context), true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Derive(ex, []byte(context), false)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// sink is a net.Conn whose writes collect in buf (only Write is usable).
type sink struct {
	net.Conn
	buf    []byte
	writes int
	err    error // returned by every Write when set
}

func (s *sink) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.buf = append(s.buf, p...)
	s.writes++
	return len(p), nil
}

// sealStream seals msgs with k, flushing after each, and returns the
// stream.
func sealStream(t testing.TB, k Keys, msgs ...[]byte) []byte {
	t.Helper()
	s := &sink{}
	c := New(s, nil, k)
	for _, m := range msgs {
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return s.buf
}

// records splits a well-formed stream into its records.
func records(t testing.TB, stream []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(stream) > 0 {
		if len(stream) < hdrLen {
			t.Fatalf("stream ends inside a header")
		}
		n := hdrLen + int(binary.BigEndian.Uint32(stream))
		if n > len(stream) {
			t.Fatalf("stream ends inside a record")
		}
		out = append(out, stream[:n:n])
		stream = stream[n:]
	}
	return out
}

func join(recs ...[]byte) []byte {
	var out []byte
	for _, r := range recs {
		out = append(out, r...)
	}
	return out
}

// pattern returns n bytes that differ from record to record.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ byte(i>>9) ^ seed
	}
	return b
}

// selfSigned makes an ed25519 certificate for "seal-test" and a pool
// that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "seal-test"},
		DNSNames:     []string{"seal-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, pool
}

// tlsPair runs a TLS 1.3 handshake over a loopback TCP pair and returns
// both ends' bare TCP connections and connection states. The server
// sends no session tickets, so no TLS bytes follow the handshake.
func tlsPair(t testing.TB) (cliRaw, srvRaw net.Conn, cli, srv *tls.ConnectionState) {
	t.Helper()
	cert, pool := selfSigned(t)
	d, a := loopback.TCPPair(t)
	deadline := time.Now().Add(60 * time.Second) // bounds a hung test; never reached when it works
	d.SetDeadline(deadline)
	a.SetDeadline(deadline)
	tc := tls.Client(d, &tls.Config{RootCAs: pool, ServerName: "seal-test", MinVersion: tls.VersionTLS13})
	ts := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, SessionTicketsDisabled: true})
	errc := make(chan error, 1)
	go func() { errc <- ts.Handshake() }()
	errCli := tc.Handshake()
	errSrv := <-errc
	if err := errors.Join(errCli, errSrv); err != nil {
		t.Fatal(err)
	}
	cs, ss := tc.ConnectionState(), ts.ConnectionState()
	return d, a, &cs, &ss
}

// sealPair returns a client and a server Conn over a real TLS 1.3 session
// with the given contexts and client claims.
func sealPair(t testing.TB, ctxCli, ctxSrv string, cliIsClient, srvIsClient bool) (cli, srv *Conn) {
	t.Helper()
	d, a, cs, ss := tlsPair(t)
	kc, err := Derive(cs, []byte(ctxCli), cliIsClient)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := Derive(ss, []byte(ctxSrv), srvIsClient)
	if err != nil {
		t.Fatal(err)
	}
	return New(d, nil, kc), New(a, nil, ks)
}

package hier

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/chorus-rt/chorus/net/link"
)

// EndpointOptions.Plaintext set on every host (CHORUS_HIER_PLAINTEXT=1
// in the node agents' environment; they pass it to their workers) makes the data links of cross-host collectives plain TCP after
// they are authenticated: for trusted networks only (docs/multi-host.md,
// "Plaintext data links"). Every link is still set up over TLS 1.3 with
// the cluster's credentials (mutual TLS or the token proof); then both
// ends prove, on the bare TCP connection, that they hold that TLS
// session's keying material (HMAC-SHA256 challenge-response keyed by
// ExportKeyingMaterial), and the collective's bytes travel unencrypted
// and without integrity protection from there on. Both ends must agree:
// a TLS end refuses a plaintext request and the other way round (logged;
// the communicator's Join then fails naming the ranks).

// plainMagic starts the hello of a data link that asks for plain TCP.
const plainMagic = "CHHP"

const (
	plainLabel = "EXPORTER-chorus-hier-plain-v1"
	plainOK    = 0x5A
)

// errPlainProof: the plaintext switch's proof did not verify.
var errPlainProof = errors.New("wrong plaintext-switch proof (not the peer of this TLS session)")

// plainKey is the switch's HMAC key: keying material of this TLS session
// for this hello (communicator and ranks), so that a proof made on one
// link is worthless on any other.
func plainKey(tc *tls.Conn, hello []byte) ([]byte, error) {
	st := tc.ConnectionState()
	return st.ExportKeyingMaterial(plainLabel, hello, 32)
}

func plainProof(key []byte, role string, a, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("chorus-hier-plain-v1 " + role))
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

// writeFlush writes p to c and flushes it, and returns the first error
// of the two: a failed write is reported even when the flush after it
// would succeed.
func writeFlush(c net.Conn, p []byte) error {
	if _, err := c.Write(p); err != nil {
		return err
	}
	return flushConn(c)
}

// flushConn sends what a buffered connection (link.Config.Buffer) holds.
func flushConn(c net.Conn) error {
	switch x := c.(type) {
	case interface{ Flush() error }:
		return x.Flush()
	case interface{ NetConn() net.Conn }:
		return link.Flush(x)
	}
	return nil
}

// plainServer switches an authenticated link whose plaintext hello it
// has read to plain TCP: over TLS it accepts and sends its nonce; on the
// bare connection it reads the client's nonce and proof, checks it and
// answers with its own. The client sends nothing on the bare connection
// before it has read the acceptance, and the server nothing before it
// has read the client's proof, so no TLS layer ever holds bytes of the
// plain stream. The caller bounds it with a deadline.
func plainServer(tc *tls.Conn, hello []byte) (net.Conn, error) {
	key, err := plainKey(tc, hello)
	if err != nil {
		return nil, err
	}
	ns := make([]byte, 32)
	if _, err := rand.Read(ns); err != nil {
		return nil, err
	}
	if _, err := tc.Write(append([]byte{plainOK}, ns...)); err != nil {
		return nil, fmt.Errorf("send plaintext acceptance: %v", err)
	}
	if err := link.Flush(tc); err != nil {
		return nil, fmt.Errorf("send plaintext acceptance: %v", err)
	}
	raw := tc.NetConn()
	resp := make([]byte, 32+sha256.Size)
	if _, err := io.ReadFull(raw, resp); err != nil {
		return nil, fmt.Errorf("read plaintext-switch proof: %v", err)
	}
	nc, mac := resp[:32], resp[32:]
	if !hmac.Equal(mac, plainProof(key, "client", ns, nc)) {
		return nil, errPlainProof
	}
	if _, err := raw.Write(plainProof(key, "server", nc, ns)); err != nil {
		return nil, fmt.Errorf("send plaintext-switch proof: %v", err)
	}
	if err := flushConn(raw); err != nil {
		return nil, fmt.Errorf("send plaintext-switch proof: %v", err)
	}
	return raw, nil
}

// plainClient is the client's side of plainServer, after it has sent the
// plaintext hello over TLS.
func plainClient(tc *tls.Conn, hello []byte) (net.Conn, error) {
	key, err := plainKey(tc, hello)
	if err != nil {
		return nil, err
	}
	_ = tc.SetDeadline(time.Now().Add(link.DefaultHandshakeTimeout))
	defer tc.SetDeadline(time.Time{})
	acc := make([]byte, 33)
	if _, err := io.ReadFull(tc, acc); err != nil || acc[0] != plainOK {
		return nil, fmt.Errorf("the peer refused a plaintext data link (is the plaintext option set on every host?): %v", err)
	}
	ns := acc[1:]
	nc := make([]byte, 32)
	if _, err := rand.Read(nc); err != nil {
		return nil, err
	}
	raw := tc.NetConn()
	if _, err := raw.Write(append(nc, plainProof(key, "client", ns, nc)...)); err != nil {
		return nil, fmt.Errorf("send plaintext-switch proof: %v", err)
	}
	if err := flushConn(raw); err != nil {
		return nil, fmt.Errorf("send plaintext-switch proof: %v", err)
	}
	mac := make([]byte, sha256.Size)
	if _, err := io.ReadFull(raw, mac); err != nil {
		return nil, fmt.Errorf("the peer refused our plaintext-switch proof: %v", err)
	}
	if !hmac.Equal(mac, plainProof(key, "server", nc, ns)) {
		return nil, fmt.Errorf("the peer's plaintext-switch proof is wrong: %w", errPlainProof)
	}
	return raw, nil
}

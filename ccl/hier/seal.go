package hier

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/chorus-rt/chorus/internal/sys/pollread"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/net/seal"
)

// Encrypted data links carry sealed records (net/seal: AES-256-GCM
// records of up to 256 KiB, keyed from the link's TLS 1.3 session after
// its authentication), not crypto/tls's own records (16 KiB each).
// Sealed records put 20 bytes per 256 KiB on the wire instead of 22 per
// 16 KiB (0.008% instead of 0.13%: what separated chorus from gloo's
// plain TCP on a 10 Gbit/s link) and skip crypto/tls's copies
// (docs/multi-host.md). The TLS-record mode stays for tests
// (testEndpoint), which check that ends of different modes refuse each
// other; with EndpointOptions.Plaintext neither applies.

// sealMagic starts the hello of a data link that asks for sealed records.
const sealMagic = "CHHS"

const sealOK = 0x53

// sealReady is the dialer's first sealed record: the acceptor reads it
// before it sends anything sealed (so that no TLS layer ever holds bytes
// of the sealed stream), and it confirms that both ends derived the same
// keys.
const sealReady = "chorus-hier-seal-ready-v1"

// linkMode is how a data link carries bytes after its TLS 1.3
// authentication.
type linkMode byte

const (
	modeTLS    linkMode = iota // crypto/tls records (tests)
	modeSealed                 // net/seal records (the default)
	modePlain                  // plain TCP (EndpointOptions.Plaintext)
)

func (m linkMode) String() string {
	switch m {
	case modeTLS:
		return "TLS-record"
	case modeSealed:
		return "sealed"
	case modePlain:
		return "plaintext"
	}
	return fmt.Sprintf("linkMode(%d)", byte(m))
}

// magic is the hello magic of a link of mode m.
func (m linkMode) magic() string {
	switch m {
	case modeSealed:
		return sealMagic
	case modePlain:
		return plainMagic
	}
	return dataMagic
}

// modeOf is the mode a hello's magic asks for.
func modeOf(magic string) (linkMode, bool) {
	switch magic {
	case dataMagic:
		return modeTLS, true
	case sealMagic:
		return modeSealed, true
	case plainMagic:
		return modePlain, true
	}
	return 0, false
}

// modeOf is the link mode of an endpoint with options o.
func (o EndpointOptions) mode() linkMode {
	if o.Plaintext {
		return modePlain
	}
	return modeSealed
}

// sealedConn is a data link in sealed records, with the poller its
// records are read through (nil: none).
type sealedConn struct {
	*seal.Conn
	raw  net.Conn
	poll *pollread.Reader
}

// NetConn is the TCP connection under the records (for socket options:
// link.SetNotSentLowat).
func (s *sealedConn) NetConn() net.Conn { return s.raw }

// newSealed puts sealed records on tc's connection, leaving its TLS
// layer and link buffer (bytes the buffer had read ahead are read first).
func newSealed(tc *tls.Conn, hello []byte, client bool) (*sealedConn, error) {
	st := tc.ConnectionState()
	keys, err := seal.Derive(&st, hello, client)
	if err != nil {
		return nil, err
	}
	raw, rd, poll, err := unbuffered(tc.NetConn())
	if err != nil {
		return nil, err
	}
	return &sealedConn{Conn: seal.New(raw, rd, keys), raw: raw, poll: poll}, nil
}

// sealServer switches an authenticated link whose sealed hello it has
// read to sealed records: it accepts over TLS, then reads the dialer's
// first sealed record (sealReady) before it returns, so it sends nothing
// sealed before the dialer has left TLS. The caller bounds it with a
// deadline.
func sealServer(tc *tls.Conn, hello []byte) (net.Conn, error) {
	if _, err := tc.Write([]byte{sealOK}); err != nil {
		return nil, fmt.Errorf("send sealed-records acceptance: %v", err)
	}
	if err := link.Flush(tc); err != nil {
		return nil, fmt.Errorf("send sealed-records acceptance: %v", err)
	}
	s, err := newSealed(tc, hello, false)
	if err != nil {
		return nil, err
	}
	got := make([]byte, len(sealReady))
	if _, err := io.ReadFull(s, got); err != nil {
		return nil, fmt.Errorf("read the first sealed record: %w", err)
	}
	if string(got) != sealReady {
		return nil, fmt.Errorf("the first sealed record is %q, want %q", got, sealReady)
	}
	return s, nil
}

// sealClient is the dialer's side of sealServer, after it has sent the
// sealed hello over TLS.
func sealClient(tc *tls.Conn, hello []byte) (net.Conn, error) {
	_ = tc.SetDeadline(time.Now().Add(link.DefaultHandshakeTimeout))
	acc := make([]byte, 1)
	if _, err := io.ReadFull(tc, acc); err != nil || acc[0] != sealOK {
		return nil, fmt.Errorf("the peer refused a sealed data link (is the plaintext option set alike on every host?): %v", err)
	}
	s, err := newSealed(tc, hello, true)
	if err != nil {
		return nil, err
	}
	if err := writeFlush(s, []byte(sealReady)); err != nil {
		return nil, fmt.Errorf("send the first sealed record: %v", err)
	}
	_ = s.SetDeadline(time.Time{})
	return s, nil
}

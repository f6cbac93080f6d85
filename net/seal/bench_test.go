package seal

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
)

// BenchmarkTransfer sends 64 MiB in 1 MiB writes through a loopback TCP
// pair and reads it on the other end (a goroutine each): seal over the
// bare connection after a TLS 1.3 handshake, crypto/tls over the same
// kind of pair (its preferred suite: AES-128-GCM where AES hardware is
// present), and plain TCP as the anchor.
func BenchmarkTransfer(b *testing.B) {
	const total, chunk = 64 << 20, 1 << 20
	for _, kind := range []string{"seal", "tls", "tcp"} {
		b.Run(kind, func(b *testing.B) {
			cliRaw, srvRaw, cs, ss := tlsPair(b)
			var w io.Writer
			var r io.Reader
			flush := func() error { return nil }
			switch kind {
			case "seal":
				kc, err := Derive(cs, []byte("bench"), true)
				if err != nil {
					b.Fatal(err)
				}
				ks, err := Derive(ss, []byte("bench"), false)
				if err != nil {
					b.Fatal(err)
				}
				sc := New(cliRaw, nil, kc)
				w, r, flush = sc, New(srvRaw, nil, ks), sc.Flush
			case "tls":
				w, r = tlsAgain(b, cliRaw, srvRaw)
			case "tcp":
				w, r = cliRaw, srvRaw
			}
			src := pattern(chunk, 1)
			dst := make([]byte, chunk)
			b.SetBytes(total)
			b.ResetTimer()
			for range b.N {
				done := make(chan error, 1)
				go func() {
					for range total / chunk {
						if _, err := w.Write(src); err != nil {
							done <- err
							return
						}
					}
					done <- flush()
				}()
				for range total / chunk {
					if _, err := io.ReadFull(r, dst); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// tlsAgain runs a fresh TLS 1.3 handshake over the bare connections (the
// first one's keys are spent on Derive in the seal case; here its
// *tls.Conn is gone, so a new session on the same sockets).
func tlsAgain(b *testing.B, cliRaw, srvRaw net.Conn) (io.Writer, io.Reader) {
	cert, pool := selfSigned(b)
	tc := tls.Client(cliRaw, &tls.Config{RootCAs: pool, ServerName: "seal-test", MinVersion: tls.VersionTLS13})
	ts := tls.Server(srvRaw, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, SessionTicketsDisabled: true})
	errc := make(chan error, 1)
	go func() { errc <- ts.Handshake() }()
	if err := tc.Handshake(); err != nil {
		b.Fatal(err)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.Logf("crypto/tls suite: %s", tls.CipherSuiteName(tc.ConnectionState().CipherSuite))
	return tc, ts
}

package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// exporterLabel is the TLS exporter label of the link's two secrets.
const exporterLabel = "EXPORTER-chorus-seal-v1"

// EpochRecords is how many records one AES-GCM key seals before the next
// epoch's key and IV are derived. A variable so that tests can lower it;
// a Conn reads it once, in New (values below 1 count as 1).
var EpochRecords uint64 = 1 << 20

// Exporter is what *tls.ConnectionState offers (ExportKeyingMaterial).
type Exporter interface {
	ExportKeyingMaterial(label string, context []byte, length int) ([]byte, error)
}

// Keys holds one direction's sending and the other's receiving secrets.
// The zero Keys holds none: a Conn made with it fails every Read and
// Write.
type Keys struct {
	send, recv [32]byte
	ok         bool
}

// errNoKeys: New was given Keys that Derive did not make.
var errNoKeys = errors.New("seal: no keys (the zero Keys; use Derive)")

// errExhausted: a direction's record counter reached its end; the next
// record would reuse a nonce.
var errExhausted = errors.New("seal: record counter exhausted")

// Derive derives the keys of one end of a link from the TLS 1.3 session's
// exporter; context binds them to what the link is for (the caller passes
// its hello bytes); client says which end this is (the TLS client). Both
// ends must pass the same context. It fails on a nil exporter, or when the
// exporter fails (e.g. before the handshake completes).
//
// A *tls.ConnectionState must also be of a completed TLS 1.3 handshake
// (crypto/tls would export from TLS 1.2 with extended master secret too).
func Derive(ex Exporter, context []byte, client bool) (Keys, error) {
	if ex == nil {
		return Keys{}, errors.New("seal: Derive: nil exporter")
	}
	if cs, ok := ex.(*tls.ConnectionState); ok {
		switch {
		case cs == nil:
			return Keys{}, errors.New("seal: Derive: nil *tls.ConnectionState")
		case !cs.HandshakeComplete:
			return Keys{}, errors.New("seal: Derive: TLS handshake not complete")
		case cs.Version != tls.VersionTLS13:
			return Keys{}, fmt.Errorf("seal: Derive: TLS version %#04x, want TLS 1.3", cs.Version)
		}
	}
	m, err := ex.ExportKeyingMaterial(exporterLabel, context, 64)
	if err != nil {
		return Keys{}, fmt.Errorf("seal: Derive: export keying material: %w", err)
	}
	if len(m) != 64 {
		return Keys{}, fmt.Errorf("seal: Derive: exporter returned %d bytes, want 64", len(m))
	}
	var k Keys
	c2s, s2c := m[:32], m[32:]
	if client {
		copy(k.send[:], c2s)
		copy(k.recv[:], s2c)
	} else {
		copy(k.send[:], s2c)
		copy(k.recv[:], c2s)
	}
	k.ok = true
	return k, nil
}

// dir is one direction's record sequence: its secret, the current
// epoch's AEAD and IV, and the number of the next record.
type dir struct {
	secret [32]byte
	per    uint64 // records per epoch
	seq    uint64 // number of the next record
	epoch  uint64
	aead   cipher.AEAD // nil: not derived yet
	iv     [12]byte
}

func newDir(secret [32]byte) dir {
	per := EpochRecords
	if per < 1 {
		per = 1
	}
	return dir{secret: secret, per: per}
}

// epochInfo is label || e (uint64 big-endian): HKDF-Expand's info.
func epochInfo(label string, e uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], e)
	return label + string(b[:])
}

// rekey derives epoch e's AES-256-GCM key and IV.
func (d *dir) rekey(e uint64) error {
	key, err := hkdf.Expand(sha256.New, d.secret[:], epochInfo("chorus seal key", e), 32)
	if err != nil {
		return fmt.Errorf("seal: derive key of epoch %d: %w", e, err)
	}
	iv, err := hkdf.Expand(sha256.New, d.secret[:], epochInfo("chorus seal iv", e), 12)
	if err != nil {
		return fmt.Errorf("seal: derive iv of epoch %d: %w", e, err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return fmt.Errorf("seal: epoch %d: %w", e, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return fmt.Errorf("seal: epoch %d: %w", e, err)
	}
	d.aead, d.epoch = aead, e
	copy(d.iv[:], iv)
	return nil
}

// next returns the AEAD, nonce and number of the next record and counts
// it. The last number (MaxUint64) is never used, so the counter cannot
// wrap around to a nonce already used.
func (d *dir) next() (cipher.AEAD, [12]byte, uint64, error) {
	var nonce [12]byte
	s := d.seq
	if s == math.MaxUint64 {
		return nil, nonce, s, errExhausted
	}
	if e := s / d.per; d.aead == nil || e != d.epoch {
		if err := d.rekey(e); err != nil {
			return nil, nonce, s, err
		}
	}
	nonce = d.iv
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], s)
	for i := range sb {
		nonce[4+i] ^= sb[i]
	}
	d.seq++
	return d.aead, nonce, s, nil
}

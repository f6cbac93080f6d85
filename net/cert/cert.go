package cert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ServerName is the DNS name every node certificate carries and every
// peer verifies.
const ServerName = "chorus-node"

// Pair is a certificate and its private key, PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
	key             *ecdsa.PrivateKey
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// NewCA makes a self-signed certificate authority valid from notBefore for
// validFor.
func NewCA(name string, notBefore time.Time, validFor time.Duration) (*Pair, error) {
	if validFor <= 0 {
		return nil, errors.New("cert: validity must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cert: CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"chorus cluster"}},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, tmpl, key, key)
}

// Issue signs a node certificate for name (its CommonName) with the CA.
// The certificate names ServerName and any extra hosts (DNS names or IP
// addresses) and serves as a TLS server and client certificate.
func (ca *Pair) Issue(name string, hosts []string, notBefore time.Time, validFor time.Duration) (*Pair, error) {
	if ca.key == nil || ca.Cert == nil || !ca.Cert.IsCA {
		return nil, errors.New("cert: Issue needs a CA with its key")
	}
	if validFor <= 0 {
		return nil, errors.New("cert: validity must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cert: node key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"chorus cluster"}},
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{ServerName},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return sign(tmpl, ca.Cert, key, ca.key)
}

func sign(tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) (*Pair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, fmt.Errorf("cert: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("cert: parse %q: %w", tmpl.Subject.CommonName, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("cert: key of %q: %w", tmpl.Subject.CommonName, err)
	}
	return &Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		Cert:    c, key: key,
	}, nil
}

// Load reads a certificate and its key (PEM files), e.g. the CA to issue
// more node certificates.
func Load(certFile, keyFile string) (*Pair, error) {
	cp, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("cert: %w", err)
	}
	kp, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("cert: %w", err)
	}
	cb, _ := pem.Decode(cp)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("cert: %s: no PEM certificate", certFile)
	}
	c, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("cert: %s: %w", certFile, err)
	}
	kb, _ := pem.Decode(kp)
	if kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("cert: %s: no PEM EC private key", keyFile)
	}
	k, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("cert: %s: %w", keyFile, err)
	}
	return &Pair{CertPEM: cp, KeyPEM: kp, Cert: c, key: k}, nil
}

// Write stores the pair as dir/name.pem and dir/name-key.pem (the key
// readable by its owner only); it refuses to overwrite either file.
func (p *Pair) Write(dir, name string) (certFile, keyFile string, err error) {
	certFile = filepath.Join(dir, name+".pem")
	keyFile = filepath.Join(dir, name+"-key.pem")
	if err := writeNew(keyFile, p.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeNew(certFile, p.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// NewToken writes a fresh 32-byte random token, hex-encoded, to path
// (mode 0600); it refuses to overwrite.
func NewToken(path string) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return writeNew(path, fmt.Appendf(nil, "%x\n", b), 0o600)
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("cert: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("cert: %s: %w", path, err)
	}
	return f.Close()
}

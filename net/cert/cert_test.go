package cert

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestIssueWriteLoad(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := NewCA("c", now.Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cf, kf, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.Write(dir, "ca"); err == nil {
		t.Fatal("Write overwrote an existing CA")
	}
	ca2, err := Load(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ca2.Issue("n0", []string{"10.0.0.1", "host-a"}, now.Add(-time.Minute), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := node.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: ServerName, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Fatalf("usage %v: %v", usage, err)
		}
	}
	if len(node.Cert.IPAddresses) != 1 || len(node.Cert.DNSNames) != 2 {
		t.Fatalf("names: %v %v", node.Cert.IPAddresses, node.Cert.DNSNames)
	}
	if _, err := node.Issue("x", nil, now, time.Hour); err == nil {
		t.Fatal("a node certificate issued another")
	}
	st, err := os.Stat(filepath.Join(dir, "ca-key.pem"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode: %v %v", st.Mode(), err)
	}
	tok := filepath.Join(dir, "token")
	if err := NewToken(tok); err != nil {
		t.Fatal(err)
	}
	if err := NewToken(tok); err == nil {
		t.Fatal("NewToken overwrote a token")
	}
}

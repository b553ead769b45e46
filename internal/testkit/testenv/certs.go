package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throw-away certificate authority for TLS tests, written as PEM
// files under a test's temporary directory. Certificates are ECDSA P-256,
// generated with crypto/x509 (no openssl).
type CA struct {
	// CertFile is the CA certificate (PEM), what a peer trusts.
	CertFile string

	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// CertPair names a certificate and its private key, both PEM files.
type CertPair struct {
	CertFile, KeyFile string
}

// NewCA creates a CA valid for a day, named name, with its files in a new
// temporary directory of t. It fails t on any error.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{dir: t.TempDir(), cert: cert, key: key}
	ca.CertFile = ca.write(t, name+"-ca.crt", "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost,
// valid for a day, and returns its files (name.crt, name.key).
func (ca *CA) Server(t testing.TB, name string) CertPair {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth, time.Now().Add(24*time.Hour))
}

// Client issues a client certificate with common name cn, valid until
// notAfter (a time in the past makes an expired certificate), and returns
// its files.
func (ca *CA) Client(t testing.TB, cn string, notAfter time.Time) CertPair {
	t.Helper()
	return ca.issue(t, cn, x509.ExtKeyUsageClientAuth, notAfter)
}

// ClientTLS returns a client tls.Config trusting ca and presenting pair
// (none when pair is zero). It fails t if the files cannot be read.
func (ca *CA) ClientTLS(t testing.TB, pair CertPair) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if pair.CertFile != "" {
		c, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage, notAfter time.Time) CertPair {
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notAfter.Add(-25 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return CertPair{
		CertFile: ca.write(t, name+".crt", "CERTIFICATE", der),
		KeyFile:  ca.write(t, name+".key", "PRIVATE KEY", kder),
	}
}

func (ca *CA) write(t testing.TB, name, typ string, der []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

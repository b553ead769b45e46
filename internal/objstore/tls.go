package objstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// TLSFiles names PEM files for client TLS: CA (the roots that verify the
// server), and Cert with Key (a client certificate, set together). All
// empty means the system roots and no client certificate. fencepub uses it
// for s3.tls.* and etcd.tls.* (DESIGN.md "Security").
type TLSFiles struct {
	CA   string `mapstructure:"ca"`
	Cert string `mapstructure:"cert"`
	Key  string `mapstructure:"key"`
}

// IsZero reports whether no file is named.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// ClientConfig reads the files and returns a client tls.Config (TLS 1.2 or
// newer), or nil when no file is named. prefix is the files' configuration
// key ("s3.tls", "etcd.tls"): errors name prefix.ca for an unreadable or
// empty CA file, prefix.cert/key for an unloadable pair, and prefix.cert
// for a client certificate outside its validity period (expired), which a
// server would refuse.
func (f TLSFiles) ClientConfig(prefix string) (*tls.Config, error) {
	if f.IsZero() {
		return nil, nil
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%s.cert and %s.key must be set together", prefix, prefix)
	}
	out := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%s.ca: %w", prefix, err)
		}
		out.RootCAs = x509.NewCertPool()
		if !out.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca = %q: want a PEM file with CA certificates", prefix, f.CA)
		}
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%s.cert/key: %w", prefix, err)
		}
		if now := time.Now(); now.After(cert.Leaf.NotAfter) || now.Before(cert.Leaf.NotBefore) {
			return nil, fmt.Errorf("%s.cert = %q: want a certificate valid now (it is valid from %s to %s)", prefix, f.Cert,
				cert.Leaf.NotBefore.UTC().Format(time.RFC3339), cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		out.Certificates = []tls.Certificate{cert}
	}
	return out, nil
}

// TLSProblem explains a TLS failure in err's chain by the configuration key
// to fix: endpointKey for a server certificate not valid for the host name,
// prefix.ca for one the trusted roots do not verify, prefix.cert for the
// server rejecting the client certificate (its alert). ok is false when
// err holds no such failure (a refused connection, a timeout).
func TLSProblem(err error, prefix, endpointKey string) (hint string, ok bool) {
	var verr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &hostErr):
		return fmt.Sprintf("the server's certificate is not valid for that host name (%s, or the server certificate)", endpointKey), true
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &verr):
		return fmt.Sprintf("the server's certificate is not signed by %s.ca (or the system roots when unset)", prefix), true
	case IsTLSAlert(err):
		return fmt.Sprintf("the server rejected the client certificate %s.cert (expired, missing, or not signed by the CA the server trusts?)", prefix), true
	}
	return "", false
}

// IsTLSAlert reports whether err is an alert the peer sent: crypto/tls
// returns it as a *net.OpError with Op "remote error" (its alert type is
// unexported).
func IsTLSAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// Package s3store implements objstore.Store on minio-go for an
// S3-compatible store (MinIO in tests and production): the s3.*
// configuration, the credential chain, and the classification of the
// store's answers into objstore's errors (DESIGN.md "Object layout",
// "Security", "Lessons from systems on the same stack"). It is the only
// product package that imports minio-go.
package s3store

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Config is the serializable description of a bucket (viper fills it;
// keys s3.*, DESIGN.md "Security").
type Config struct {
	// Endpoint is host:port (HTTPS when Secure), or a URL
	// http://host[:port] or https://host[:port] whose scheme decides.
	Endpoint string `mapstructure:"endpoint"`
	// Credentials is CredentialsAuto (also "") or CredentialsStatic.
	Credentials string `mapstructure:"credentials"`
	AccessKey   string `mapstructure:"access_key"` // secret: never printed
	SecretKey   string `mapstructure:"secret_key"` // secret: never printed
	Bucket      string `mapstructure:"bucket"`
	Secure      bool   `mapstructure:"secure"` // use HTTPS for a host:port Endpoint
	Region      string `mapstructure:"region"`
	// TLS names a private CA and a client certificate for HTTPS.
	TLS objstore.TLSFiles `mapstructure:"tls"`
}

// HostSecure returns the host:port to dial and whether to use HTTPS: from
// Endpoint's scheme when it has one, else from Secure. Errors
// (objstore.ErrInvalidConfig) name s3.endpoint for a malformed endpoint, and both
// s3.endpoint and s3.secure for an http:// endpoint with Secure set.
func (c Config) HostSecure() (string, bool, error) {
	bad := func(want string) error {
		return fmt.Errorf("%w: s3.endpoint = %q: want %s", objstore.ErrInvalidConfig, c.Endpoint, want)
	}
	if !strings.Contains(c.Endpoint, "://") {
		if _, _, err := net.SplitHostPort(c.Endpoint); err != nil || strings.Contains(c.Endpoint, "/") {
			return "", false, bad("host:port, http://host[:port] or https://host[:port], e.g. 127.0.0.1:9000")
		}
		return c.Endpoint, c.Secure, nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false, bad("http://host[:port] or https://host[:port], without a path")
	}
	if u.Scheme == "http" && c.Secure {
		return "", false, fmt.Errorf("%w: s3.endpoint %q is http:// but s3.secure is true: drop one", objstore.ErrInvalidConfig, c.Endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// Validate checks the endpoint (HostSecure), the credential mode (static
// needs s3.access_key and s3.secret_key) and that TLS files come with an
// HTTPS endpoint. Errors are objstore.ErrInvalidConfig naming the keys; they never
// contain a key's value.
func (c Config) Validate() error {
	_, secure, err := c.HostSecure()
	if err != nil {
		return err
	}
	switch c.Credentials {
	case "", CredentialsAuto:
	case CredentialsStatic:
		if c.AccessKey == "" || c.SecretKey == "" {
			return fmt.Errorf("%w: s3.credentials is static but s3.access_key or s3.secret_key is not set (FENCEPUB_S3_ACCESS_KEY, FENCEPUB_S3_SECRET_KEY, or s3.credentials: auto)", objstore.ErrInvalidConfig)
		}
	default:
		return fmt.Errorf("%w: s3.credentials = %q: want static or auto", objstore.ErrInvalidConfig, c.Credentials)
	}
	if !c.TLS.IsZero() && !secure {
		return fmt.Errorf("%w: s3.tls.* is set but the endpoint is plain HTTP: use an https:// s3.endpoint or s3.secure: true", objstore.ErrInvalidConfig)
	}
	return nil
}

// Store is a bucket of an S3-compatible store through minio-go: the
// objstore.Store of production. Client and Bucket are exported for tests
// that tamper with the raw store (an overwrite, a removal, bucket
// versioning); product code and harnesses use the objstore.Store methods
// only. Safe for concurrent use.
type Store struct {
	Client *minio.Client
	Bucket string
	// tr is the client's transport, for the unsigned request of notS3
	// (nil: http.DefaultTransport).
	tr http.RoundTripper
}

var _ objstore.Store = (*Store)(nil)

// String names the store in messages: "<endpoint URL>, bucket <name>".
func (s *Store) String() string {
	return fmt.Sprintf("%s, bucket %q", s.Client.EndpointURL().String(), s.Bucket)
}

// New builds a Store for cfg: HTTPS per HostSecure, verified with the
// s3.tls files on minio-go's default transport, and the credentials of
// cfg.Credentials (CredentialsAuto chains minio-go's providers; the keys
// are fetched at the first request). It does not contact the server; use
// CheckBucket to verify the bucket is reachable.
//
// Errors: objstore.ErrInvalidConfig naming the key (Validate, an empty or
// malformed bucket name, an unreadable TLS file).
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: s3.bucket is empty", objstore.ErrInvalidConfig)
	}
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("%w: s3.bucket %q: %w", objstore.ErrInvalidConfig, cfg.Bucket, err)
	}
	host, secure, _ := cfg.HostSecure() // checked by Validate
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("%w: s3 transport: %w", objstore.ErrInvalidConfig, err)
	}
	tlsCfg, err := cfg.TLS.ClientConfig("s3.tls")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", objstore.ErrInvalidConfig, err)
	}
	if tlsCfg != nil {
		tr.TLSClientConfig = tlsCfg
	}
	var providers []credentials.Provider
	for _, s := range cfg.credSources(&http.Client{Transport: tr}) {
		providers = append(providers, s.provider)
	}
	c, err := minio.New(host, &minio.Options{
		Creds:     credentials.NewChainCredentials(providers),
		Secure:    secure,
		Region:    cfg.Region,
		Transport: tr,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: s3.endpoint %q: %w", objstore.ErrInvalidConfig, cfg.Endpoint, err)
	}
	return &Store{Client: c, Bucket: cfg.Bucket, tr: tr}, nil
}

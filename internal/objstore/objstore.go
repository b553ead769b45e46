// Package objstore is fencepub's thin layer over minio-go: one client per
// configured bucket, create-only writes (If-None-Match: *) and the
// classification of the store's error codes that the protocol depends on
// (DESIGN.md "Object layout", "Lessons from systems on the same stack").
package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Errors returned (wrapped) by Store methods; test with errors.Is.
var (
	// ErrExists: a create-only write found the key already present (HTTP 412
	// PreconditionFailed).
	ErrExists = errors.New("objstore: object already exists")
	// ErrNotFound: the object or bucket does not exist.
	ErrNotFound = errors.New("objstore: not found")
	// ErrConditionConflict: a concurrent conditional write on the same key
	// (HTTP 409 ConditionalRequestConflict); safe to retry.
	ErrConditionConflict = errors.New("objstore: concurrent conditional request")
	// ErrAccessDenied: the store refused the credentials or the request
	// (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch): a
	// configuration problem (s3.credentials, s3.access_key, s3.secret_key, the bucket's
	// policy), not an outage.
	ErrAccessDenied = errors.New("objstore: access denied (check s3.credentials, s3.access_key, s3.secret_key and the bucket policy)")
	// ErrUnavailable: the store could not be reached or answered 5xx.
	ErrUnavailable = errors.New("objstore: unavailable")
	// ErrTLS: the TLS handshake with the store failed (an unverified
	// server certificate, a rejected client certificate): a configuration
	// problem (s3.tls.ca, s3.tls.cert, s3.endpoint), not an outage, so it
	// is not retried.
	ErrTLS = errors.New("objstore: TLS handshake failed")
	// ErrInvalidConfig: a Config that cannot be used; the message names
	// the key.
	ErrInvalidConfig = errors.New("objstore: invalid configuration")
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
	TLS TLSFiles `mapstructure:"tls"`
}

// HostSecure returns the host:port to dial and whether to use HTTPS: from
// Endpoint's scheme when it has one, else from Secure. Errors
// (ErrInvalidConfig) name s3.endpoint for a malformed endpoint, and both
// s3.endpoint and s3.secure for an http:// endpoint with Secure set.
func (c Config) HostSecure() (string, bool, error) {
	bad := func(want string) error {
		return fmt.Errorf("%w: s3.endpoint = %q: want %s", ErrInvalidConfig, c.Endpoint, want)
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
		return "", false, fmt.Errorf("%w: s3.endpoint %q is http:// but s3.secure is true: drop one", ErrInvalidConfig, c.Endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// Validate checks the endpoint (HostSecure), the credential mode (static
// needs s3.access_key and s3.secret_key) and that TLS files come with an
// HTTPS endpoint. Errors are ErrInvalidConfig naming the keys; they never
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
			return fmt.Errorf("%w: s3.credentials is static but s3.access_key or s3.secret_key is not set (FENCEPUB_S3_ACCESS_KEY, FENCEPUB_S3_SECRET_KEY, or s3.credentials: auto)", ErrInvalidConfig)
		}
	default:
		return fmt.Errorf("%w: s3.credentials = %q: want static or auto", ErrInvalidConfig, c.Credentials)
	}
	if !c.TLS.IsZero() && !secure {
		return fmt.Errorf("%w: s3.tls.* is set but the endpoint is plain HTTP: use an https:// s3.endpoint or s3.secure: true", ErrInvalidConfig)
	}
	return nil
}

// Store is a bucket in an S3-compatible store. It is safe for concurrent use.
type Store struct {
	Client *minio.Client
	Bucket string
}

// New builds a Store for cfg: HTTPS per HostSecure, verified with the
// s3.tls files on minio-go's default transport, and the credentials of
// cfg.Credentials (CredentialsAuto chains minio-go's providers; the keys
// are fetched at the first request). It does not contact the server; use
// CheckBucket to verify the bucket is reachable.
//
// Errors: ErrInvalidConfig naming the key (Validate, an empty bucket, an
// unreadable TLS file).
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: s3.bucket is empty", ErrInvalidConfig)
	}
	host, secure, _ := cfg.HostSecure() // checked by Validate
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("%w: s3 transport: %w", ErrInvalidConfig, err)
	}
	tlsCfg, err := cfg.TLS.ClientConfig("s3.tls")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
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
		return nil, fmt.Errorf("%w: s3.endpoint %q: %w", ErrInvalidConfig, cfg.Endpoint, err)
	}
	return &Store{Client: c, Bucket: cfg.Bucket}, nil
}

// CheckBucket makes one real bucket call. It returns ErrNotFound (wrapped)
// when the bucket does not exist and ErrUnavailable when the store cannot
// be reached.
func (s *Store) CheckBucket(ctx context.Context) error {
	ok, err := s.Client.BucketExists(ctx, s.Bucket)
	if err != nil {
		return Classify(err)
	}
	if !ok {
		return fmt.Errorf("%w: bucket %q", ErrNotFound, s.Bucket)
	}
	return nil
}

// EnsureBucket creates the bucket if it does not exist.
func (s *Store) EnsureBucket(ctx context.Context) error {
	ok, err := s.Client.BucketExists(ctx, s.Bucket)
	if err != nil {
		return Classify(err)
	}
	if ok {
		return nil
	}
	if err := s.Client.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" {
			return nil
		}
		return Classify(err)
	}
	return nil
}

// PutSmallCreateOnly writes body (a small marker; held in memory) under key
// only if no object exists there. It returns ErrExists (wrapped) when one
// does. Retries of a lost response therefore also see ErrExists: callers
// that may retry compare the existing object with GetSmall.
func (s *Store) PutSmallCreateOnly(ctx context.Context, key string, body []byte, contentType string) (minio.UploadInfo, error) {
	opts := minio.PutObjectOptions{ContentType: contentType}
	opts.SetMatchETagExcept("*")
	info, err := s.Client.PutObject(ctx, s.Bucket, key, bytes.NewReader(body), int64(len(body)), opts)
	if err != nil {
		return info, Classify(err)
	}
	return info, nil
}

// GetSmall reads a whole small object (a marker) into memory, at most max
// bytes. Errors: ErrNotFound, ErrUnavailable, or a size error.
func (s *Store) GetSmall(ctx context.Context, key string, max int64) ([]byte, error) {
	obj, err := s.Client.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, Classify(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(io.LimitReader(obj, max+1))
	if err != nil {
		return nil, Classify(err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("objstore: %s is larger than %d bytes", key, max)
	}
	return b, nil
}

// Classify maps a minio-go error to the package's sentinel errors, keeping
// the original in the chain. It sees through %w wrapping (errors.As), which
// minio.ToErrorResponse does not.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if hint, ok := TLSProblem(err, "s3.tls", "s3.endpoint"); ok {
		return fmt.Errorf("%w: %s: %w", ErrTLS, hint, err)
	}
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed":
		return fmt.Errorf("%w: %w", ErrExists, err)
	case resp.Code == "ConditionalRequestConflict" || resp.StatusCode == http.StatusConflict && resp.Code != "BucketAlreadyOwnedByYou":
		return fmt.Errorf("%w: %w", ErrConditionConflict, err)
	case resp.Code == "NoSuchKey" || resp.Code == "NoSuchBucket" || resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case resp.Code == "AccessDenied" || resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch",
		resp.Code == "InvalidTokenId" || resp.Code == "InvalidToken" || resp.Code == "ExpiredToken": // a temporary key's session token
		return fmt.Errorf("%w: %w", ErrAccessDenied, err)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

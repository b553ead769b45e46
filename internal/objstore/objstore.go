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
	"net/http"

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
	// configuration problem (s3.access_key, s3.secret_key, the bucket's
	// policy), not an outage.
	ErrAccessDenied = errors.New("objstore: access denied (check s3.access_key, s3.secret_key and the bucket policy)")
	// ErrUnavailable: the store could not be reached or answered 5xx.
	ErrUnavailable = errors.New("objstore: unavailable")
)

// Config is the serializable description of a bucket (viper fills it).
type Config struct {
	Endpoint  string `mapstructure:"endpoint"` // host:port, no scheme
	AccessKey string `mapstructure:"access_key"`
	SecretKey string `mapstructure:"secret_key"`
	Bucket    string `mapstructure:"bucket"`
	Secure    bool   `mapstructure:"secure"` // use HTTPS
	Region    string `mapstructure:"region"`
}

// Store is a bucket in an S3-compatible store. It is safe for concurrent use.
type Store struct {
	Client *minio.Client
	Bucket string
}

// New builds a Store for cfg. It does not contact the server; use
// CheckBucket to verify the bucket is reachable.
func New(cfg Config) (*Store, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("objstore: s3.endpoint is empty (want host:port)")
	}
	if cfg.Bucket == "" {
		return nil, errors.New("objstore: s3.bucket is empty")
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: cfg.Secure,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: s3.endpoint %q: %w", cfg.Endpoint, err)
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
	case resp.Code == "AccessDenied" || resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch":
		return fmt.Errorf("%w: %w", ErrAccessDenied, err)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Package objstore states what fencepub needs from an object store: the
// Store interface, its contract and the one vocabulary of its errors.
//
// The protocol needs four operations of a store (docs/DESIGN.md "Object
// layout", "Publish", "Reading", "Garbage collection"):
//
//   - a create-only PUT (If-None-Match: *), refused with ErrExists when the
//     key exists;
//   - a create-only completion of a multipart upload (If-None-Match: * on
//     CompleteMultipartUpload), refused the same way, the loser's bytes never
//     visible;
//   - a GET conditioned on the ETag the pointer recorded (If-Match);
//   - a listing that eventually shows every object written.
//
// fencepub assumes read-after-write consistency for new keys (a Stat or Get
// after a successful create-only write sees the object) and nothing stronger
// of listings. Everything else (stat, copy, uploads, batch delete) serves
// those four. Package s3store implements Store on minio-go, memstore in
// memory for unit tests, faultstore wraps one to inject faults, and storetest
// is the conformance suite every implementation passes.
package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"
)

// Errors returned (wrapped) by every Store method; test with errors.Is.
// Implementations classify their client's errors into these before
// returning, so callers never see a client library's types.
var (
	// ErrExists: a create-only write found the key already present (HTTP 412
	// PreconditionFailed on If-None-Match: *).
	ErrExists = errors.New("objstore: object already exists")
	// ErrNotFound: the object, the upload or the bucket does not exist.
	ErrNotFound = errors.New("objstore: not found")
	// ErrNoBucket: the bucket does not exist. It wraps ErrNotFound, so a
	// caller that only asks for ErrNotFound also sees it.
	ErrNoBucket = fmt.Errorf("%w: no such bucket", ErrNotFound)
	// ErrConditionConflict: a condition on an existing object did not hold:
	// a concurrent conditional write on the same key (HTTP 409
	// ConditionalRequestConflict; the write was not applied and is safe to
	// send again), or an If-Match whose ETag the object no longer has (HTTP
	// 412 on a Get or on a copy's source).
	ErrConditionConflict = errors.New("objstore: concurrent conditional request")
	// ErrAccessDenied: the store refused the credentials or the request
	// (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch): a
	// configuration problem (s3.credentials, s3.access_key, s3.secret_key, the bucket's
	// policy), not an outage.
	ErrAccessDenied = errors.New("objstore: access denied (check s3.credentials, s3.access_key, s3.secret_key and the bucket policy)")
	// ErrUnavailable: the store could not be reached or answered 5xx. The
	// request may or may not have been applied.
	ErrUnavailable = errors.New("objstore: unavailable")
	// ErrTLS: the TLS handshake with the store failed (an unverified
	// server certificate, a rejected client certificate): a configuration
	// problem (s3.tls.ca, s3.tls.cert, s3.endpoint), not an outage, so it
	// is not retried.
	ErrTLS = errors.New("objstore: TLS handshake failed")
	// ErrInvalidConfig: a configuration that cannot be used; the message
	// names the key.
	ErrInvalidConfig = errors.New("objstore: invalid configuration")
	// ErrNotS3: the endpoint answers HTTP, but not as an S3 store (an
	// etcd port, a web console): s3.endpoint is wrong. It wraps
	// ErrInvalidConfig.
	ErrNotS3 = fmt.Errorf("%w: not an S3 endpoint", ErrInvalidConfig)
)

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key          string
	Size         int64     // bytes
	ETag         string    // the store's, without quotes; what Get's ifMatch takes
	LastModified time.Time // the store's clock
	ContentType  string    // set by Stat and Get; empty in listings
	// UserMetadata holds the user metadata given at the write (set by Stat
	// and Get; nil in listings). Key case is the store's: compare keys
	// with strings.EqualFold.
	UserMetadata map[string]string
}

// PutOptions are the attributes a write gives the object.
type PutOptions struct {
	ContentType  string
	UserMetadata map[string]string
}

// Part is one uploaded part of a multipart upload: its number (from 1) and
// the ETag the store gave it.
type Part struct {
	Number int
	ETag   string
}

// CopySource names the byte range [Offset, Offset+Length) of an object for
// CopyPart: of the store's bucket, or of Bucket when it is set (another
// bucket of the same server; see OtherBuckets). Length -1 copies the whole
// object (the only way to copy an empty one). A non-empty IfMatch requires
// the source to have that ETag.
type CopySource struct {
	Bucket  string
	Key     string
	IfMatch string
	Offset  int64
	Length  int64
}

// Upload is one incomplete multipart upload.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time // the store's clock
}

// ListOptions narrow a listing: only keys sorting after StartAfter (""
// for all); PageSize is the keys per request the store is asked for (0
// for its default; a lookup of one key asks for 1).
type ListOptions struct {
	StartAfter string
	PageSize   int
}

// Store is one bucket of an object store, the way fencepub uses it. Every
// method is safe for concurrent use, honours ctx (a cancelled or expired
// ctx ends the call with ctx's error, unwrapped into the sentinels) and
// returns errors wrapping the sentinels above. Keys are the bucket's object
// keys (layout builds them).
type Store interface {
	// BucketName returns the bucket's name, as pointers record it.
	BucketName() string

	// CheckBucket makes one real bucket call: nil when the bucket exists
	// and answers; ErrNoBucket, ErrAccessDenied, ErrUnavailable, ErrTLS.
	// Idempotent.
	CheckBucket(ctx context.Context) error
	// EnsureBucket creates the bucket if it does not exist. Idempotent.
	EnsureBucket(ctx context.Context) error
	// Settings reads the bucket's versioning and lifecycle settings.
	Settings(ctx context.Context) (BucketSettings, error)

	// PutCreateOnly streams exactly size bytes (size >= 0, at most 5 GiB)
	// of body to key in one request, only if no object exists there
	// (If-None-Match: *). It returns the new object's info (Key, Size,
	// ETag). ErrExists when an object is there, including one an earlier
	// send of the same request stored whose response was lost: a caller
	// that retries compares the stored object (Stat) with its bytes. The
	// body's read errors are returned wrapped as they are.
	PutCreateOnly(ctx context.Context, key string, body io.Reader, size int64, opts PutOptions) (ObjectInfo, error)

	// CreateUpload starts a multipart upload of key with opts and returns
	// its id. Nothing is visible at key until CompleteUpload. A store may
	// check the create-only condition here already and refuse with
	// ErrExists when an object is at key (MinIO does); CompleteUpload
	// checks it again. Not idempotent: each call starts a new upload (abort
	// the ones not completed; GC aborts the ones left).
	CreateUpload(ctx context.Context, key string, opts PutOptions) (string, error)
	// UploadPart sends exactly size bytes of body as part number (1 to
	// 10000) of the upload. Idempotent: sending a part again replaces it.
	// ErrNotFound when the upload is gone.
	UploadPart(ctx context.Context, key, uploadID string, number int, body io.Reader, size int64) (Part, error)
	// CopyPart copies src server-side as part number of the upload.
	// Idempotent like UploadPart. ErrNotFound when the source or upload is
	// gone, ErrConditionConflict when the source no longer has
	// src.IfMatch.
	CopyPart(ctx context.Context, src CopySource, key, uploadID string, number int) (Part, error)
	// CompleteUpload assembles parts (in number order) into key, only if no
	// object exists there (If-None-Match: *): ErrExists when one does, and
	// the upload's bytes are then never visible at key. ErrNotFound when
	// the upload is gone: completed by an earlier send whose response was
	// lost, or aborted; a caller that retries compares the stored object
	// with its bytes. ErrConditionConflict on a concurrent completion (safe
	// to send again). It returns the new object's info (Key, ETag).
	CompleteUpload(ctx context.Context, key, uploadID string, parts []Part) (ObjectInfo, error)
	// AbortUpload discards an incomplete upload and its parts. Idempotent:
	// for an upload that is gone (completed or aborted) it returns nil or
	// ErrNotFound, which callers that only clean up treat as done.
	AbortUpload(ctx context.Context, key, uploadID string) error
	// ListUploads yields the incomplete uploads whose key starts with
	// prefix, in key order; a failure is yielded once as the error, last.
	// An upload is listed from its creation until it is completed or
	// aborted. A prefix may be "" for the whole bucket; not every store
	// answers other prefixes than "" and exact keys (MinIO does not).
	ListUploads(ctx context.Context, prefix string) iter.Seq2[Upload, error]

	// Stat returns key's info (Key, Size, ETag, LastModified, ContentType,
	// UserMetadata). ErrNotFound when absent. Idempotent.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Get opens key for reading, only if its ETag is ifMatch when ifMatch is
	// not empty, and returns the body and the object's info. The caller
	// closes the body; read errors are classified too. ErrNotFound when
	// absent, ErrConditionConflict when the object has another ETag.
	// Idempotent.
	Get(ctx context.Context, key, ifMatch string) (io.ReadCloser, ObjectInfo, error)
	// List yields the objects whose key starts with prefix, recursively (a
	// flat listing), in key order, with Key, Size, ETag and LastModified; a
	// failure is yielded once as the error, last. Stopping the loop ends
	// the listing. Eventually consistent: a listing may miss a write that
	// has just succeeded, and eventually shows it.
	List(ctx context.Context, prefix string, opts ListOptions) iter.Seq2[ObjectInfo, error]
	// Delete deletes keys (at most 1000) in one batch request and returns
	// one error per key, in keys' order (nil when deleted). Deleting a
	// missing key succeeds, so Delete is idempotent. A failed request is
	// the error of every key.
	Delete(ctx context.Context, keys []string) []error
}

// GetSmall reads the whole object at key (a marker) into memory, at most
// max bytes, with one Get. Errors: those of Get, or a size error.
func GetSmall(ctx context.Context, st Store, key string, max int64) ([]byte, error) {
	body, _, err := st.Get(ctx, key, "")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("objstore: %s is larger than %d bytes", key, max)
	}
	return b, nil
}

// PutSmallCreateOnly writes body (a small object such as a marker, held in
// memory) to key with one PutCreateOnly. Errors: those of PutCreateOnly
// (ErrExists when an object is there).
func PutSmallCreateOnly(ctx context.Context, st Store, key string, body []byte, contentType string) (ObjectInfo, error) {
	return st.PutCreateOnly(ctx, key, bytes.NewReader(body), int64(len(body)), PutOptions{ContentType: contentType})
}

// OtherBuckets is implemented by a Store that reaches the other buckets of
// its server with the same credentials (s3store does). A pointer records its
// object's bucket, and fencepub follows that bucket when it differs from
// the configured one (a reader, a rollback's source).
type OtherBuckets interface {
	// InBucket returns the Store of bucket name. It makes no call.
	InBucket(name string) Store
}

// InBucket returns st for its own bucket, the Store of bucket name when st
// implements OtherBuckets, and otherwise an error wrapping ErrNoBucket.
func InBucket(st Store, name string) (Store, error) {
	if name == st.BucketName() {
		return st, nil
	}
	if o, ok := st.(OtherBuckets); ok {
		return o.InBucket(name), nil
	}
	return nil, fmt.Errorf("%w: %q (the store reaches only bucket %q)", ErrNoBucket, name, st.BucketName())
}

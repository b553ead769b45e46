package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/minio/minio-go/v7"
)

// BucketName implements objstore.Store.
func (s *Store) BucketName() string { return s.Bucket }

// InBucket implements objstore.OtherBuckets: the same client, another
// bucket.
func (s *Store) InBucket(name string) objstore.Store { return &Store{Client: s.Client, Bucket: name} }

// CheckBucket implements objstore.Store with one BucketExists call.
func (s *Store) CheckBucket(ctx context.Context) error {
	ok, err := s.Client.BucketExists(ctx, s.Bucket)
	if err != nil {
		return Classify(err)
	}
	if !ok {
		return fmt.Errorf("%w: bucket %q", objstore.ErrNoBucket, s.Bucket)
	}
	return nil
}

// EnsureBucket implements objstore.Store.
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

// Settings implements objstore.Store: one GetBucketVersioning and one
// GetBucketLifecycle call (a bucket without lifecycle configuration has
// no rules).
func (s *Store) Settings(ctx context.Context) (objstore.BucketSettings, error) {
	v, err := s.Client.GetBucketVersioning(ctx, s.Bucket)
	if err != nil {
		return objstore.BucketSettings{}, fmt.Errorf("read the versioning of bucket %q: %w", s.Bucket, Classify(err))
	}
	out := objstore.BucketSettings{Versioning: v.Status}
	lc, err := s.Client.GetBucketLifecycle(ctx, s.Bucket)
	switch {
	case err != nil && minio.ToErrorResponse(err).Code != "NoSuchLifecycleConfiguration":
		return out, fmt.Errorf("read the lifecycle rules of bucket %q: %w", s.Bucket, Classify(err))
	case err == nil && lc != nil:
		out.LifecycleRules = len(lc.Rules)
	}
	return out, nil
}

// putOptions returns minio's create-only options for opts.
func putOptions(opts objstore.PutOptions) minio.PutObjectOptions {
	o := minio.PutObjectOptions{ContentType: opts.ContentType, UserMetadata: opts.UserMetadata}
	o.SetMatchETagExcept("*")
	return o
}

// PutCreateOnly implements objstore.Store with one PUT (never multipart)
// carrying If-None-Match: *.
func (s *Store) PutCreateOnly(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	o := putOptions(opts)
	o.DisableMultipart = true
	info, err := s.Client.PutObject(ctx, s.Bucket, key, body, size, o)
	if err != nil {
		return objstore.ObjectInfo{}, Classify(err)
	}
	return objstore.ObjectInfo{Key: key, Size: info.Size, ETag: info.ETag, LastModified: info.LastModified}, nil
}

// core returns the low-level client of s.
func (s *Store) core() minio.Core { return minio.Core{Client: s.Client} }

// CreateUpload implements objstore.Store. The If-None-Match: * it sends is
// checked again at CompleteUpload, where it decides.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	id, err := s.core().NewMultipartUpload(ctx, s.Bucket, key, putOptions(opts))
	return id, Classify(err)
}

// UploadPart implements objstore.Store.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.Reader, size int64) (objstore.Part, error) {
	p, err := s.core().PutObjectPart(ctx, s.Bucket, key, uploadID, number, body, size, minio.PutObjectPartOptions{})
	if err != nil {
		return objstore.Part{}, Classify(err)
	}
	return objstore.Part{Number: number, ETag: p.ETag}, nil
}

// CopyPart implements objstore.Store with one UploadPartCopy
// (x-amz-copy-source-if-match for src.IfMatch).
func (s *Store) CopyPart(ctx context.Context, src objstore.CopySource, key, uploadID string, number int) (objstore.Part, error) {
	hdr := map[string]string{}
	if src.IfMatch != "" {
		hdr["x-amz-copy-source-if-match"] = `"` + src.IfMatch + `"`
	}
	from := s.Bucket
	if src.Bucket != "" {
		from = src.Bucket
	}
	p, err := s.core().CopyObjectPart(ctx, from, src.Key, s.Bucket, key, uploadID, number, src.Offset, src.Length, hdr)
	if err != nil {
		return objstore.Part{}, conditionErr(Classify(err))
	}
	return objstore.Part{Number: number, ETag: p.ETag}, nil
}

// CompleteUpload implements objstore.Store with If-None-Match: * on
// CompleteMultipartUpload (MinIO ignores it on a plain CopyObject, which
// is why copies go through uploads).
func (s *Store) CompleteUpload(ctx context.Context, key, uploadID string, parts []objstore.Part) (objstore.ObjectInfo, error) {
	cp := make([]minio.CompletePart, len(parts))
	for i, p := range parts {
		cp[i] = minio.CompletePart{PartNumber: p.Number, ETag: p.ETag}
	}
	o := minio.PutObjectOptions{}
	o.SetMatchETagExcept("*")
	info, err := s.core().CompleteMultipartUpload(ctx, s.Bucket, key, uploadID, cp, o)
	if err != nil {
		return objstore.ObjectInfo{}, Classify(err)
	}
	return objstore.ObjectInfo{Key: key, Size: info.Size, ETag: info.ETag, LastModified: info.LastModified}, nil
}

// AbortUpload implements objstore.Store.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	return Classify(s.core().AbortMultipartUpload(ctx, s.Bucket, key, uploadID))
}

// ListUploads implements objstore.Store.
func (s *Store) ListUploads(ctx context.Context, prefix string) iter.Seq2[objstore.Upload, error] {
	return func(yield func(objstore.Upload, error) bool) {
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := s.Client.ListIncompleteUploads(lctx, s.Bucket, prefix, true)
		defer drain(ch, cancel)
		for u := range ch {
			if u.Err != nil {
				yield(objstore.Upload{}, Classify(u.Err))
				return
			}
			if !yield(objstore.Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated}, nil) {
				return
			}
		}
	}
}

// drain cancels a listing and empties its channel, so minio-go's goroutine
// ends.
func drain[T any](ch <-chan T, cancel context.CancelFunc) {
	cancel()
	for range ch {
	}
}

// Stat implements objstore.Store.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	info, err := s.Client.StatObject(ctx, s.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return objstore.ObjectInfo{}, Classify(err)
	}
	return objectInfo(info), nil
}

// objectInfo converts minio's description of an object.
func objectInfo(info minio.ObjectInfo) objstore.ObjectInfo {
	return objstore.ObjectInfo{Key: info.Key, Size: info.Size, ETag: info.ETag, LastModified: info.LastModified,
		ContentType: info.ContentType, UserMetadata: info.UserMetadata}
}

// Get implements objstore.Store with one GET (If-Match when ifMatch is
// set), answered before it returns.
func (s *Store) Get(ctx context.Context, key, ifMatch string) (io.ReadCloser, objstore.ObjectInfo, error) {
	opts := minio.GetObjectOptions{}
	if ifMatch != "" {
		if err := opts.SetMatchETag(ifMatch); err != nil {
			return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: ETag %q: %w", objstore.ErrConditionFailed, ifMatch, err)
		}
	}
	body, info, _, err := s.core().GetObject(ctx, s.Bucket, key, opts)
	if err != nil {
		return nil, objstore.ObjectInfo{}, conditionErr(Classify(err))
	}
	info.Key = key
	return classifiedReader{body}, objectInfo(info), nil
}

// classifiedReader classifies the errors of reading a GET's body.
type classifiedReader struct{ io.ReadCloser }

func (r classifiedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = Classify(err)
	}
	return n, err
}

// conditionErr turns the 412 of a failed If-Match (classified ErrExists,
// the answer's meaning on a create-only write) into ErrConditionFailed.
func conditionErr(err error) error {
	if errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("%w: the ETag condition does not hold: %w", objstore.ErrConditionFailed, err)
	}
	return err
}

// List implements objstore.Store with ListObjectsV2 pages.
func (s *Store) List(ctx context.Context, prefix string, opts objstore.ListOptions) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		lo := minio.ListObjectsOptions{Prefix: prefix, StartAfter: opts.StartAfter, Recursive: true, MaxKeys: opts.PageSize}
		for o := range s.Client.ListObjectsIter(ctx, s.Bucket, lo) {
			if o.Err != nil {
				yield(objstore.ObjectInfo{}, Classify(o.Err))
				return
			}
			if !yield(objstore.ObjectInfo{Key: o.Key, Size: o.Size, ETag: o.ETag, LastModified: o.LastModified}, nil) {
				return
			}
		}
	}
}

// Delete implements objstore.Store with one multi-object delete request.
// A key the store reports no result for counts as failed.
func (s *Store) Delete(ctx context.Context, keys []string) []error {
	ch := make(chan minio.ObjectInfo, len(keys))
	for _, k := range keys {
		ch <- minio.ObjectInfo{Key: k}
	}
	close(ch)
	results := make(map[string]error, len(keys))
	var batchErr error
	for r := range s.Client.RemoveObjectsWithResult(ctx, s.Bucket, ch, minio.RemoveObjectsOptions{}) {
		if r.ObjectName == "" && r.Err != nil {
			batchErr = r.Err
			continue
		}
		results[r.ObjectName] = r.Err
	}
	out := make([]error, len(keys))
	for i, k := range keys {
		err, ok := results[k]
		switch {
		case !ok && batchErr != nil:
			err = batchErr
		case !ok:
			err = errors.New("the store returned no result for the key")
		}
		out[i] = Classify(err)
	}
	return out
}

// Classify maps a minio-go error to objstore's sentinel errors, keeping
// the original in the chain; it returns context errors and nil as they
// are. It sees through %w wrapping (errors.As), which
// minio.ToErrorResponse does not.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if hint, ok := objstore.TLSProblem(err, "s3.tls", "s3.endpoint"); ok {
		return fmt.Errorf("%w: %s: %w", objstore.ErrTLS, hint, err)
	}
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("%w: %w", objstore.ErrUnavailable, err)
	}
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed":
		return fmt.Errorf("%w: %w", objstore.ErrExists, err)
	case resp.Code == "ConditionalRequestConflict" || resp.StatusCode == http.StatusConflict && resp.Code != "BucketAlreadyOwnedByYou":
		return fmt.Errorf("%w: %w", objstore.ErrConditionFailed, err)
	case resp.Code == "NoSuchBucket":
		return fmt.Errorf("%w: %w", objstore.ErrNoBucket, err)
	case resp.Code == "NoSuchKey" || resp.Code == "NoSuchUpload" || resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	case resp.Code == "AccessDenied" || resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch",
		resp.Code == "InvalidTokenId" || resp.Code == "InvalidToken" || resp.Code == "ExpiredToken": // a temporary key's session token
		return fmt.Errorf("%w: %w", objstore.ErrAccessDenied, err)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: %w", objstore.ErrUnavailable, err)
	}
	return err
}

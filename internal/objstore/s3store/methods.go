package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// BucketName implements objstore.Store.
func (s *Store) BucketName() string { return s.Bucket }

// InBucket implements objstore.OtherBuckets: the same client, another
// bucket.
func (s *Store) InBucket(name string) objstore.Store {
	return &Store{Client: s.Client, Bucket: name, tr: s.tr}
}

// CheckBucket implements objstore.Store with one BucketExists call. When
// the answer is "no such bucket", "access denied" or not one of S3's, one
// unsigned request (notS3) tells a wrong s3.endpoint (objstore.ErrNotS3)
// from a missing bucket.
func (s *Store) CheckBucket(ctx context.Context) error {
	ok, err := s.Client.BucketExists(ctx, s.Bucket)
	return s.bucketAnswer(ctx, ok, err)
}

// bucketAnswer classifies the answer of BucketExists (ok, err): nil when
// the bucket exists; objstore.ErrNotS3 when the endpoint does not answer as
// S3 does; else objstore.ErrNoBucket or Classify(err).
func (s *Store) bucketAnswer(ctx context.Context, ok bool, err error) error {
	switch err = Classify(err); {
	case err == nil && ok:
		return nil
	case errors.Is(err, objstore.ErrUnavailable), errors.Is(err, objstore.ErrTLS),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	if nerr := s.notS3(ctx); nerr != nil {
		return nerr
	}
	if err == nil {
		err = fmt.Errorf("%w: bucket %q", objstore.ErrNoBucket, s.Bucket)
	}
	return err
}

// notS3Sniff is how much of notS3's answer it reads.
const notS3Sniff = 512

// notS3 sends one unsigned GET of the bucket's location, which every S3
// implementation answers with an XML document (the location, or an error
// such as AccessDenied or NoSuchBucket). It returns objstore.ErrNotS3
// describing the answer (status, content type, Server header, its first
// bytes) when the answer is not XML: the endpoint is something else (etcd's
// client port answers 404 text, a web console an HTML page). It returns nil
// when the answer is XML or the request fails (the caller's error stands).
func (s *Store) notS3(ctx context.Context) error {
	u := *s.Client.EndpointURL()
	u.Path, u.RawQuery = "/"+s.Bucket+"/", "location="
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil
	}
	tr := s.tr
	if tr == nil {
		tr = http.DefaultTransport
	}
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, notS3Sniff))
	ct := resp.Header.Get("Content-Type")
	body := bytes.TrimSpace(head)
	if strings.Contains(ct, "xml") || bytes.HasPrefix(body, []byte("<?xml")) || bytes.HasPrefix(body, []byte("<Error")) {
		return nil
	}
	server := resp.Header.Get("Server")
	if server != "" {
		server = ", server " + strconv.Quote(server)
	}
	snippet := strings.ToValidUTF8(string(body[:min(len(body), 60)]), "?")
	return fmt.Errorf("%w: %s answered GET %s with %s (content type %q%s, body %q), not an S3 XML document: "+
		"is s3.endpoint (--s3-endpoint) the store's S3 API address (MinIO's is port 9000, not its console's), and s3.secure right?",
		objstore.ErrNotS3, s.Client.EndpointURL().Host, u.Path+"?"+u.RawQuery, resp.Status, ct, server, snippet)
}

// EnsureBucket implements objstore.Store.
func (s *Store) EnsureBucket(ctx context.Context) error {
	ok, err := s.Client.BucketExists(ctx, s.Bucket)
	if cerr := s.bucketAnswer(ctx, ok, err); cerr == nil || !errors.Is(cerr, objstore.ErrNoBucket) {
		return cerr
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
// no rules). Each rule is read as objstore.LifecycleRule.
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
		for _, r := range lc.Rules {
			out.LifecycleRules = append(out.LifecycleRules, lifecycleRule(r))
		}
	}
	return out, nil
}

// lifecycleRule returns what fencepub reads of r: its filter's prefix (the
// rule's own Prefix when it has no filter), whether tags or sizes narrow
// it, its noncurrent-version expiration, and whether it does anything else.
func lifecycleRule(r lifecycle.Rule) objstore.LifecycleRule {
	f := r.RuleFilter
	out := objstore.LifecycleRule{
		ID:             r.ID,
		Enabled:        r.Status == "Enabled",
		Prefix:         r.Prefix,
		NoncurrentDays: int(r.NoncurrentVersionExpiration.NoncurrentDays),
		Narrowed: !f.Tag.IsEmpty() || f.ObjectSizeLessThan > 0 || f.ObjectSizeGreaterThan > 0 ||
			len(f.And.Tags) > 0 || f.And.ObjectSizeLessThan > 0 || f.And.ObjectSizeGreaterThan > 0,
		OtherActions: !r.Expiration.IsDaysNull() || !r.Expiration.IsDateNull() || bool(r.Expiration.DeleteAll) ||
			!r.AbortIncompleteMultipartUpload.IsDaysNull() || !r.Transition.IsNull() ||
			!r.NoncurrentVersionTransition.IsDaysNull() || !r.NoncurrentVersionTransition.IsStorageClassEmpty() ||
			!r.DelMarkerExpiration.IsNull() || !r.AllVersionsExpiration.IsNull() ||
			r.Compression != nil || r.NoncurrentVersionCompression != nil,
	}
	switch {
	case f.And.Prefix != "":
		out.Prefix = f.And.Prefix
	case f.Prefix != "":
		out.Prefix = f.Prefix
	}
	return out
}

// PutOverwrite implements objstore.Overwriter with one PUT without
// If-None-Match, which replaces an object at key (or, in a versioned
// bucket, adds a version of it). fencepub writes no data this way: only
// objstore.ProbeOverwrite calls it, on its probe object.
func (s *Store) PutOverwrite(ctx context.Context, key string, body []byte, contentType string) error {
	_, err := s.Client.PutObject(ctx, s.Bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{ContentType: contentType})
	return Classify(err)
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
			return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: ETag %q: %w", objstore.ErrConditionConflict, ifMatch, err)
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
// the answer's meaning on a create-only write) into ErrConditionConflict.
func conditionErr(err error) error {
	if errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("%w: the ETag condition does not hold: %w", objstore.ErrConditionConflict, err)
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
		return fmt.Errorf("%w: %w", objstore.ErrConditionConflict, err)
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

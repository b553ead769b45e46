// Package memstore is an in-memory objstore.Store for unit tests of logic:
// one bucket held in a map, honouring the contract of objstore.Store
// (create-only writes and completions, ETags and If-Match, multipart
// uploads, sorted listings, batch delete) with read-after-write listings.
// It passes the conformance suite of package storetest. Nothing persists.
package memstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
)

// maxDelete is the most keys one Delete takes, as S3's DeleteObjects.
const maxDelete = 1000

// Store is an in-memory bucket. The zero value is not usable; use New.
// Safe for concurrent use.
type Store struct {
	bucket string
	now    func() time.Time

	mu      sync.Mutex
	objects map[string]object
	uploads map[string]*upload
	nextID  int
}

type object struct {
	body []byte
	info objstore.ObjectInfo
}

type upload struct {
	key       string
	opts      objstore.PutOptions
	parts     map[int][]byte
	initiated time.Time
}

var _ objstore.Store = (*Store)(nil)

// New returns an empty bucket named bucket. now is the store's clock
// (LastModified, Initiated); nil means time.Now.
func New(bucket string, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{bucket: bucket, now: now, objects: map[string]object{}, uploads: map[string]*upload{}}
}

// BucketName implements objstore.Store.
func (s *Store) BucketName() string { return s.bucket }

// CheckBucket implements objstore.Store: the bucket always exists.
func (s *Store) CheckBucket(ctx context.Context) error { return ctx.Err() }

// EnsureBucket implements objstore.Store.
func (s *Store) EnsureBucket(ctx context.Context) error { return ctx.Err() }

// Settings implements objstore.Store: no versioning, no lifecycle rules.
func (s *Store) Settings(ctx context.Context) (objstore.BucketSettings, error) {
	return objstore.BucketSettings{}, ctx.Err()
}

// etag returns the S3 ETag of a single-part body: its hex MD5.
func etag(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// readExactly reads size bytes of body; a body with fewer bytes is an
// error, as a PUT whose Content-Length the body does not fill.
func readExactly(body io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("memstore: size %d: want the body's length", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, fmt.Errorf("memstore: read the body: %w", err)
	}
	return b, nil
}

// store creates key from body unless it exists; s.mu is held.
func (s *Store) store(key string, body []byte, tag string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if _, ok := s.objects[key]; ok {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: %s", objstore.ErrExists, key)
	}
	info := objstore.ObjectInfo{Key: key, Size: int64(len(body)), ETag: tag, LastModified: s.now(),
		ContentType: opts.ContentType, UserMetadata: maps.Clone(opts.UserMetadata)}
	if info.ContentType == "" {
		info.ContentType = "application/octet-stream"
	}
	s.objects[key] = object{body: body, info: info}
	return info, nil
}

// PutCreateOnly implements objstore.Store.
func (s *Store) PutCreateOnly(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	b, err := readExactly(body, size)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store(key, b, etag(b), opts)
}

// CreateUpload implements objstore.Store.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; ok { // checked here too, as MinIO does
		return "", fmt.Errorf("%w: %s", objstore.ErrExists, key)
	}
	s.nextID++
	id := "upload-" + strconv.Itoa(s.nextID)
	s.uploads[id] = &upload{key: key, opts: opts, parts: map[int][]byte{}, initiated: s.now()}
	return id, nil
}

// findUpload returns upload id of key; s.mu is held.
func (s *Store) findUpload(key, id string) (*upload, error) {
	u, ok := s.uploads[id]
	if !ok || u.key != key {
		return nil, fmt.Errorf("%w: upload %s of %s", objstore.ErrNotFound, id, key)
	}
	return u, nil
}

// addPart stores part number of upload id; s.mu is not held.
func (s *Store) addPart(key, id string, number int, b []byte) (objstore.Part, error) {
	if number < 1 || number > 10000 {
		return objstore.Part{}, fmt.Errorf("memstore: part number %d outside 1..10000", number)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.findUpload(key, id)
	if err != nil {
		return objstore.Part{}, err
	}
	u.parts[number] = b
	return objstore.Part{Number: number, ETag: etag(b)}, nil
}

// UploadPart implements objstore.Store.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.Reader, size int64) (objstore.Part, error) {
	if err := ctx.Err(); err != nil {
		return objstore.Part{}, err
	}
	b, err := readExactly(body, size)
	if err != nil {
		return objstore.Part{}, err
	}
	return s.addPart(key, uploadID, number, b)
}

// CopyPart implements objstore.Store.
func (s *Store) CopyPart(ctx context.Context, src objstore.CopySource, key, uploadID string, number int) (objstore.Part, error) {
	if err := ctx.Err(); err != nil {
		return objstore.Part{}, err
	}
	if src.Bucket != "" && src.Bucket != s.bucket {
		return objstore.Part{}, fmt.Errorf("%w: %q", objstore.ErrNoBucket, src.Bucket)
	}
	s.mu.Lock()
	o, ok := s.objects[src.Key]
	s.mu.Unlock()
	switch {
	case !ok:
		return objstore.Part{}, fmt.Errorf("%w: copy source %s", objstore.ErrNotFound, src.Key)
	case src.IfMatch != "" && src.IfMatch != o.info.ETag:
		return objstore.Part{}, fmt.Errorf("%w: copy source %s has ETag %s, not %s", objstore.ErrConditionFailed, src.Key, o.info.ETag, src.IfMatch)
	}
	b := o.body
	if src.Length >= 0 {
		if src.Offset < 0 || src.Offset+src.Length > int64(len(b)) {
			return objstore.Part{}, fmt.Errorf("memstore: copy range %d+%d outside %s's %d bytes", src.Offset, src.Length, src.Key, len(b))
		}
		b = b[src.Offset : src.Offset+src.Length]
	}
	return s.addPart(key, uploadID, number, bytes.Clone(b))
}

// CompleteUpload implements objstore.Store. A refused completion (ErrExists)
// leaves the upload in place, to be aborted, as S3 does.
func (s *Store) CompleteUpload(ctx context.Context, key, uploadID string, parts []objstore.Part) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.findUpload(key, uploadID)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if _, ok := s.objects[key]; ok {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: %s", objstore.ErrExists, key)
	}
	if len(parts) == 0 {
		return objstore.ObjectInfo{}, fmt.Errorf("memstore: complete %s: no parts", key)
	}
	var body, sums []byte
	for i, p := range parts {
		b, ok := u.parts[p.Number]
		if !ok || etag(b) != p.ETag || i > 0 && p.Number <= parts[i-1].Number {
			return objstore.ObjectInfo{}, fmt.Errorf("memstore: complete %s: part %d (ETag %s) is not an uploaded part in order", key, p.Number, p.ETag)
		}
		body = append(body, b...)
		sum := md5.Sum(b)
		sums = append(sums, sum[:]...)
	}
	info, err := s.store(key, body, etag(sums)+"-"+strconv.Itoa(len(parts)), u.opts)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	delete(s.uploads, uploadID)
	return info, nil
}

// AbortUpload implements objstore.Store.
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.findUpload(key, uploadID); err != nil {
		return err
	}
	delete(s.uploads, uploadID)
	return nil
}

// ListUploads implements objstore.Store, for any prefix.
func (s *Store) ListUploads(ctx context.Context, prefix string) iter.Seq2[objstore.Upload, error] {
	return func(yield func(objstore.Upload, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(objstore.Upload{}, err)
			return
		}
		s.mu.Lock()
		var out []objstore.Upload
		for id, u := range s.uploads {
			if strings.HasPrefix(u.key, prefix) {
				out = append(out, objstore.Upload{Key: u.key, UploadID: id, Initiated: u.initiated})
			}
		}
		s.mu.Unlock()
		slices.SortFunc(out, func(a, b objstore.Upload) int {
			return cmp.Or(strings.Compare(a.Key, b.Key), a.Initiated.Compare(b.Initiated), strings.Compare(a.UploadID, b.UploadID))
		})
		for _, u := range out {
			if !yield(u, nil) {
				return
			}
		}
	}
}

// Stat implements objstore.Store.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: %s", objstore.ErrNotFound, key)
	}
	info := o.info
	info.UserMetadata = maps.Clone(info.UserMetadata)
	return info, nil
}

// Get implements objstore.Store. The body is a snapshot of the object.
func (s *Store) Get(ctx context.Context, key, ifMatch string) (io.ReadCloser, objstore.ObjectInfo, error) {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	if ifMatch != "" && ifMatch != info.ETag {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("%w: %s has ETag %s, not %s", objstore.ErrConditionFailed, key, info.ETag, ifMatch)
	}
	s.mu.Lock()
	body := s.objects[key].body
	s.mu.Unlock()
	return io.NopCloser(bytes.NewReader(body)), info, nil
}

// List implements objstore.Store over a snapshot taken when the loop
// starts.
func (s *Store) List(ctx context.Context, prefix string, opts objstore.ListOptions) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(objstore.ObjectInfo{}, err)
			return
		}
		s.mu.Lock()
		var out []objstore.ObjectInfo
		for k, o := range s.objects {
			if strings.HasPrefix(k, prefix) && k > opts.StartAfter {
				out = append(out, objstore.ObjectInfo{Key: k, Size: o.info.Size, ETag: o.info.ETag, LastModified: o.info.LastModified})
			}
		}
		s.mu.Unlock()
		slices.SortFunc(out, func(a, b objstore.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
		for _, o := range out {
			if err := ctx.Err(); err != nil {
				yield(objstore.ObjectInfo{}, err)
				return
			}
			if !yield(o, nil) {
				return
			}
		}
	}
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, keys []string) []error {
	out := make([]error, len(keys))
	err := ctx.Err()
	if err == nil && len(keys) > maxDelete {
		err = fmt.Errorf("memstore: %d keys in one delete; at most %d", len(keys), maxDelete)
	}
	if err != nil {
		for i := range out {
			out[i] = err
		}
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.objects, k)
	}
	return out
}

package publisher

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/minio/minio-go/v7"
)

// Object writes. Every write is create-only (If-None-Match: *) on a key no
// one else uses (the attempt's nonce), so a 412 can only be the attempt's
// own earlier request whose response was lost; it is accepted after checking
// that the object there is the one written (DESIGN.md "Object layout",
// "Publish" step 1). A 409 ConditionalRequestConflict is retried. Nothing
// here ever deletes an object; a failed multipart upload is aborted.

const (
	// conflictRetries bounds retries of a request answered 409.
	conflictRetries = 5
	// maxParts is S3's limit on parts per multipart upload.
	maxParts = 10000
	// copyPartSize is the range of one server-side UploadPartCopy, in bytes
	// (S3 allows up to 5 GiB).
	copyPartSize = 1 << 30
	// abortTimeout bounds the clean-up of a failed upload, which runs on a
	// fresh context because the caller's may be cancelled.
	abortTimeout = 10 * time.Second
)

// putOpts returns create-only PUT options with content type and user
// metadata, plus metaSHA256 when sha is non-empty.
func putOpts(contentType string, meta map[string]string, sha string) minio.PutObjectOptions {
	um := make(map[string]string, len(meta)+1)
	for k, v := range meta {
		um[k] = v
	}
	if sha != "" {
		um[metaSHA256] = sha
	}
	opts := minio.PutObjectOptions{ContentType: contentType, UserMetadata: um}
	opts.SetMatchETagExcept("*")
	return opts
}

// writeObject streams body to key create-only and returns the object and
// the body's sha256 (32 bytes), computed while streaming. A body up to
// Config.PartSize goes in one PUT; a larger one in a multipart upload of
// PartSize parts, holding one part in memory. Errors: ErrBody (the body's
// read error, wrapped), ErrObjectMismatch, objstore errors (ErrUnavailable,
// ErrNotFound for a missing bucket).
func (c *Client) writeObject(ctx context.Context, key string, body io.Reader, contentType string, meta map[string]string) (layout.Object, []byte, error) {
	if body == nil {
		body = bytes.NewReader(nil)
	}
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(body, h), 64<<10)
	part, last, err := fillPart(br, nil, int(c.cfg.PartSize))
	if err != nil {
		return layout.Object{}, nil, fmt.Errorf("%w after %d bytes: %w", ErrBody, len(part), err)
	}
	if last {
		sum := h.Sum(nil)
		obj, err := c.putSingle(ctx, key, part, hex.EncodeToString(sum), contentType, meta)
		return obj, sum, err
	}
	return c.putMultipart(ctx, key, br, part, h, contentType, meta)
}

// fillPart reads from r into buf (reusing its capacity, growing it up to
// limit bytes) until buf holds limit bytes or r ends. last reports that r
// has no more bytes after this part; when it is false the next call returns
// at least one byte.
func fillPart(r *bufio.Reader, buf []byte, limit int) (part []byte, last bool, err error) {
	buf = buf[:0]
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(max(2*cap(buf), 64<<10), limit))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, true, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
	if _, err := r.Peek(1); errors.Is(err, io.EOF) {
		return buf, true, nil
	} else if err != nil {
		return buf, false, err
	}
	return buf, false, nil
}

// putSingle writes data in one create-only PUT with Content-MD5, retrying a
// 409. A 412 is accepted when the object there carries our sha256 and size.
func (c *Client) putSingle(ctx context.Context, key string, data []byte, sha, contentType string, meta map[string]string) (layout.Object, error) {
	st := c.cfg.Store
	opts := putOpts(contentType, meta, sha)
	opts.SendContentMd5 = true
	obj := layout.Object{Bucket: st.Bucket, Key: key, SHA256: sha, Size: int64(len(data))}
	for attempt := 1; ; attempt++ {
		info, err := st.Client.PutObject(ctx, st.Bucket, key, bytes.NewReader(data), int64(len(data)), opts)
		if err == nil {
			obj.ETag = info.ETag
			return obj, nil
		}
		err = objstore.Classify(err)
		switch {
		case errors.Is(err, objstore.ErrConditionConflict) && attempt < conflictRetries:
			if !sleep(ctx, backoff(attempt)) {
				return layout.Object{}, fmt.Errorf("publisher: put %s: %w", key, err)
			}
		case errors.Is(err, objstore.ErrExists):
			return c.verifyOwn(ctx, obj, "")
		default:
			return layout.Object{}, fmt.Errorf("publisher: put %s: %w", key, err)
		}
	}
}

// putMultipart uploads first and then the rest of br in parts, each with
// Content-MD5, and completes create-only. h already covers first and sees
// every later byte through br.
func (c *Client) putMultipart(ctx context.Context, key string, br *bufio.Reader, first []byte, h hash.Hash, contentType string, meta map[string]string) (obj layout.Object, sum []byte, err error) {
	st := c.cfg.Store
	core := minio.Core{Client: st.Client}
	opts := putOpts(contentType, meta, "")
	id, err := core.NewMultipartUpload(ctx, st.Bucket, key, opts)
	if err != nil {
		return layout.Object{}, nil, c.createErr(key, err)
	}
	defer func() {
		if err != nil {
			c.abort(key, id)
		}
	}()
	var (
		parts []minio.CompletePart
		md5s  []byte
		size  int64
		part  = first
		last  bool
	)
	for n := 1; ; n++ {
		if n > maxParts {
			return layout.Object{}, nil, fmt.Errorf("%w: body exceeds %d parts of %d bytes", ErrInvalid, maxParts, c.cfg.PartSize)
		}
		pm := md5.Sum(part)
		p, err := core.PutObjectPart(ctx, st.Bucket, key, id, n, bytes.NewReader(part), int64(len(part)),
			minio.PutObjectPartOptions{Md5Base64: base64.StdEncoding.EncodeToString(pm[:])})
		if err != nil {
			return layout.Object{}, nil, fmt.Errorf("publisher: upload part %d of %s: %w", n, key, objstore.Classify(err))
		}
		parts = append(parts, minio.CompletePart{PartNumber: n, ETag: p.ETag})
		md5s = append(md5s, pm[:]...)
		size += int64(len(part))
		if last {
			break
		}
		part, last, err = fillPart(br, part, int(c.cfg.PartSize))
		if err != nil {
			return layout.Object{}, nil, fmt.Errorf("%w after %d bytes: %w", ErrBody, size+int64(len(part)), err)
		}
	}
	sum = h.Sum(nil)
	obj = layout.Object{Bucket: st.Bucket, Key: key, SHA256: hex.EncodeToString(sum), Size: size}
	wantETag := multipartETag(md5s, len(parts))
	obj, err = c.complete(ctx, core, key, id, parts, obj, wantETag)
	return obj, sum, err
}

// multipartETag is the S3 ETag of a completed multipart upload: the hex md5
// of the parts' binary md5s, '-', the part count.
func multipartETag(md5s []byte, parts int) string {
	s := md5.Sum(md5s)
	return hex.EncodeToString(s[:]) + "-" + strconv.Itoa(parts)
}

// complete completes upload id create-only, retrying a 409. A 412 or a
// NoSuchUpload (our earlier completion whose response was lost) is accepted
// after verifyOwn with wantETag (or the sha256 metadata when wantETag is "").
func (c *Client) complete(ctx context.Context, core minio.Core, key, id string, parts []minio.CompletePart, obj layout.Object, wantETag string) (layout.Object, error) {
	opts := minio.PutObjectOptions{}
	opts.SetMatchETagExcept("*")
	for attempt := 1; ; attempt++ {
		info, err := core.CompleteMultipartUpload(ctx, obj.Bucket, key, id, parts, opts)
		if err == nil {
			obj.ETag = info.ETag
			return obj, nil
		}
		code := minio.ToErrorResponse(err).Code
		err = objstore.Classify(err)
		switch {
		case errors.Is(err, objstore.ErrConditionConflict) && attempt < conflictRetries:
			if !sleep(ctx, backoff(attempt)) {
				return layout.Object{}, fmt.Errorf("publisher: complete %s: %w", key, err)
			}
		case errors.Is(err, objstore.ErrExists) || code == "NoSuchUpload":
			return c.verifyOwn(ctx, obj, wantETag)
		default:
			return layout.Object{}, fmt.Errorf("publisher: complete %s: %w", key, err)
		}
	}
}

// verifyOwn checks that the object at obj.Key is the one this attempt wrote:
// same size, and same ETag when wantETag is set, else a metaSHA256 equal to
// obj.SHA256. It returns obj with the stored ETag, or ErrObjectMismatch.
func (c *Client) verifyOwn(ctx context.Context, obj layout.Object, wantETag string) (layout.Object, error) {
	info, err := c.cfg.Store.Client.StatObject(ctx, obj.Bucket, obj.Key, minio.StatObjectOptions{})
	if err != nil {
		return layout.Object{}, fmt.Errorf("publisher: stat %s after a create-only conflict: %w", obj.Key, objstore.Classify(err))
	}
	var sha string
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, metaSHA256) {
			sha = v
		}
	}
	ok := info.Size == obj.Size
	if wantETag != "" {
		ok = ok && info.ETag == wantETag
	} else {
		ok = ok && sha == obj.SHA256
	}
	if !ok {
		return layout.Object{}, fmt.Errorf("%w: %s holds %d bytes, ETag %s, sha256 %q; wrote %d bytes, sha256 %s",
			ErrObjectMismatch, obj.Key, info.Size, info.ETag, sha, obj.Size, obj.SHA256)
	}
	obj.ETag = info.ETag
	return obj, nil
}

// copyObject copies src server-side to a fresh key create-only (a multipart
// UploadPartCopy: MinIO ignores If-None-Match on a plain CopyObject, but
// honours it when a multipart upload completes). Each part requires the
// source's ETag. The copy carries contentType, meta and metaSHA256 =
// src.SHA256. Errors: ErrSourceGone, ErrObjectMismatch, objstore errors.
func (c *Client) copyObject(ctx context.Context, src layout.Object, key, contentType string, meta map[string]string) (obj layout.Object, err error) {
	st := c.cfg.Store
	core := minio.Core{Client: st.Client}
	id, err := core.NewMultipartUpload(ctx, st.Bucket, key, putOpts(contentType, meta, src.SHA256))
	if err != nil {
		return layout.Object{}, c.createErr(key, err)
	}
	defer func() {
		if err != nil {
			c.abort(key, id)
		}
	}()
	hdr := map[string]string{}
	if src.ETag != "" {
		hdr["x-amz-copy-source-if-match"] = `"` + src.ETag + `"`
	}
	var parts []minio.CompletePart
	for off, n := int64(0), 1; off < src.Size || n == 1; n++ {
		length := min(int64(copyPartSize), src.Size-off)
		if src.Size == 0 {
			length = -1 // the whole (empty) object; a range cannot name zero bytes
		}
		p, err := core.CopyObjectPart(ctx, src.Bucket, src.Key, st.Bucket, key, id, n, off, length, hdr)
		if err != nil {
			err = objstore.Classify(err)
			switch {
			case errors.Is(err, objstore.ErrNotFound):
				return layout.Object{}, fmt.Errorf("%w: %s: %w", ErrSourceGone, src.Key, err)
			case errors.Is(err, objstore.ErrExists): // 412 on the source condition
				return layout.Object{}, fmt.Errorf("%w: source %s no longer has ETag %s: %w", ErrObjectMismatch, src.Key, src.ETag, err)
			}
			return layout.Object{}, fmt.Errorf("publisher: copy part %d of %s to %s: %w", n, src.Key, key, err)
		}
		parts = append(parts, p)
		off += max(length, 0)
	}
	obj = layout.Object{Bucket: st.Bucket, Key: key, SHA256: src.SHA256, Size: src.Size}
	return c.complete(ctx, core, key, id, parts, obj, "")
}

// createErr classifies the error of starting a create-only upload: a 412
// there means the key existed before this attempt wrote anything.
func (c *Client) createErr(key string, err error) error {
	err = objstore.Classify(err)
	if errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("%w: %s exists before the attempt wrote it: %w", ErrObjectMismatch, key, err)
	}
	return fmt.Errorf("publisher: start upload of %s: %w", key, err)
}

// abort aborts a failed multipart upload on a fresh, bounded context.
func (c *Client) abort(key, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	core := minio.Core{Client: c.cfg.Store.Client}
	if err := core.AbortMultipartUpload(ctx, c.cfg.Store.Bucket, key, id); err != nil {
		c.log.Warn("abort multipart upload failed; GC aborts it later", "key", key, "upload_id", id, "err", err)
	}
}

// backoff is the wait before retry attempt+1: 50 ms doubling to 1 s.
func backoff(attempt int) time.Duration {
	return min(50*time.Millisecond<<min(attempt-1, 5), time.Second)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

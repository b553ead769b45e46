package publisher

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/retry"
)

// Object writes. Every write is create-only (If-None-Match: *) on a key no
// one else uses (the attempt's nonce), so a 412 can only be the attempt's
// own earlier request whose response was lost; it is accepted after checking
// that the object there holds the bytes written (DESIGN.md "Object layout",
// "Publish" step 1). A 409 ConditionalRequestConflict is retried when the
// body can be sent again. Nothing here ever deletes an object; a failed
// multipart upload is aborted.
//
// Transfer integrity is the S3 client's: over HTTP every chunk of a PUT is
// signed with its sha256 (AWS streaming signature v4), which the store
// checks; over HTTPS, TLS. The body's sha256, computed from the bytes as
// they are sent, goes into the pointer, and readers verify against it. No
// Content-MD5 is sent: it would cost a second pass over the body (MD5 runs
// at half sha256's speed here) for a check the signature already makes.

const (
	// conflictRetries bounds the sends of an object write retried on a
	// 409.
	conflictRetries = 5
	// maxParts is S3's limit on parts per multipart upload.
	maxParts = 10000
	// maxSinglePut is S3's limit on one PUT, in bytes; a body of known
	// length up to it is streamed in one PUT.
	maxSinglePut = 5 << 30
	// copyPartSize is the range of one server-side UploadPartCopy, in bytes
	// (S3 allows up to 5 GiB).
	copyPartSize = 1 << 30
	// abortTimeout bounds the clean-up of a failed upload, which runs on a
	// context detached from the caller's cancellation but not from its
	// deadline (abort).
	abortTimeout = 10 * time.Second
)

// ErrUploadAborted: the multipart upload of an attempt's object was
// aborted before it completed, so nothing was stored under the attempt's
// key and nothing was published; publish again. GC aborts the uploads of a
// grant that is no longer live once they are older than the abandon
// period, and those at or below the pointer or the seal (DESIGN.md "Garbage
// collection"). It is returned together with objstore's not-found error.
var ErrUploadAborted = errors.New("publisher: the multipart upload was aborted by GC before it completed")

// uploadAborted is the error of an attempt whose upload id of key is gone
// with no object at key; err is the store's.
func uploadAborted(key, id string, err error) error {
	return fmt.Errorf("%w: %s (upload %s); nothing was stored or published: %w", ErrUploadAborted, key, id, err)
}

// putOpts returns the write options with content type and user metadata,
// plus metaSHA256 when sha is non-empty.
func putOpts(contentType string, meta map[string]string, sha string) objstore.PutOptions {
	um := make(map[string]string, len(meta)+1)
	for k, v := range meta {
		um[k] = v
	}
	if sha != "" {
		um[metaSHA256] = sha
	}
	return objstore.PutOptions{ContentType: contentType, UserMetadata: um}
}

// bodySize returns the length of body in bytes when it is known without
// reading it: size when positive, 0 for a nil body, else the remaining
// length of a *bytes.Reader, *bytes.Buffer, *strings.Reader or regular
// *os.File; -1 when unknown.
func bodySize(body io.Reader, size int64) int64 {
	switch b := body.(type) {
	case nil:
		return 0
	case interface{ Len() int }: // *bytes.Reader, *bytes.Buffer, *strings.Reader
		if size <= 0 {
			return int64(b.Len())
		}
	case *os.File:
		if size > 0 {
			break
		}
		fi, err := b.Stat()
		// Files of /proc and some FUSE mounts are regular but say 0 bytes,
		// and those of /sys say a page: their length is unknown.
		if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 || pseudoFS(b) {
			return -1
		}
		off, err := b.Seek(0, io.SeekCurrent)
		if err != nil || off > fi.Size() {
			return -1
		}
		return fi.Size() - off
	}
	if size > 0 {
		return size
	}
	return -1
}

// writeObject streams body to key create-only and returns the object and
// the body's sha256 (32 bytes), computed while streaming. size is the
// body's length in bytes, or -1 when unknown (see bodySize). A body of known
// length up to maxSinglePut is streamed in one PUT, holding none of it in
// memory; a body of unknown length up to Config.PartSize goes in one PUT
// from memory, and a longer one (or one above maxSinglePut) in a multipart
// upload of PartSize parts, filling the next part while the current one is
// sent (two parts in memory). Errors: ErrBody (the body's read error,
// wrapped, or a body whose length is not size), ErrObjectMismatch, the
// store's errors (objstore.ErrUnavailable, objstore.ErrNoBucket).
func (c *Client) writeObject(ctx context.Context, key string, body io.Reader, size int64, contentType string, meta map[string]string) (layout.Object, []byte, error) {
	if body == nil {
		body = bytes.NewReader(nil)
	}
	if mayBlock(body) {
		body = &ctxReader{ctx: ctx, r: body}
	}
	if size >= 0 && size <= maxSinglePut {
		return c.putStream(ctx, key, body, size, contentType, meta)
	}
	if size > maxSinglePut { // multipart, holding the body to its stated length
		body = &exactReader{r: body, left: size}
	}
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(body, h), 64<<10)
	part, last, err := fillPart(ctx, br, nil, int(c.cfg.PartSize))
	if err != nil {
		return layout.Object{}, nil, bodyErr(ctx, key, int64(len(part)), err)
	}
	if last {
		sum := h.Sum(nil)
		obj := layout.Object{Bucket: c.cfg.Store.BucketName(), Key: key, SHA256: hex.EncodeToString(sum), Size: int64(len(part))}
		obj, err := c.putSingle(ctx, obj, part, contentType, meta)
		return obj, sum, err
	}
	return c.putMultipart(ctx, key, br, part, h, contentType, meta)
}

// bodyErr is the error of reading a body after n bytes: ctx's error when
// ctx ended, else ErrBody wrapping err.
func bodyErr(ctx context.Context, key string, n int64, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("publisher: write %s stopped after %d bytes of the body: %w", key, n, ctx.Err())
	}
	return fmt.Errorf("%w after %d bytes: %w", ErrBody, n, err)
}

// fillPart reads from r into buf (reusing its capacity, growing it up to
// limit bytes) until buf holds limit bytes or r ends. last reports that r
// has no more bytes after this part; when it is false the next call returns
// at least one byte. It stops with ctx's error once ctx ends (a body that
// may block is read through a ctxReader).
func fillPart(ctx context.Context, r *bufio.Reader, buf []byte, limit int) (part []byte, last bool, err error) {
	buf = buf[:0]
	for len(buf) < limit {
		if err := ctx.Err(); err != nil {
			return buf, false, err
		}
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

// mayBlock reports whether a Read of body may wait indefinitely (a pipe, a
// socket, a caller's own reader): anything but an in-memory reader, a
// regular file or a seekable reader.
func mayBlock(body io.Reader) bool {
	switch b := body.(type) {
	case interface{ Len() int }:
		return false
	case *os.File:
		fi, err := b.Stat()
		return err != nil || !fi.Mode().IsRegular()
	case io.Seeker:
		return false
	}
	return true
}

// ctxReader reads r in a goroutine of its own so that a Read blocked in r
// (a stalled pipe) ends with ctx's error when ctx ends; without it the
// HTTP transport, which waits for its body's Read, would hold Publish past
// its context. The abandoned Read finishes in its goroutine whenever r
// returns, and its bytes are dropped; every later Read fails. Not for
// concurrent use (one reader at a time, as a request body is read).
type ctxReader struct {
	ctx  context.Context
	r    io.Reader
	buf  []byte          // what the goroutine reads into
	res  chan readResult // the Read in flight, nil when none
	rest []byte          // bytes read, not yet returned
	err  error           // sticky: r's error or ctx's
}

// ctxReadSize bounds one Read of a ctxReader, and so its buffer: callers
// such as bufio pass their whole destination (a 16 MiB part).
const ctxReadSize = 256 << 10

type readResult struct {
	n   int
	err error
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if len(c.rest) > 0 {
		n := copy(p, c.rest)
		c.rest = c.rest[n:]
		return n, nil
	}
	if c.err != nil || len(p) == 0 {
		return 0, c.err
	}
	if c.res == nil {
		want := min(len(p), ctxReadSize)
		if cap(c.buf) < want {
			c.buf = make([]byte, want)
		}
		buf, res := c.buf[:want], make(chan readResult, 1)
		c.res = res
		go func() {
			n, err := c.r.Read(buf)
			res <- readResult{n, err}
		}()
	}
	select {
	case r := <-c.res:
		c.res = nil
		n := copy(p, c.buf[:r.n])
		c.rest = c.buf[n:r.n]
		c.err = r.err
		if len(c.rest) > 0 {
			return n, nil
		}
		return n, r.err
	case <-c.ctx.Done():
		c.err = context.Cause(c.ctx) // c.buf stays the goroutine's
		return 0, c.err
	}
}

// exactReader passes exactly left bytes of r on and fails (ErrBody) when r
// ends before them or has more after them.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left == 0 {
		if err := bodyEnded(e.r); err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	n, err := e.r.Read(p[:min(int64(len(p)), e.left)])
	e.left -= int64(n)
	if errors.Is(err, io.EOF) && e.left > 0 {
		return n, fmt.Errorf("%w: the body ended %d bytes before its stated size", ErrBody, e.left)
	}
	if errors.Is(err, io.EOF) {
		return n, nil // the next Read checks that nothing follows
	}
	return n, err
}

// bodyReader reads at most size bytes of a body into a hash, counting them
// and keeping the body's own failures apart from the store's errors. The
// HTTP transport may go on reading a request body after the request
// returned (net/http.RoundTripper), so detach ends its reads before the
// publisher reads the body itself (to hash the rest, or to seek back): from
// then on Read fails, and the body is read in order by one reader at a
// time, every byte through the hash.
type bodyReader struct {
	mu       sync.Mutex
	r        io.Reader // the body, limited to size bytes
	h        hash.Hash
	n        int64
	eof      bool  // the body (or the limit) ended
	err      error // the body's read error other than io.EOF
	detached bool
}

// errDetached is what the transport reads from a detached bodyReader.
var errDetached = errors.New("publisher: request body detached")

func (b *bodyReader) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.detached {
		return 0, errDetached
	}
	return b.read(p)
}

// read reads from the body through the hash; b.mu must be held.
func (b *bodyReader) read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
	case err != nil && b.err == nil:
		b.err = err
	}
	return n, err
}

// detach waits for a Read in progress and makes later ones fail.
func (b *bodyReader) detach() {
	b.mu.Lock()
	b.detached = true
	b.mu.Unlock()
}

// rest reads the rest of the body through the hash (after detach) and
// returns the body's total length, or ErrBody.
func (b *bodyReader) rest() (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	buf := make([]byte, 32<<10)
	for !b.eof && b.err == nil {
		_, _ = b.read(buf)
	}
	if b.err != nil {
		return b.n, fmt.Errorf("%w after %d bytes: %w", ErrBody, b.n, b.err)
	}
	return b.n, nil
}

// putStream streams exactly size bytes of body in one create-only PUT,
// hashing them on the way, then checks that body has no more bytes. It
// holds none of the body in memory. When body is an io.Seeker, a failed
// send is sent again from the body's start as storeRetry sends one (a
// send after a stored one meets 412, and verifyOwn accepts it). A body
// that cannot seek is sent once:
// the store's error is returned and nothing is published. A body longer
// than size leaves the object written unpublished, an orphan for GC.
func (c *Client) putStream(ctx context.Context, key string, body io.Reader, size int64, contentType string, meta map[string]string) (layout.Object, []byte, error) {
	st := c.cfg.Store
	opts := putOpts(contentType, meta, "")
	seeker, _ := body.(io.Seeker)
	var start int64
	if seeker != nil {
		var err error
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			seeker = nil
		}
	}
	var (
		br    *bodyReader
		info  objstore.ObjectInfo
		sends int
		again bool // the send failed in transit or met a 409, and body can be sent again
	)
	err := retry.Do(ctx, func(ctx context.Context) error {
		if sends++; sends > 1 {
			if _, err := seeker.Seek(start, io.SeekStart); err != nil {
				again = false
				return fmt.Errorf("%w: seek back to re-send: %w", ErrBody, err)
			}
		}
		br = &bodyReader{r: io.LimitReader(body, size), h: sha256.New()}
		var err error
		info, err = st.PutCreateOnly(ctx, key, br, size, opts)
		br.detach()
		bodyOK := br.err == nil && !(br.eof && br.n < size)
		again = err != nil && bodyOK && seeker != nil && resendable(err, sends)
		if again {
			c.log.Warn("object PUT failed in transit; sending it again", "key", key, "attempt", sends, "err", err)
		}
		return err
	}, func(error) bool { return again })
	switch {
	case br.err != nil:
		return layout.Object{}, nil, bodyErr(ctx, key, br.n, br.err)
	case br.eof && br.n < size:
		return layout.Object{}, nil, fmt.Errorf("%w: the body ended after %d of its %d bytes", ErrBody, br.n, size)
	case errors.Is(err, ErrBody):
		return layout.Object{}, nil, err
	case err != nil:
		if !errors.Is(err, objstore.ErrExists) {
			return layout.Object{}, nil, fmt.Errorf("publisher: put %s: %w", key, err)
		}
		// Our own earlier request was stored: hash the rest of the body
		// (the store may have answered before reading it) and compare.
		if n, err := br.rest(); err != nil {
			return layout.Object{}, nil, err
		} else if n != size {
			return layout.Object{}, nil, fmt.Errorf("%w: the body ended after %d of its %d bytes", ErrBody, n, size)
		}
	}
	if err := bodyEnded(body); err != nil {
		return layout.Object{}, nil, err
	}
	sum := br.h.Sum(nil)
	obj := layout.Object{Bucket: st.BucketName(), Key: key, SHA256: hex.EncodeToString(sum), Size: size, ETag: info.ETag}
	if err != nil { // 412: verify that the stored object holds these bytes
		if obj, err = c.verifyOwn(ctx, obj); err != nil {
			return layout.Object{}, nil, err
		}
	}
	return obj, sum, nil
}

// bodyEnded checks that body has no bytes left after its stated length.
func bodyEnded(body io.Reader) error {
	var one [1]byte
	for {
		n, err := body.Read(one[:])
		switch {
		case n > 0:
			return fmt.Errorf("%w: the body is longer than its stated size", ErrBody)
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("%w at its end: %w", ErrBody, err)
		}
	}
}

// putSingle writes data, the whole body of obj, in one create-only PUT,
// sent again as storeRetry says. A 412 is accepted when the object there
// holds obj's bytes.
func (c *Client) putSingle(ctx context.Context, obj layout.Object, data []byte, contentType string, meta map[string]string) (layout.Object, error) {
	st := c.cfg.Store
	opts := putOpts(contentType, meta, "")
	var info objstore.ObjectInfo
	err := c.storeRetry(ctx, func(ctx context.Context) error {
		var err error
		info, err = st.PutCreateOnly(ctx, obj.Key, bytes.NewReader(data), int64(len(data)), opts)
		return err
	})
	switch {
	case err == nil:
		obj.ETag = info.ETag
		return obj, nil
	case errors.Is(err, objstore.ErrExists):
		return c.verifyOwn(ctx, obj)
	}
	return layout.Object{}, fmt.Errorf("publisher: put %s: %w", obj.Key, err)
}

// putMultipart uploads first and then the rest of br in parts and completes
// create-only. h already covers first and sees every later byte through
// br. Part n+1 is filled while part n is sent; at most two parts are in
// memory.
func (c *Client) putMultipart(ctx context.Context, key string, br *bufio.Reader, first []byte, h hash.Hash, contentType string, meta map[string]string) (obj layout.Object, sum []byte, err error) {
	st := c.cfg.Store
	id, err := st.CreateUpload(ctx, key, putOpts(contentType, meta, ""))
	if err != nil {
		return layout.Object{}, nil, c.createErr(key, err)
	}
	defer func() {
		if err != nil {
			c.abort(ctx, key, id)
		}
	}()
	type sent struct {
		part objstore.Part
		err  error
	}
	send := func(n int, data []byte) <-chan sent {
		ch := make(chan sent, 1)
		go func() {
			var p objstore.Part
			err := c.storeRetry(ctx, func(ctx context.Context) (err error) { // a part sent again replaces itself
				p, err = st.UploadPart(ctx, key, id, n, bytes.NewReader(data), int64(len(data)))
				return err
			})
			switch {
			case errors.Is(err, objstore.ErrNotFound):
				err = uploadAborted(key, id, fmt.Errorf("upload part %d: %w", n, err))
			case err != nil:
				err = fmt.Errorf("publisher: upload part %d of %s: %w", n, key, err)
			}
			ch <- sent{p, err}
		}()
		return ch
	}
	var (
		parts []objstore.Part
		size  int64
		part  = first
		spare []byte // the buffer of the part sent before, free to refill
		last  bool
	)
	for n := 1; ; n++ {
		if n > maxParts {
			return layout.Object{}, nil, fmt.Errorf("%w: body exceeds %d parts of %d bytes", fencepub.ErrInvalid, maxParts, c.cfg.PartSize)
		}
		if err := ctx.Err(); err != nil {
			return layout.Object{}, nil, fmt.Errorf("publisher: upload of %s stopped before part %d: %w", key, n, err)
		}
		inflight := send(n, part)
		size += int64(len(part))
		more := !last
		var next []byte
		var ferr error
		if more {
			if spare == nil { // the body has a second part: no growing
				spare = make([]byte, 0, c.cfg.PartSize)
			}
			next, last, ferr = fillPart(ctx, br, spare, int(c.cfg.PartSize))
		}
		r := <-inflight
		switch {
		case r.err != nil:
			return layout.Object{}, nil, r.err
		case ferr != nil:
			return layout.Object{}, nil, bodyErr(ctx, key, size+int64(len(next)), ferr)
		}
		parts = append(parts, r.part)
		if !more {
			break
		}
		spare, part = part, next
	}
	sum = h.Sum(nil)
	obj = layout.Object{Bucket: st.BucketName(), Key: key, SHA256: hex.EncodeToString(sum), Size: size}
	obj, err = c.complete(ctx, key, id, parts, obj)
	return obj, sum, err
}

// complete completes upload id create-only, sent again as storeRetry
// says. A 412 or a
// vanished upload (ErrNotFound: our earlier completion whose response was
// lost) is accepted after verifyOwn. A vanished upload with no object at
// key was aborted: ErrUploadAborted.
func (c *Client) complete(ctx context.Context, key, id string, parts []objstore.Part, obj layout.Object) (layout.Object, error) {
	var info objstore.ObjectInfo
	err := c.storeRetry(ctx, func(ctx context.Context) error {
		var err error
		info, err = c.cfg.Store.CompleteUpload(ctx, key, id, parts)
		return err
	})
	switch {
	case err == nil:
		obj.ETag = info.ETag
		return obj, nil
	case errors.Is(err, objstore.ErrExists):
		return c.verifyOwn(ctx, obj)
	case errors.Is(err, objstore.ErrNotFound):
		own, verr := c.verifyOwn(ctx, obj)
		if errors.Is(verr, errNoObject) {
			return layout.Object{}, uploadAborted(key, id, fmt.Errorf("complete: %w", err))
		}
		return own, verr
	}
	return layout.Object{}, fmt.Errorf("publisher: complete %s: %w", key, err)
}

// storeRetry sends op, a create-only write, again with jittered backoff
// (retry.Do) while it fails in transit or is refused for now
// (retry.StoreUnavailable: a lost response, a 5xx such as a 503 SlowDown
// while the store settles a lost node), until ctx ends, as etcd requests
// are retried (DESIGN.md invariant 12: available while a quorum is); and
// while it meets a 409 ConditionalRequestConflict (retry.StoreConflict),
// up to conflictRetries sends. It returns op's last error.
func (c *Client) storeRetry(ctx context.Context, op func(context.Context) error) error {
	sends := 0
	return retry.Do(ctx, func(ctx context.Context) error {
		sends++
		return op(ctx)
	}, func(err error) bool { return resendable(err, sends) })
}

// resendable reports whether a create-only write that failed with err
// after sends sends may be sent again (storeRetry's rule).
func resendable(err error, sends int) bool {
	return retry.StoreUnavailable(err) || retry.StoreConflict(err) && sends < conflictRetries
}

// errNoObject marks verifyOwn's error when no object is at the key.
var errNoObject = errors.New("no object under the key")

// verifyOwn checks that the object at obj.Key is the one this attempt wrote
// (a create-only write met 412 on the attempt's own key): the same size and
// the same sha256, taken from its metaSHA256 metadata (copies carry it) or
// else by reading the object back once (conditioned on its ETag). It
// returns obj with the stored ETag, or ErrObjectMismatch. The read-back
// costs one GET of the object, only on this path (a lost response).
func (c *Client) verifyOwn(ctx context.Context, obj layout.Object) (layout.Object, error) {
	info, err := c.cfg.Store.Stat(ctx, obj.Key)
	if errors.Is(err, objstore.ErrNotFound) {
		err = fmt.Errorf("%w: %w", errNoObject, err)
	}
	if err != nil {
		return layout.Object{}, fmt.Errorf("publisher: stat %s after a create-only conflict: %w", obj.Key, err)
	}
	mismatch := func(what string) error {
		return fmt.Errorf("%w: %s holds %d bytes, ETag %s, %s; wrote %d bytes, sha256 %s",
			ErrObjectMismatch, obj.Key, info.Size, info.ETag, what, obj.Size, obj.SHA256)
	}
	if info.Size != obj.Size {
		return layout.Object{}, mismatch("size differs")
	}
	var sha string
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, metaSHA256) {
			sha = v
		}
	}
	if sha == "" {
		sum, err := c.hashObject(ctx, obj.Key, info)
		if err != nil {
			return layout.Object{}, fmt.Errorf("publisher: read back %s after a create-only conflict: %w", obj.Key, err)
		}
		sha = hex.EncodeToString(sum)
	}
	if sha != obj.SHA256 {
		return layout.Object{}, mismatch("sha256 " + sha)
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
	id, err := st.CreateUpload(ctx, key, putOpts(contentType, meta, src.SHA256))
	if err != nil {
		return layout.Object{}, c.createErr(key, err)
	}
	defer func() {
		if err != nil {
			c.abort(ctx, key, id)
		}
	}()
	var parts []objstore.Part
	for off, n := int64(0), 1; off < src.Size || n == 1; n++ {
		length := min(int64(copyPartSize), src.Size-off)
		if src.Size == 0 {
			length = -1 // the whole (empty) object; a range cannot name zero bytes
		}
		p, err := st.CopyPart(ctx, objstore.CopySource{Bucket: src.Bucket, Key: src.Key, IfMatch: src.ETag, Offset: off, Length: length}, key, id, n)
		if err != nil {
			switch {
			case errors.Is(err, objstore.ErrNotFound):
				return layout.Object{}, fmt.Errorf("%w: %s: %w", ErrSourceGone, src.Key, err)
			case errors.Is(err, objstore.ErrConditionFailed): // the source condition
				return layout.Object{}, fmt.Errorf("%w: source %s no longer has ETag %s: %w", ErrObjectMismatch, src.Key, src.ETag, err)
			}
			return layout.Object{}, fmt.Errorf("publisher: copy part %d of %s to %s: %w", n, src.Key, key, err)
		}
		parts = append(parts, p)
		off += max(length, 0)
	}
	obj = layout.Object{Bucket: st.BucketName(), Key: key, SHA256: src.SHA256, Size: src.Size}
	return c.complete(ctx, key, id, parts, obj)
}

// createErr classifies the error of starting a create-only upload: a 412
// there means the key existed before this attempt wrote anything.
func (c *Client) createErr(key string, err error) error {
	if errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("%w: %s exists before the attempt wrote it: %w", ErrObjectMismatch, key, err)
	}
	return fmt.Errorf("publisher: start upload of %s: %w", key, err)
}

// abort aborts a failed multipart upload, best effort, within
// abortTimeout and ctx's deadline, even when ctx was cancelled (an
// interrupted publish still cleans up). Once ctx's deadline has passed it
// does not try: the caller's deadline bounds the whole publish, and GC
// aborts an incomplete upload of a finished term at its next pass (DESIGN.md
// "Garbage collection"), which it logs.
func (c *Client) abort(ctx context.Context, key, id string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		if !time.Now().Before(dl) {
			c.log.Info("multipart upload not aborted: the deadline has passed; GC aborts it", "key", key, "upload_id", id)
			return
		}
		var dcancel context.CancelFunc
		actx, dcancel = context.WithDeadline(actx, dl)
		defer dcancel()
	}
	if err := c.cfg.Store.AbortUpload(actx, key, id); err != nil {
		c.log.Warn("abort multipart upload failed; GC aborts it later", "key", key, "upload_id", id, "err", err)
	}
}

package reader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
)

// Body is a published object being read. Read returns the object's bytes
// and, at the end, io.EOF only if sha256 and size match Pointer; otherwise
// ErrDigestMismatch. Callers must read to EOF and check that error before
// using the bytes, and must Close the body.
type Body struct {
	// Pointer is the pointer the object was opened through.
	Pointer fencepub.Pointer
	obj     io.ReadCloser // the GET's response body
	h       hash.Hash
	n       int64
	err     error              // sticky result once the end is reached
	cancel  context.CancelFunc // ends a speculative GET's context; nil otherwise
	stall   *stallTimer        // nil without Config.StallTimeout
}

// Open returns the body of the object the current pointer names: it reads
// the pointer (linearizably unless Config.Serializable) and GETs the object
// with If-Match on the pointer's ETag (the package doc, "How Open reads").
// If the object is gone, Open re-reads the pointer: a newer pointer is
// retried (up to Config.OpenRetries times); the same pointer yields
// ErrObjectMissing.
//
// Blocks for one etcd read (shared with concurrent calls, as Current's) and
// one GET (the body streams as it is read). Errors: ErrNotPublished,
// ErrUnknownResource, ErrWentBack, ErrObjectMissing, ErrDecommissioned,
// ErrObjectChanged, ErrDigestMismatch (the store reports another size),
// ErrIsDataset (nothing is fetched), fencepub.ErrInvalid (no Config.Store),
// fencepub.ErrUnavailable, fencepub.ErrCorruptRecord.
func (r *Reader) Open(ctx context.Context) (*Body, error) {
	if r.cfg.Store == nil {
		return nil, fmt.Errorf("%w: reader.Config.Store is nil", fencepub.ErrInvalid)
	}
	r.mu.Lock()
	guess := r.opened
	r.mu.Unlock()
	if guess.Version.IsZero() {
		ptr, _, err := r.current(ctx, r.cfg.Serializable)
		if err != nil {
			return nil, err
		}
		return r.openFrom(ctx, ptr)
	}
	type opened struct {
		b   *Body
		err error
	}
	sctx, cancel := context.WithCancel(ctx)
	spec := make(chan opened, 1)
	go func() {
		b, err := r.open(sctx, guess)
		spec <- opened{b, err}
	}()
	ptr, _, err := r.current(ctx, r.cfg.Serializable)
	if err == nil && ptr.Version == guess.Version && ptr.Object == guess.Object {
		if o := <-spec; o.err == nil {
			o.b.Pointer, o.b.cancel = ptr, cancel
			return o.b, nil
		}
		cancel() // openFrom tells a missing object from a collected one
		return r.openFrom(ctx, ptr)
	}
	cancel()
	go func() {
		if o := <-spec; o.b != nil {
			_ = o.b.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	return r.openFrom(ctx, ptr)
}

// OpenPointer returns the body of ptr's object without reading the pointer
// from etcd: one GET with If-Match on ptr's ETag, verified like Open's. ptr
// is a pointer of this Reader's resource that Watch or Current delivered
// (DESIGN.md "Reading"). It does not check that ptr is still current, nor
// record it as returned: the caller chose the version, and the bytes are
// verified against it. If the object is gone, OpenPointer re-reads the
// pointer and follows a newer one as Open does. Errors: those of Open, and
// fencepub.ErrInvalid for a zero pointer.
func (r *Reader) OpenPointer(ctx context.Context, ptr fencepub.Pointer) (*Body, error) {
	switch {
	case r.cfg.Store == nil:
		return nil, fmt.Errorf("%w: reader.Config.Store is nil", fencepub.ErrInvalid)
	case ptr.Version.IsZero() || ptr.Object.Key == "":
		return nil, fmt.Errorf("%w: OpenPointer of %q needs a published pointer, got version %s key %q", fencepub.ErrInvalid, r.res, ptr.Version, ptr.Object.Key)
	}
	return r.openFrom(ctx, ptr)
}

// openFrom opens ptr's object, following newer pointers while the object it
// tries is gone (see Open).
func (r *Reader) openFrom(ctx context.Context, ptr layout.Pointer) (*Body, error) {
	for retry := 0; ; retry++ {
		b, err := r.open(ctx, ptr)
		if !errors.Is(err, ErrObjectMissing) {
			return b, err
		}
		// Collected after supersession? Only a newer pointer explains it.
		fresh, _, perr := r.current(ctx, false)
		if perr != nil {
			return nil, errors.Join(err, perr)
		}
		if fresh.Version == ptr.Version {
			if derr := r.decommissioned(ctx, ptr); derr != nil {
				return nil, derr
			}
		}
		if fresh.Version == ptr.Version || retry >= r.cfg.OpenRetries {
			return nil, err
		}
		r.log.Info("object of a superseded pointer is gone; following the newer pointer",
			"resource", r.res, "old", ptr.Version.String(), "new", fresh.Version.String())
		ptr = fresh
	}
}

// decommissioned returns ErrDecommissioned, naming the seal, when the
// resource's seal says it was retired at or above ptr (its objects are
// collected by design); nil otherwise, or when the seal cannot be read (the
// caller then reports the missing object).
func (r *Reader) decommissioned(ctx context.Context, ptr layout.Pointer) error {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	resp, err := r.kv.Get(rctx, layout.Namespace(r.cfg.Namespace).SealKey(r.res))
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	seal, err := layout.DecodeSeal(resp.Kvs[0].Value)
	if err != nil || seal.Reason != layout.SealReasonDecommissioned || seal.Version.Compare(ptr.Version) < 0 {
		return nil
	}
	return fmt.Errorf("%w: %q was retired by `fencepub resource delete` at %s (seal %s above its version %s); its objects are collected",
		ErrDecommissioned, r.res, seal.At.Format(time.RFC3339), seal.Version, ptr.Version)
}

// open fetches ptr's object and records ptr as the pointer opened last,
// the guess of Open's next speculative GET. A dataset's object is its
// manifest, not content: ErrIsDataset (notDataset), nothing fetched.
func (r *Reader) open(ctx context.Context, ptr layout.Pointer) (*Body, error) {
	if err := r.notDataset(ptr); err != nil {
		return nil, err
	}
	b, err := r.fetch(ctx, ptr)
	if err == nil {
		r.mu.Lock()
		r.opened = ptr
		r.mu.Unlock()
	}
	return b, err
}

// notDataset returns ErrIsDataset, naming the version, when ptr is a
// dataset version, which the single-object reads refuse.
func (r *Reader) notDataset(ptr layout.Pointer) error {
	if ptr.IsDataset() {
		return fmt.Errorf("%w: version %s of %q has %d files", ErrIsDataset, ptr.Version, r.res, ptr.Files)
	}
	return nil
}

// fetch sends one GET of ptr's object (If-Match on its ETag) and returns a
// verifying Body over the response.
func (r *Reader) fetch(ctx context.Context, ptr layout.Pointer) (*Body, error) {
	// The bucket the pointer names, even when it is not the configured one.
	store, err := objstore.InBucket(r.cfg.Store, ptr.Object.Bucket)
	if err != nil {
		return nil, r.objectErr(ptr, err)
	}
	ctx, st := newStallTimer(ctx, r.cfg.StallTimeout)
	obj, info, err := store.Get(ctx, ptr.Object.Key, ptr.Object.ETag)
	if err != nil {
		serr := st.explain(err)
		st.end()
		if serr != err {
			return nil, fmt.Errorf("reader: get %s/%s: %w", ptr.Object.Bucket, ptr.Object.Key, serr)
		}
		return nil, r.objectErr(ptr, err)
	}
	st.pause()
	if info.Size != ptr.Object.Size {
		_ = obj.Close()
		st.end()
		return nil, fmt.Errorf("%w: %s holds %d bytes; the pointer %s says %d",
			ErrDigestMismatch, ptr.Object.Key, info.Size, ptr.Version, ptr.Object.Size)
	}
	return &Body{Pointer: ptr, obj: obj, h: sha256.New(), stall: st}, nil
}

// stallTimer cancels an object read's context when it waits longer than
// its period for bytes (Config.StallTimeout). A nil *stallTimer (no
// timeout) does nothing.
type stallTimer struct {
	period time.Duration
	timer  *time.Timer
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// errStalled is the cancellation cause of a stalled read.
var errStalled = errors.New("the object store sent no bytes")

// newStallTimer returns ctx under a stall timer running from now, or ctx
// and nil when period is 0.
func newStallTimer(ctx context.Context, period time.Duration) (context.Context, *stallTimer) {
	if period <= 0 {
		return ctx, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	st := &stallTimer{period: period, ctx: ctx, cancel: cancel}
	st.timer = time.AfterFunc(period, func() {
		cancel(fmt.Errorf("%w: %w for %s (Config.StallTimeout)", fencepub.ErrUnavailable, errStalled, period))
	})
	return ctx, st
}

// wait restarts the period (a Read starts waiting); pause stops it.
func (st *stallTimer) wait() {
	if st != nil {
		st.timer.Reset(st.period)
	}
}

func (st *stallTimer) pause() {
	if st != nil {
		st.timer.Stop()
	}
}

// explain returns the stall as the error when it is what ended the read.
func (st *stallTimer) explain(err error) error {
	if st != nil {
		if cause := context.Cause(st.ctx); errors.Is(cause, errStalled) {
			return cause
		}
	}
	return err
}

// end stops the timer and releases the context.
func (st *stallTimer) end() {
	if st != nil {
		st.timer.Stop()
		st.cancel(nil)
	}
}

// objectErr classifies a GET error of ptr's object.
func (r *Reader) objectErr(ptr layout.Pointer, err error) error {
	if errors.Is(err, objstore.ErrConditionFailed) {
		return fmt.Errorf("%w: %s/%s no longer has ETag %s (pointer %s of %q)",
			ErrObjectChanged, ptr.Object.Bucket, ptr.Object.Key, ptr.Object.ETag, ptr.Version, r.res)
	}
	if errors.Is(err, objstore.ErrNoBucket) {
		// A configuration problem, not a lost object: never report it as
		// ErrObjectMissing (data loss).
		return fmt.Errorf("%w: bucket %q of the pointer %s of %q does not exist: %w",
			fencepub.ErrInvalid, ptr.Object.Bucket, ptr.Version, r.res, err)
	}
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("%w: %s/%s (pointer %s of %q): %w",
			ErrObjectMissing, ptr.Object.Bucket, ptr.Object.Key, ptr.Version, r.res, err)
	case errors.Is(err, objstore.ErrUnavailable):
		return fmt.Errorf("%w: %w", fencepub.ErrUnavailable, err)
	}
	return fmt.Errorf("reader: get %s/%s: %w", ptr.Object.Bucket, ptr.Object.Key, err)
}

// Read reads the object's bytes, hashing them. At the end it returns io.EOF
// if sha256 and size match the pointer and ErrDigestMismatch otherwise; a
// body longer than the pointer's size fails as soon as it passes it.
func (b *Body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	b.stall.wait()
	n, err := b.obj.Read(p)
	b.stall.pause()
	b.h.Write(p[:n])
	b.n += int64(n)
	if b.n > b.Pointer.Object.Size {
		b.err = fmt.Errorf("%w: %s is longer than the pointer's %d bytes", ErrDigestMismatch, b.Pointer.Object.Key, b.Pointer.Object.Size)
		return n, b.err
	}
	if errors.Is(err, io.EOF) {
		b.err = io.EOF
		if got := hex.EncodeToString(b.h.Sum(nil)); got != b.Pointer.Object.SHA256 || b.n != b.Pointer.Object.Size {
			b.err = fmt.Errorf("%w: %s: read %d bytes with sha256 %s; the pointer says %d bytes, %s",
				ErrDigestMismatch, b.Pointer.Object.Key, b.n, got, b.Pointer.Object.Size, b.Pointer.Object.SHA256)
		}
		return n, b.err
	}
	if err != nil {
		if serr := b.stall.explain(err); serr != err {
			b.err = fmt.Errorf("reader: read %s: %w", b.Pointer.Object.Key, serr)
			return n, b.err
		}
		b.err = fmt.Errorf("reader: read %s: %w", b.Pointer.Object.Key, err)
		return n, b.err
	}
	return n, nil
}

// copyBufs holds WriteTo's buffers (copyBufSize bytes each).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// copyBufSize is WriteTo's read size: large reads take the bytes off the
// socket in few system calls (io.Discard and many writers read 8 KiB at a
// time when they drive the copy).
const copyBufSize = 128 << 10

// WriteTo writes the rest of the object to w, verified as Read verifies: it
// returns a nil error after the last byte only if sha256 and size match the
// pointer, ErrDigestMismatch otherwise (the bytes already written must then
// be discarded), or w's error. io.Copy(w, body) uses it, reading 128 KiB at
// a time.
func (b *Body) WriteTo(w io.Writer) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var total int64
	for {
		n, err := b.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			switch {
			case werr != nil:
				return total, werr
			case m < n:
				return total, io.ErrShortWrite
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Close releases the connection.
func (b *Body) Close() error {
	if b.cancel != nil {
		defer b.cancel()
	}
	defer b.stall.end()
	return b.obj.Close()
}

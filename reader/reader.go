// Package reader follows a resource's published pointer and serves its
// object (DESIGN.md "Reading", invariant 6): readers see only published
// objects, never a version lower than one they already saw, and only bytes
// that match the pointer's sha256.
//
// Current reads the pointer (linearizable by default; concurrent calls on one
// Reader share a read sent after each of them began). Open reads the
// pointer, GETs its object with If-Match on the pointer's ETag (one GET,
// sent while the pointer is read when the object opened last is still
// current) and verifies sha256 and size while the caller reads: a mismatch
// is an error at the end of the body, so callers must read to EOF and check
// the error (and Close) before trusting or exposing the bytes — write them
// to a temporary file and rename it on success, for example. Watch follows
// the pointer through an etcd watch starting at the header revision of a
// Get plus one, and re-syncs with a fresh Get after compaction; a service
// that follows it opens the pointer it holds with OpenPointer (no etcd read
// per request). A Reader never returns a version below one it returned
// before: if etcd's history went back, it says so (ErrWentBack).
//
// An object may be collected by GC once it has been superseded and its
// retention passed; Open then re-reads the pointer and retries with the newer
// object (bounded). A pointer whose object is missing while it is still the
// pointer is reported as ErrObjectMissing: that is data loss, never hidden.
package reader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fencepub/fencepub"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/retry"
	"github.com/fencepub/fencepub/internal/wait"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors returned (wrapped) by Reader methods and in Update.Err; test with
// errors.Is. A pointer value that does not decode is layout.ErrCorruptRecord.
var (
	// ErrNotPublished: the resource has no published version yet.
	ErrNotPublished = errors.New("reader: nothing published")
	// ErrObjectMissing: the current pointer's object does not exist. Loud on
	// purpose: a published object must never be deleted (invariant 7).
	ErrObjectMissing = errors.New("reader: the published object is missing")
	// ErrObjectChanged: the object under the pointer's key no longer has the
	// pointer's ETag (objects are immutable, so something overwrote it).
	ErrObjectChanged = errors.New("reader: the published object changed")
	// ErrDigestMismatch: the bytes read do not match the pointer's sha256 or
	// size. Returned by Body.Read at the end of the body.
	ErrDigestMismatch = errors.New("reader: object bytes do not match the pointer's sha256")
	// ErrWentBack: the pointer is below a version this Reader already
	// returned (invariant 6 forbids showing it). Only etcd's history going
	// back explains it: a restore from a backup not yet followed by
	// `fencepub authority recover --republish`, or a pointer written out of
	// band. The error names both versions; a new Reader starts afresh.
	ErrWentBack = errors.New("reader: the pointer went back below a version already read")
	// ErrDecommissioned: the current pointer's object is gone because the
	// resource was retired (`fencepub resource delete`: a seal with
	// layout.SealReasonDecommissioned at or above the pointer) and GC
	// collected its objects; not data loss.
	ErrDecommissioned = errors.New("reader: the resource was decommissioned")
	// ErrUnavailable: etcd or the store did not answer.
	ErrUnavailable = fencepub.ErrUnavailable
	// ErrInvalid: bad configuration or resource name, or a bucket that does
	// not exist.
	ErrInvalid = fencepub.ErrInvalid
)

// DefaultOpenRetries bounds how often Open follows a newer pointer after the
// object it tried was collected.
const DefaultOpenRetries = 3

// DefaultRequestTimeout bounds a call's wait for the pointer.
const DefaultRequestTimeout = 5 * time.Second

// readAttempts is how many etcd reads of the pointer fit in one
// RequestTimeout: each read is bounded by RequestTimeout/readAttempts, so a
// read sent to a stalled member leaves time for retries that reach another
// one (DESIGN.md invariant 12).
const readAttempts = 3

// Config holds a Reader's dependencies and options.
type Config struct {
	Namespace layout.Namespace
	Etcd      *clientv3.Client
	Store     *objstore.Store
	// Logger receives watch re-syncs; nil discards.
	Logger *slog.Logger
	// Serializable makes Current and Open read the pointer from the local
	// etcd member without a quorum round (faster, possibly stale). A read
	// that returns a version below one this Reader already saw is repeated
	// linearizably, so versions never go back. Watch's syncs are always
	// linearizable.
	Serializable bool
	// OpenRetries bounds Open's retries after a collected object; default
	// DefaultOpenRetries.
	OpenRetries int
	// RequestTimeout bounds a call's wait for the pointer (Current, Open and
	// Watch's syncs) from its arrival, retries of a read that failed with
	// etcd unavailable included: an etcd that does not answer in time is
	// ErrUnavailable instead of a wait as long as the caller's context (the
	// etcd client waits for a connection indefinitely). Each etcd read is
	// bounded by a third of it, so one sent to a stalled member is retried,
	// usually on another member, within the call's RequestTimeout. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// StallTimeout, when positive, ends an object read that receives no
	// byte for that long — no response to the GET, or a body that stops —
	// with ErrUnavailable; only the time spent waiting inside Read counts,
	// not the caller's pauses between reads. minio-go bounds the wait for
	// response headers, never a body that stops. 0 waits as long as the
	// caller's context.
	StallTimeout time.Duration
}

// Reader reads one resource's published state. It is safe for concurrent
// use.
type Reader struct {
	cfg Config
	res string
	key string // the pointer's etcd key
	log *slog.Logger

	mu     sync.Mutex
	seen   layout.Version // highest version returned so far
	seenAt int64          // the etcd revision at which seen was written
	opened layout.Pointer // the pointer of the last object opened
	reads  [2]readQueue   // pointer reads: [0] linearizable, [1] serializable
}

// New returns a Reader of resource. Errors: ErrInvalid.
func New(cfg Config, resource string) (*Reader, error) {
	switch {
	case cfg.Namespace.Prefix == "" || cfg.Namespace.Domain == "":
		return nil, fmt.Errorf("%w: Config.Namespace is empty", ErrInvalid)
	case cfg.Etcd == nil:
		return nil, fmt.Errorf("%w: Config.Etcd is nil", ErrInvalid)
	case cfg.OpenRetries < 0:
		return nil, fmt.Errorf("%w: negative OpenRetries", ErrInvalid)
	case cfg.RequestTimeout < 0:
		return nil, fmt.Errorf("%w: negative RequestTimeout", ErrInvalid)
	case cfg.StallTimeout < 0:
		return nil, fmt.Errorf("%w: negative StallTimeout", ErrInvalid)
	}
	if err := layout.ValidateResource(resource, false); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if cfg.OpenRetries == 0 {
		cfg.OpenRetries = DefaultOpenRetries
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reader{cfg: cfg, res: resource, key: cfg.Namespace.PointerKey(resource), log: log}, nil
}

// Resource returns the resource name.
func (r *Reader) Resource() string { return r.res }

// Current returns the published pointer. It blocks for one etcd read (two
// if a serializable read went back); concurrent calls on one Reader share
// reads, each call getting a read sent after it began (pointerRead), so a
// call may also wait for the read already in flight. It never returns a version below one
// this Reader already returned (invariant 6). Errors: ErrNotPublished,
// ErrWentBack, ErrUnavailable, layout.ErrCorruptRecord.
func (r *Reader) Current(ctx context.Context) (layout.Pointer, error) {
	ptr, _, err := r.current(ctx, r.cfg.Serializable)
	return ptr, err
}

// current reads the pointer and returns it with the read's header revision.
// A version below one this Reader returned is ErrWentBack when the read's
// revision is at or above the revision at which that higher version was
// written (the read should have seen it: etcd's history went back); a read
// older than that write is a concurrent caller's, and its version is
// returned as read (linearizable: the calls overlapped).
func (r *Reader) current(ctx context.Context, serializable bool) (layout.Pointer, int64, error) {
	ptr, rev, mod, err := r.get(ctx, serializable)
	if err != nil {
		return ptr, rev, err
	}
	if ptr.Version.IsZero() {
		return layout.Pointer{}, rev, fmt.Errorf("%w: %q", ErrNotPublished, r.res)
	}
	r.mu.Lock()
	seen, seenAt := r.seen, r.seenAt
	r.mu.Unlock()
	if ptr.Version.Less(seen) {
		switch {
		case serializable: // a lagging member: ask the leader
			return r.current(ctx, false)
		case rev >= seenAt:
			return layout.Pointer{}, rev, fmt.Errorf("%w: %q is at %s (read at revision %d), this reader already returned %s (written at revision %d)",
				ErrWentBack, r.res, ptr.Version, rev, seen, seenAt)
		}
		return ptr, rev, nil
	}
	r.saw(ptr.Version, mod)
	return ptr, rev, nil
}

// saw raises the highest version returned, written at etcd revision mod.
func (r *Reader) saw(v layout.Version, mod int64) {
	r.mu.Lock()
	if r.seen.Less(v) {
		r.seen, r.seenAt = v, mod
	}
	r.mu.Unlock()
}

// get returns a read of the pointer that was sent after this call began
// (see pointerRead), or ctx's error when ctx ends first. A read that failed
// with etcd unavailable (retry.EtcdUnavailable: no leader, a member that
// cannot serve, a connection lost) is retried with jittered backoff
// (retry.Do) within ctx and the call's RequestTimeout, counted from its
// arrival (DESIGN.md invariant 12); each read is bounded by
// RequestTimeout/readAttempts, so a read stuck on a stalled member leaves
// time to retry. Each retry is a new read, one that began after this call
// did, so a linearizable read stays linearizable.
func (r *Reader) get(ctx context.Context, serializable bool) (ptr layout.Pointer, rev, mod int64, err error) {
	bctx, cancel := context.WithTimeoutCause(ctx, r.cfg.RequestTimeout,
		fmt.Errorf("%w: no answer within %s (Config.RequestTimeout)", ErrUnavailable, r.cfg.RequestTimeout))
	defer cancel()
	err = retry.Do(bctx, func(bctx context.Context) (err error) {
		ptr, rev, mod, err = r.getOnce(bctx, serializable)
		return err
	}, func(err error) bool { return errors.Is(err, ErrUnavailable) && retry.EtcdUnavailable(err) })
	if err != nil && ctx.Err() != nil {
		return layout.Pointer{}, 0, 0, fmt.Errorf("reader: get pointer of %q: %w", r.res, context.Cause(ctx))
	}
	return ptr, rev, mod, err
}

// getOnce is one attempt of get: it joins the pending read or sends one.
func (r *Reader) getOnce(ctx context.Context, serializable bool) (layout.Pointer, int64, int64, error) {
	if err := context.Cause(ctx); err != nil {
		return layout.Pointer{}, 0, 0, fmt.Errorf("reader: get pointer of %q: %w", r.res, err)
	}
	q := &r.reads[0]
	if serializable {
		q = &r.reads[1]
	}
	r.mu.Lock()
	rd := q.pending
	if rd == nil {
		rctx, cancel := context.WithTimeout(context.Background(), r.cfg.RequestTimeout/readAttempts)
		rd = &pointerRead{ctx: rctx, cancel: cancel, done: make(chan struct{})}
		if q.inflight == nil {
			q.inflight = rd
			go r.send(q, rd, serializable)
		} else {
			q.pending = rd
		}
	}
	rd.waiters++
	r.mu.Unlock()
	select {
	case <-rd.done:
		if rd.panicked != nil {
			panic(rd.panicked)
		}
		return rd.ptr, rd.rev, rd.mod, rd.err
	case <-ctx.Done():
		r.mu.Lock()
		if rd.waiters--; rd.waiters == 0 { // nobody needs this read any more
			rd.cancel()
			if q.pending == rd {
				q.pending = nil
			}
		}
		r.mu.Unlock()
		return layout.Pointer{}, 0, 0, fmt.Errorf("reader: get pointer of %q: %w", r.res, context.Cause(ctx))
	}
}

// pointerRead is one etcd read of the pointer shared by every call that
// asked for it before it was sent. Per Reader and consistency mode, one read
// is in flight and one is pending: a call joins the pending read, never one
// already sent, so the read it gets began after the call did and a
// linearizable read stays linearizable for each caller (the batching etcd's
// own ReadIndex does). Concurrent Opens of a hot resource thus cost one etcd
// read per round trip instead of one each, for a wait of up to two reads
// (the one in flight, then their own). A read whose callers all left is
// cancelled, so a lone caller never waits for another's read, and the
// timeout of a read (RequestTimeout/readAttempts) runs from its first
// caller's arrival, pending time included. The read carries no caller's
// context values.
type pointerRead struct {
	ctx      context.Context // bounded by Config.RequestTimeout/readAttempts
	cancel   context.CancelFunc
	waiters  int           // calls waiting for it; guarded by Reader.mu
	done     chan struct{} // closed once the fields below are set
	ptr      layout.Pointer
	rev, mod int64
	err      error
	panicked any // a panic of the read, re-raised in every caller
}

// readQueue holds a consistency mode's read in flight and the read pending
// behind it (nil when none). Guarded by Reader.mu.
type readQueue struct {
	inflight, pending *pointerRead
}

// send sends rd, then the read pending behind it, if any.
func (r *Reader) send(q *readQueue, rd *pointerRead, serializable bool) {
	defer func() {
		rd.panicked = recover()
		rd.cancel()
		r.mu.Lock()
		next := q.pending
		q.inflight, q.pending = next, nil
		if next != nil {
			go r.send(q, next, serializable)
		}
		r.mu.Unlock()
		close(rd.done)
	}()
	rd.ptr, rd.rev, rd.mod, rd.err = r.read(rd.ctx, serializable)
}

// read reads and decodes the pointer within ctx (a pointerRead's); a
// missing key is the zero pointer. It returns the read's header revision
// and the revision at which the pointer was written (0 when missing).
func (r *Reader) read(ctx context.Context, serializable bool) (ptr layout.Pointer, rev, mod int64, err error) {
	var opts []clientv3.OpOption
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := r.cfg.Etcd.Get(ctx, r.key, opts...)
	if err != nil {
		return layout.Pointer{}, 0, 0, fmt.Errorf("%w: get pointer of %q: %w", ErrUnavailable, r.res, err)
	}
	if len(resp.Kvs) == 0 {
		return layout.Pointer{}, resp.Header.Revision, 0, nil
	}
	kv := resp.Kvs[0]
	if ptr, err = layout.DecodePointer(kv.Value); err != nil {
		return layout.Pointer{}, resp.Header.Revision, kv.ModRevision, fmt.Errorf("reader: pointer of %q: %w", r.res, err)
	}
	return ptr, resp.Header.Revision, kv.ModRevision, nil
}

// Body is a published object being read. Read returns the object's bytes
// and, at the end, io.EOF only if sha256 and size match Pointer; otherwise
// ErrDigestMismatch. Callers must read to EOF and check that error before
// using the bytes, and must Close the body.
type Body struct {
	// Pointer is the pointer the object was opened through.
	Pointer layout.Pointer
	obj     io.ReadCloser // the GET's response body
	h       hash.Hash
	n       int64
	err     error              // sticky result once the end is reached
	cancel  context.CancelFunc // ends a speculative GET's context; nil otherwise
	stall   *stallTimer        // nil without Config.StallTimeout
}

// Open returns the current published object's body. It reads the pointer,
// GETs the object with If-Match on the pointer's ETag, and if the object is
// gone re-reads the pointer: a newer pointer is retried (up to
// Config.OpenRetries times); the same pointer yields ErrObjectMissing.
//
// When this Reader opened an object before, Open sends the GET of that
// object while it reads the pointer (speculation: the pointer rarely moves
// between reads) and returns that body only if the pointer read names the
// same version and object; otherwise it drops the speculative GET and
// opens what the pointer names. Either way the bytes are those of the
// pointer the read returned (linearizable by default), so an Open costs
// about the longer of the two round trips instead of their sum.
//
// Blocks for one etcd read (shared with concurrent calls, as Current's) and
// one GET (the body streams as it is read).
// Errors: ErrNotPublished, ErrWentBack, ErrObjectMissing, ErrDecommissioned,
// ErrObjectChanged, ErrDigestMismatch (the store reports another size),
// ErrUnavailable, layout.ErrCorruptRecord.
func (r *Reader) Open(ctx context.Context) (*Body, error) {
	if r.cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is nil", ErrInvalid)
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
// is a pointer of this Reader's resource that Watch or Current delivered; a
// service that follows the pointer with Watch serves each request with one
// store round trip this way (DESIGN.md "Reading": readers follow the
// published pointer alone, by get or watch). It does not check that ptr is
// still current, nor record it as returned: the caller chose the version,
// and the bytes are verified against it. If the object is gone, OpenPointer re-reads the pointer and
// follows a newer one as Open does. Errors: those of Open, and ErrInvalid
// for a zero pointer.
func (r *Reader) OpenPointer(ctx context.Context, ptr layout.Pointer) (*Body, error) {
	switch {
	case r.cfg.Store == nil:
		return nil, fmt.Errorf("%w: Config.Store is nil", ErrInvalid)
	case ptr.Version.IsZero() || ptr.Object.Key == "":
		return nil, fmt.Errorf("%w: OpenPointer of %q needs a published pointer, got version %s key %q", ErrInvalid, r.res, ptr.Version, ptr.Object.Key)
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
	resp, err := r.cfg.Etcd.Get(rctx, r.cfg.Namespace.SealKey(r.res))
	if err != nil || len(resp.Kvs) == 0 {
		return nil
	}
	seal, err := layout.DecodeSeal(resp.Kvs[0].Value)
	if err != nil || seal.Reason != layout.SealReasonDecommissioned || seal.Version.Less(ptr.Version) {
		return nil
	}
	return fmt.Errorf("%w: %q was retired by `fencepub resource delete` at %s (seal %s above its version %s); its objects are collected",
		ErrDecommissioned, r.res, seal.At.Format(time.RFC3339), seal.Version, ptr.Version)
}

// open sends one GET of ptr's object (If-Match on its ETag) and returns a
// verifying Body over the response.
func (r *Reader) open(ctx context.Context, ptr layout.Pointer) (*Body, error) {
	opts := minio.GetObjectOptions{}
	if ptr.Object.ETag != "" {
		if err := opts.SetMatchETag(ptr.Object.ETag); err != nil {
			return nil, fmt.Errorf("reader: ETag %q: %w", ptr.Object.ETag, err)
		}
	}
	ctx, st := newStallTimer(ctx, r.cfg.StallTimeout)
	core := minio.Core{Client: r.cfg.Store.Client}
	obj, info, _, err := core.GetObject(ctx, ptr.Object.Bucket, ptr.Object.Key, opts)
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
	r.mu.Lock()
	r.opened = ptr
	r.mu.Unlock()
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
		cancel(fmt.Errorf("%w: %w for %s (Config.StallTimeout)", ErrUnavailable, errStalled, period))
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
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && resp.StatusCode == http.StatusPreconditionFailed {
		return fmt.Errorf("%w: %s/%s no longer has ETag %s (pointer %s of %q)",
			ErrObjectChanged, ptr.Object.Bucket, ptr.Object.Key, ptr.Object.ETag, ptr.Version, r.res)
	}
	if errors.As(err, &resp) && resp.Code == "NoSuchBucket" {
		// A configuration problem, not a lost object: never report it as
		// ErrObjectMissing (data loss).
		return fmt.Errorf("%w: bucket %q of the pointer %s of %q does not exist: %w",
			ErrInvalid, ptr.Object.Bucket, ptr.Version, r.res, err)
	}
	err = objstore.Classify(err)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("%w: %s/%s (pointer %s of %q): %w",
			ErrObjectMissing, ptr.Object.Bucket, ptr.Object.Key, ptr.Version, r.res, err)
	case errors.Is(err, objstore.ErrUnavailable):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
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
		b.err = fmt.Errorf("reader: read %s: %w", b.Pointer.Object.Key, objstore.Classify(err))
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

// Update is one item of Watch: a newer pointer, or an error that did not
// stop the watch (Err set, Pointer zero).
type Update struct {
	Pointer layout.Pointer
	// Revision is the etcd revision at which the pointer was written (events)
	// or read (syncs).
	Revision int64
	// Resync marks a pointer learnt by a fresh Get after the watch was
	// interrupted (compaction, lost leader, broken stream).
	Resync bool
	Err    error
}

// resyncDelay is the pause before a re-sync after an error.
const resyncDelay = 200 * time.Millisecond

// Watch follows the pointer until ctx ends, then closes the channel. It sends
// the current pointer (if any), then every newer one, with strictly
// increasing versions: a Get, then an etcd watch from the Get's header
// revision + 1 (DESIGN.md "Reading"); when the watch is compacted, loses its
// leader or breaks, a fresh Get re-syncs and the watch restarts from there.
// Errors (a corrupt pointer value, an unreachable etcd, a pointer missing
// or below the last version sent — a re-sync after an etcd restore:
// ErrWentBack) are sent as Updates with Err set and do not end the watch. The goroutine behind it ends when
// ctx ends; the caller must cancel ctx when done, and should keep receiving
// until the channel is closed.
func (r *Reader) Watch(ctx context.Context) <-chan Update {
	ch := make(chan Update)
	go r.watch(ctx, ch)
	return ch
}

func (r *Reader) watch(ctx context.Context, ch chan<- Update) {
	defer close(ch)
	send := func(u Update) bool {
		select {
		case ch <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var last layout.Version
	emit := func(ptr layout.Pointer, rev, mod int64, resync bool) bool {
		if ptr.Version.Less(last) {
			// Missing or lower (a restore): never silently keep the old one.
			at := "is at " + ptr.Version.String()
			if ptr.Version.IsZero() {
				at = "has no published version"
			}
			err := fmt.Errorf("%w: %q %s (revision %d), this watch already sent %s; waiting for a newer version",
				ErrWentBack, r.res, at, rev, last)
			return send(Update{Err: err, Revision: rev})
		}
		if ptr.Version.IsZero() || !last.Less(ptr.Version) {
			return true
		}
		last = ptr.Version
		r.saw(ptr.Version, mod)
		return send(Update{Pointer: ptr, Revision: rev, Resync: resync})
	}
	resync := false
	for ctx.Err() == nil {
		ptr, rev, mod, err := r.get(ctx, false)
		if err != nil {
			if ctx.Err() != nil || !send(Update{Err: err, Revision: rev}) {
				return
			}
			if rev == 0 { // no answer: wait and retry
				wait.Sleep(ctx, resyncDelay)
				continue
			}
			// A corrupt pointer: report it and watch for the next value.
		} else if !emit(ptr, rev, mod, resync) {
			return
		}
		if !r.follow(ctx, rev+1, emit, send) {
			return
		}
		resync = true
		r.log.Info("pointer watch interrupted; re-syncing with a fresh read", "resource", r.res, "from_revision", rev+1)
		wait.Sleep(ctx, resyncDelay)
	}
}

// follow runs one etcd watch of the pointer from rev and emits its values.
// It returns false when the consumer is gone (ctx ended) and true when the
// watch ended otherwise and needs a re-sync.
func (r *Reader) follow(ctx context.Context, rev int64, emit func(ptr layout.Pointer, rev, mod int64, resync bool) bool, send func(Update) bool) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range r.cfg.Etcd.Watch(wctx, r.key, clientv3.WithRev(rev)) {
		if err := resp.Err(); err != nil {
			if resp.CompactRevision != 0 {
				r.log.Info("pointer watch compacted", "resource", r.res, "compact_revision", resp.CompactRevision)
			}
			return ctx.Err() == nil
		}
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypePut {
				err := fmt.Errorf("%w: pointer of %q deleted at revision %d", ErrNotPublished, r.res, ev.Kv.ModRevision)
				if !send(Update{Err: err, Revision: ev.Kv.ModRevision}) {
					return false
				}
				continue
			}
			ptr, err := layout.DecodePointer(ev.Kv.Value)
			if err != nil {
				err = fmt.Errorf("reader: pointer of %q at revision %d: %w", r.res, ev.Kv.ModRevision, err)
				if !send(Update{Err: err, Revision: ev.Kv.ModRevision}) {
					return false
				}
				continue
			}
			if !emit(ptr, ev.Kv.ModRevision, ev.Kv.ModRevision, false) {
				return false
			}
		}
	}
	return ctx.Err() == nil
}

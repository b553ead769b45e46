package reader

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/retry"
)

// Current returns the published pointer. It blocks for one etcd read (two if
// a serializable read went back); concurrent calls on one Reader share reads,
// each call getting a read sent after it began (pointerRead), so a call may
// also wait for the read already in flight. It never returns a version below
// one this Reader already returned (invariant 6). When nothing is published
// and the pointer key does not exist, one more etcd read tells a resource
// that was granted (ErrNotPublished) from one never granted
// (ErrUnknownResource). Errors: ErrNotPublished, ErrUnknownResource,
// ErrWentBack, fencepub.ErrUnavailable, fencepub.ErrCorruptRecord.
func (r *Reader) Current(ctx context.Context) (fencepub.Pointer, error) {
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
		if mod == 0 { // no pointer key: never bound by a publisher
			if err := r.known(ctx); err != nil {
				return layout.Pointer{}, rev, err
			}
		}
		return layout.Pointer{}, rev, fmt.Errorf("%w: %q", ErrNotPublished, r.res)
	}
	r.mu.Lock()
	seen, seenAt := r.seen, r.seenAt
	r.mu.Unlock()
	if ptr.Version.Compare(seen) < 0 {
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
	if r.seen.Compare(v) < 0 {
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
		fmt.Errorf("%w: no answer within %s (Config.RequestTimeout)", fencepub.ErrUnavailable, r.cfg.RequestTimeout))
	defer cancel()
	err = retry.Do(bctx, func(bctx context.Context) (err error) {
		ptr, rev, mod, err = r.getOnce(bctx, serializable)
		return err
	}, func(err error) bool { return errors.Is(err, fencepub.ErrUnavailable) && retry.EtcdUnavailable(err) })
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
	resp, err := r.kv.Get(ctx, r.key, opts...)
	if err != nil {
		return layout.Pointer{}, 0, 0, fmt.Errorf("%w: get pointer of %q: %w", fencepub.ErrUnavailable, r.res, err)
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

package reader

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/wait"
)

// Update is one item of Watch: a newer pointer, or an error that did not
// stop the watch (Err set, Pointer zero).
type Update struct {
	Pointer fencepub.Pointer
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

// Watch follows the pointer on a goroutine of its own until ctx ends, then
// closes the channel. It sends the current pointer (if any), then every
// newer one, with strictly increasing versions (DESIGN.md "Reading"); a
// compacted, leaderless or broken etcd watch is re-synced with a fresh Get
// (Update.Resync). Errors are sent as Updates with Err set and do not end
// the watch: fencepub.ErrCorruptRecord, fencepub.ErrUnavailable, and
// ErrWentBack for a pointer missing or below the last version sent (a
// re-sync after an etcd restore). The caller must cancel ctx when done, and
// should keep receiving until the channel is closed.
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
		if ptr.Version.Compare(last) < 0 {
			// Missing or lower (a restore): never silently keep the old one.
			at := "is at " + ptr.Version.String()
			if ptr.Version.IsZero() {
				at = "has no published version"
			}
			err := fmt.Errorf("%w: %q %s (revision %d), this watch already sent %s; waiting for a newer version",
				ErrWentBack, r.res, at, rev, last)
			return send(Update{Err: err, Revision: rev})
		}
		if ptr.Version.IsZero() || last.Compare(ptr.Version) >= 0 {
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
		r.log.Debug("etcd watch response", "resource", r.res, "events", len(resp.Events), "revision", resp.Header.Revision, "err", resp.Err())
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

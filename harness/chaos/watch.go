package chaos

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/wait"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watcher follows every change under the domain's root with one etcd watch
// and logs, as Changes, those of pointers, seals, op records, grant
// records, generation counters and the epoch. It is the checker's view of
// what etcd actually committed, independent of what clients were told.
type watcher struct {
	cli   *clientv3.Client
	ns    layout.Namespace
	clock Clock
	rec   *Recorder

	mu        sync.Mutex
	marks     map[string]chan struct{} // sync marker values awaited
	restoring bool                     // the next compaction is a restore's, not lost events
	// After a replacement by an empty cluster (replaced) the watch starts
	// again from revision restartFrom of the new cluster, whose revisions are
	// logged plus offset, above every revision of the cluster before.
	restart     bool
	restartFrom int64
	offset      int64
	cancel      context.CancelFunc // ends the current watch stream
}

func newWatcher(cli *clientv3.Client, ns layout.Namespace, clock Clock, rec *Recorder) *watcher {
	return &watcher{cli: cli, ns: ns, clock: clock, rec: rec, marks: map[string]chan struct{}{}}
}

// markKey is the key sync writes; no fencepub key is named like it.
func (w *watcher) markKey() string { return w.ns.Root() + "chaos-sync" }

// run watches from revision from until ctx ends, re-watching after a broken
// stream from the revision after the last event. A compaction loses events:
// it is counted (Recorder.WatchGap) and the watch resumes after it, unless
// it is the one a restore announced (expectRestore) marks: a restore with
// --bump-revision --mark-compacted loses no event, it only skips revisions.
func (w *watcher) run(ctx context.Context, from int64) {
	rev := from
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		w.mu.Lock()
		if w.restart {
			rev, w.restart = w.restartFrom, false
		}
		w.cancel = cancel
		offset := w.offset
		w.mu.Unlock()
		for resp := range w.cli.Watch(wctx, w.ns.Root(), clientv3.WithPrefix(), clientv3.WithRev(rev)) {
			if resp.CompactRevision != 0 {
				w.mu.Lock()
				if !w.restoring {
					w.rec.WatchGap()
				}
				w.restoring = false
				w.mu.Unlock()
				rev = resp.CompactRevision
				break
			}
			if resp.Err() != nil {
				break
			}
			seen := w.clock.Now()
			for _, ev := range resp.Events {
				w.event(ev, seen, offset)
				rev = ev.Kv.ModRevision + 1
			}
		}
		cancel()
		wait.Sleep(ctx, 100*time.Millisecond)
	}
}

// replaced announces that etcd was replaced by another cluster whose
// revisions restart: the watch ends its stream and watches again from
// revision from of the new cluster, logging its revisions plus offset (the
// last revision logged before, so the history's revisions keep rising).
// Call it before anything writes to the new cluster.
func (w *watcher) replaced(from, offset int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.restart, w.restartFrom, w.offset = true, from, offset
	if w.cancel != nil {
		w.cancel()
	}
}

// expectRestore announces that etcd is about to be restored from a
// snapshot with its revisions bumped and marked compacted.
func (w *watcher) expectRestore() {
	w.mu.Lock()
	w.restoring = true
	w.mu.Unlock()
}

// sync writes a fresh marker under the root and blocks until the watch has
// delivered it, so every change committed before sync was called has been
// logged. It returns the marker's revision. Errors: etcd's, or ctx's when
// the watch does not catch up.
func (w *watcher) sync(ctx context.Context) (int64, error) {
	mark := fmt.Sprintf("%d", time.Now().UnixNano())
	ch := make(chan struct{})
	w.mu.Lock()
	w.marks[mark] = ch
	w.mu.Unlock()
	var rev int64
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := w.cli.Put(pctx, w.markKey(), mark)
		cancel()
		if err == nil {
			w.mu.Lock()
			rev = resp.Header.Revision + w.offset
			w.mu.Unlock()
			break
		}
		if !wait.Sleep(ctx, 200*time.Millisecond) {
			return 0, fmt.Errorf("chaos: write the watch marker: %w", err)
		}
	}
	select {
	case <-ch:
		return rev, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("chaos: the watch did not deliver its marker: %w", ctx.Err())
	}
}

// event logs one etcd event if it is about a key the checker follows.
func (w *watcher) event(ev *clientv3.Event, seen, offset int64) {
	key, ok := strings.CutPrefix(string(ev.Kv.Key), w.ns.Root())
	if !ok {
		return
	}
	if string(ev.Kv.Key) == w.markKey() {
		w.mu.Lock()
		if ch, ok := w.marks[string(ev.Kv.Value)]; ok {
			close(ch)
			delete(w.marks, string(ev.Kv.Value))
		}
		w.mu.Unlock()
		return
	}
	c := Change{Revision: ev.Kv.ModRevision + offset, KVVersion: ev.Kv.Version, Delete: ev.Type == mvccpb.DELETE, Seen: seen}
	val := ev.Kv.Value
	var err error
	switch first, rest, _ := strings.Cut(key, "/"); first {
	case "epoch":
		c.Kind = ChangeEpoch
		if !c.Delete {
			c.Number, err = layout.DecodeNumber(string(val))
		}
	case "pointers":
		c.Kind = ChangePointer
		c.Resource = unescape(rest)
		if !c.Delete {
			var p layout.Pointer
			if p, err = layout.DecodePointer(val); err == nil {
				c.Version, c.Object, c.Owner = p.Version, p.Object.Key, p.Owner
			}
		}
	case "seals":
		c.Kind = ChangeSeal
		c.Resource = unescape(rest)
		if !c.Delete {
			var s layout.Seal
			if s, err = layout.DecodeSeal(val); err == nil {
				c.Version, c.Value = s.Version, s.Reason
				if !s.At.IsZero() {
					c.At = w.clock.At(s.At)
				}
			}
		}
	case "ops":
		res, k, _ := strings.Cut(rest, "/")
		c.Kind, c.Resource, c.Key = ChangeOpRecord, unescape(res), unescape(k)
		if !c.Delete {
			var r layout.OpRecord
			if r, err = layout.DecodeOp(ev.Kv.Key, val); err == nil {
				c.Version, c.Value, c.Object, c.Owner = r.Version, r.Digest, r.ObjectKey, r.Owner
			}
		}
	case "authority":
		res, sub, _ := strings.Cut(rest, "/")
		c.Resource = unescape(res)
		switch {
		case sub == "generation":
			c.Kind = ChangeGeneration
			if !c.Delete {
				c.Number, err = layout.DecodeNumber(string(val))
			}
		case strings.HasPrefix(sub, "grants/"):
			c.Kind = ChangeGrant
			c.Number, err = layout.DecodeNumber(strings.TrimPrefix(sub, "grants/"))
			c.Value = string(val)
		default:
			return
		}
	default:
		return
	}
	if err != nil {
		c.Err = err.Error()
	}
	w.rec.Change(c)
}

// unescape reverses layout's escaping of a key component.
func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

package gc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/publisher"
)

// slowDeletes is a store whose multi-object deletes take a while and
// records how many were in flight at once.
type slowDeletes struct {
	objstore.Store
	inFlight, peak atomic.Int64
}

func (s *slowDeletes) Delete(ctx context.Context, keys []string) []error {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	time.Sleep(50 * time.Millisecond) // widens the window in which deletes overlap
	return s.Store.Delete(ctx, keys)
}

// staleOrphan leaves res with a published pointer (worker b's) and one
// unpublishable object (a stale publish of worker a's released grant), and
// returns the two object keys.
func (e *env) staleOrphan(res string) (published, orphan string) {
	e.t.Helper()
	a, pa := e.worker(res, "a")
	e.publish(pa, "a1", publisher.Applied)
	e.release(a)
	_, pb := e.worker(res, "b")
	published = e.publish(pb, "b1", publisher.Applied).Pointer.Object.Key
	return published, e.publish(pa, "a2", publisher.Stale).Attempt.Object.Key
}

// A pass over many resources collects resourceConcurrency of them at once
// (every one reaches its snapshot before any lists), keeps the multi-object
// deletes of all of them within DeleteConcurrency, and collects each
// exactly as alone: its orphan deleted, its published object kept.
func TestRunAllCollectsResourcesAtOnce(t *testing.T) {
	e := newEnv(t)
	const n = resourceConcurrency + 4
	published, orphans := make([]string, n), make([]string, n)
	for i := range n {
		published[i], orphans[i] = e.staleOrphan(fmt.Sprintf("res-%02d", i))
	}
	st := &slowDeletes{Store: e.st}
	c := e.collector(func(cfg *Config) { cfg.Store, cfg.DeleteBatch, cfg.DeleteConcurrency = st, 1, 2 })
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	c.afterState = func(string) {
		mu.Lock()
		if arrived++; arrived == resourceConcurrency {
			close(all)
		}
		mu.Unlock()
		select { // the first resourceConcurrency wait for each other
		case <-all:
		case <-time.After(20 * time.Second):
			t.Error("resources are not collected at once: the first ones never met")
		}
	}
	rep := e.run(c)
	if rep.Resources != n || rep.Deleted != n || len(rep.Errors) != 0 {
		t.Fatalf("pass: %d resources, %d deleted, errors %v; want %d, %d, none", rep.Resources, rep.Deleted, rep.Errors, n, n)
	}
	for i := range n {
		mustDecide(t, rep, orphans[i], kindUnpublishable, "deleted", "<= pointer")
		if e.Exists(orphans[i]) || !e.Exists(published[i]) {
			t.Fatalf("resource %d: orphan left %v, published object kept %v", i, e.Exists(orphans[i]), e.Exists(published[i]))
		}
	}
	if p := st.peak.Load(); p != 2 {
		t.Fatalf("%d multi-object deletes in flight at the peak, want DeleteConcurrency (2)", p)
	}
}

// A pass whose context ends starts no more resources and names the first
// one it did not start.
func TestRunAllStopsStartingResources(t *testing.T) {
	e := newEnv(t)
	const n = 2 * resourceConcurrency
	for i := range n {
		e.staleOrphan(fmt.Sprintf("res-%02d", i))
	}
	c := e.collector(nil)
	ctx, cancel := context.WithCancel(ctxT(t, time.Minute))
	defer cancel()
	var mu sync.Mutex
	snapshotted := map[string]bool{}
	c.afterState = func(res string) {
		mu.Lock()
		snapshotted[res] = true
		mu.Unlock()
		cancel()
	}
	rep, err := c.Run(ctx, RunOptions{All: true})
	if !errors.Is(err, ErrIncomplete) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want ErrIncomplete and context.Canceled", err)
	}
	if len(snapshotted) == 0 || len(snapshotted) > resourceConcurrency {
		t.Fatalf("%d resources reached their snapshot; want 1 to %d", len(snapshotted), resourceConcurrency)
	}
	for _, msg := range rep.Errors {
		var res string
		if _, err := fmt.Sscanf(msg, "gc: stopped before %q", &res); err == nil {
			if snapshotted[res] {
				t.Fatalf("%q: that resource was collected", msg)
			}
			return
		}
	}
	t.Fatalf("report errors %q name no resource the pass stopped before", rep.Errors)
}

//go:build !unit

package gc

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
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

// countingLists is a store that records the prefix of every listing.
type countingLists struct {
	objstore.Store
	mu       sync.Mutex
	prefixes []string
}

func (s *countingLists) List(ctx context.Context, prefix string, opts objstore.ListOptions) iter.Seq2[objstore.ObjectInfo, error] {
	s.mu.Lock()
	s.prefixes = append(s.prefixes, prefix)
	s.mu.Unlock()
	return s.Store.List(ctx, prefix, opts)
}

// meeting returns a hook every call of which waits until n calls are in it
// at once (failing t after 20 s): calls made one after another never meet.
func meeting(t *testing.T, n int, what string) func(string) {
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	return func(string) {
		mu.Lock()
		if arrived++; arrived == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(20 * time.Second):
			t.Errorf("%s are not collected at once: the first %d never met", what, n)
		}
	}
}

// A pass over named resources collects resourceConcurrency of them at once
// (every one reaches its snapshot before any lists), keeps the multi-object
// deletes of all of them within DeleteConcurrency, and collects each
// exactly as alone: its orphan deleted, its published object kept.
func TestRunCollectsResourcesAtOnce(t *testing.T) {
	e := newEnv(t)
	const n = resourceConcurrency + 4
	names, published, orphans := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("res-%02d", i)
		published[i], orphans[i] = e.staleOrphan(names[i])
	}
	st := &slowDeletes{Store: e.st}
	c := e.collector(func(cfg *Config) { cfg.Store, cfg.DeleteBatch, cfg.DeleteConcurrency = st, 1, 2 })
	c.afterState = meeting(t, resourceConcurrency, "resources")
	rep := e.run(c, names...)
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

// An All pass lists each window of resources ONCE (one listing of the
// bucket from the window's first object prefix; no window spans the
// metadata directory), collects windows at once,
// and attributes every object to its own resource although names sort
// differently from their object prefixes ("a-b/" < "a/"), with keys of a
// directory outside the pass and the metadata directory in between: each
// orphan is deleted, each published object and the stray key are kept.
func TestRunAllListsEachWindowOnce(t *testing.T) {
	e := newEnv(t)
	names := []string{"a", "a-b", "a.b", "ab", "b", "b-1", "c", "Z"}
	published, orphans := map[string]string{}, map[string]string{}
	for _, res := range names {
		published[res], orphans[res] = e.staleOrphan(res)
	}
	stray := e.NS.ObjectsPrefix("b-0") + "stray" // no pointer: outside the pass
	e.put(stray, "not ours")
	objects := int64(len(e.objectKeys(names...))) // under the resources' own prefixes
	st := &countingLists{Store: e.st}
	c := e.collector(func(cfg *Config) { cfg.Store = st })
	c.window = 3
	// "Z/" sorts before the metadata directory "_fencepub/", which ends a
	// window: [Z], then the 7 others in windows of 3.
	windows := 1 + (len(names)-1+c.window-1)/c.window
	c.afterState = meeting(t, windows, "windows")
	rep := e.run(c)
	if rep.Resources != len(names) || rep.Deleted != int64(len(names)) || rep.Scanned != objects || len(rep.Errors) != 0 {
		t.Fatalf("pass: %d resources, %d scanned, %d deleted, errors %v; want %d, %d, %d, none",
			rep.Resources, rep.Scanned, rep.Deleted, rep.Errors, len(names), objects, len(names))
	}
	for _, res := range names {
		mustDecide(t, rep, orphans[res], kindUnpublishable, "deleted", "<= pointer")
		mustDecide(t, rep, published[res], kindPublished, "kept", "")
		if e.Exists(orphans[res]) || !e.Exists(published[res]) {
			t.Fatalf("resource %q: orphan left %v, published object kept %v", res, e.Exists(orphans[res]), e.Exists(published[res]))
		}
	}
	if !e.Exists(stray) {
		t.Fatal("the pass deleted a key of a directory it does not cover")
	}
	if len(st.prefixes) != windows || slices.ContainsFunc(st.prefixes, func(p string) bool { return p != e.NS.Root() }) {
		t.Fatalf("listings %q; want %d, one per window, each of the root %q", st.prefixes, windows, e.NS.Root())
	}
}

// A pass whose context ends starts no more windows and names the first
// resource it did not start.
func TestRunAllStopsStartingResources(t *testing.T) {
	e := newEnv(t)
	c := e.collector(nil)
	c.window = 2
	n := c.window * (windowConcurrency + 1)
	for i := range n {
		e.staleOrphan(fmt.Sprintf("res-%02d", i))
	}
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
	if len(snapshotted) == 0 || len(snapshotted) > c.window*windowConcurrency {
		t.Fatalf("%d resources reached their snapshot; want 1 to %d", len(snapshotted), c.window*windowConcurrency)
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

// listFailsAfter is a store whose listings fail after n keys.
type listFailsAfter struct {
	objstore.Store
	n int
}

func (s listFailsAfter) List(ctx context.Context, prefix string, opts objstore.ListOptions) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		i := 0
		for o, err := range s.Store.List(ctx, prefix, opts) {
			if err == nil && i == s.n {
				yield(objstore.ObjectInfo{}, fmt.Errorf("%w: injected", objstore.ErrUnavailable))
				return
			}
			i++
			if !yield(o, err) {
				return
			}
		}
	}
}

// windowOf3 leaves a stale orphan on each of "a", "a-b" and "a.b" (object
// prefixes in key order: "a-b/" < "a.b/" < "a/") and returns the orphans
// and a collector whose windows hold all three.
func windowOf3(e *env, mod func(*Config)) (map[string]string, *Collector) {
	orphans := map[string]string{}
	for _, res := range []string{"a", "a-b", "a.b"} {
		_, orphans[res] = e.staleOrphan(res)
	}
	c := e.collector(mod)
	c.window = 3
	return orphans, c
}

// A window whose middle resource's snapshot fails (its pointer does not
// decode) collects the others and keeps every object of the failed one:
// its keys are skipped, never handed to a neighbour.
func TestRunAllWindowSnapshotFails(t *testing.T) {
	e := newEnv(t)
	orphans, c := windowOf3(e, nil)
	if _, err := e.Etcd.Put(ctxT(t, 10*time.Second), e.NS.PointerKey("a.b"), "not a pointer"); err != nil {
		t.Fatal(err)
	}
	rep, err := c.runPass(ctxT(t, time.Minute), RunOptions{All: true}, true)
	if !errors.Is(err, fencepub.ErrCorruptState) || len(rep.Errors) != 1 || !strings.HasPrefix(rep.Errors[0], "a.b: ") {
		t.Fatalf("err %v, report errors %q; want ErrCorruptState for a.b alone", err, rep.Errors)
	}
	for res, orphan := range orphans {
		if e.Exists(orphan) != (res == "a.b") {
			t.Fatalf("orphan of %q left: %v; want only a.b's left", res, e.Exists(orphan))
		}
	}
	for _, d := range rep.Decisions {
		if strings.HasPrefix(d.Key, e.NS.ObjectsPrefix("a.b")) {
			t.Fatalf("a key of the failed resource was classified: %+v", d)
		}
	}
}

// A window's listing that fails partway fails the resource it was listing
// and every later one of the window, whose objects all stay, and collects
// the ones before it.
func TestRunAllWindowListingFails(t *testing.T) {
	e := newEnv(t)
	_, c := windowOf3(e, func(cfg *Config) {
		// Fail after the keys of "a-b", the window's first resource, and
		// the first of a.b's.
		cfg.Store = listFailsAfter{Store: e.st, n: len(e.objectKeys("a-b")) + 1}
	})
	orphans := e.objectKeys("a", "a-b", "a.b")
	rep, err := c.runPass(ctxT(t, time.Minute), RunOptions{All: true}, true)
	if !errors.Is(err, objstore.ErrUnavailable) && !errors.Is(err, fencepub.ErrUnavailable) {
		t.Fatalf("err %v; want the listing's", err)
	}
	failed := map[string]bool{}
	for _, msg := range rep.Errors {
		res, _, _ := strings.Cut(msg, ": ")
		failed[res] = true
	}
	if len(failed) != 2 || !failed["a.b"] || !failed["a"] {
		t.Fatalf("report errors %q; want a.b and a failed, a-b collected", rep.Errors)
	}
	if rep.Deleted != 1 || rep.SealRaises != 0 {
		t.Fatalf("%d deleted, %d seal raises; want 1 (a-b's orphan), 0", rep.Deleted, rep.SealRaises)
	}
	left := 0
	for _, k := range orphans {
		if e.Exists(k) {
			left++
		}
	}
	if left != len(orphans)-1 {
		t.Fatalf("%d of %d objects left; want all but a-b's orphan", left, len(orphans))
	}
}

// swapsKeys is a store whose listings swap their first two keys.
type swapsKeys struct{ objstore.Store }

func (s swapsKeys) List(ctx context.Context, prefix string, opts objstore.ListOptions) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		var held *objstore.ObjectInfo
		for o, err := range s.Store.List(ctx, prefix, opts) {
			switch {
			case err != nil:
				yield(o, err)
				return
			case held == nil:
				held = &o
				continue
			}
			if !yield(o, nil) {
				return
			}
			if held != nil && held.Key != "" {
				if !yield(*held, nil) {
					return
				}
				held.Key = "" // yielded
			}
		}
	}
}

// A window's listing out of key order is an error for the resource being
// listed and the later ones, never a silent skip: none of them raises an
// abandon seal (an unpublishable key already handed out may be deleted; that
// needs no listing order).
func TestRunAllWindowListingOutOfOrder(t *testing.T) {
	e := newEnv(t)
	_, c := windowOf3(e, func(cfg *Config) { cfg.Store = swapsKeys{Store: e.st} })
	rep, err := c.runPass(ctxT(t, time.Minute), RunOptions{All: true}, false)
	if err == nil || !strings.Contains(err.Error(), "out of key order") || len(rep.Errors) != 3 || rep.SealRaises != 0 {
		t.Fatalf("err %v, %d seal raises; want an out-of-order error for each resource and no seal raised", err, rep.SealRaises)
	}
}

// objectKeys lists the object keys under the resources' prefixes.
func (e *env) objectKeys(resources ...string) []string {
	e.t.Helper()
	var keys []string
	for _, res := range resources {
		for o, err := range e.st.List(ctxT(e.t, 10*time.Second), e.NS.ObjectsPrefix(res), objstore.ListOptions{}) {
			if err != nil {
				e.t.Fatal(err)
			}
			keys = append(keys, o.Key)
		}
	}
	return keys
}

//go:build !unit

package gc

import (
	"context"
	"fmt"
	"github.com/fencepub/fencepub/internal/recovery"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sealWatch records every value the seal of res takes from now on.
type sealWatch struct {
	mu     sync.Mutex
	values []layout.Version
	stop   context.CancelFunc
	done   chan struct{}
}

func (e *env) watchSeal(res string) *sealWatch {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &sealWatch{stop: cancel, done: make(chan struct{})}
	start := e.get(e.NS.SealKey(res))
	rev := int64(0)
	if start != nil {
		rev = start.ModRevision
	}
	wch := e.Etcd.Watch(ctx, e.NS.SealKey(res), clientv3.WithRev(rev))
	go func() {
		defer close(w.done)
		for wr := range wch {
			for _, ev := range wr.Events {
				s, err := layout.DecodeSeal(ev.Kv.Value)
				w.mu.Lock()
				if err != nil || ev.Type != clientv3.EventTypePut {
					w.values = append(w.values, layout.Version{Epoch: 1 << 62}) // flags a corrupt or deleted seal
				} else {
					w.values = append(w.values, s.Version)
				}
				w.mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// check fails t unless the seal never went down and ended at want.
func (w *sealWatch) check(t *testing.T, want layout.Version) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.mu.Lock()
		vs := append([]layout.Version(nil), w.values...)
		w.mu.Unlock()
		if len(vs) > 0 && vs[len(vs)-1] == want || time.Now().After(deadline) {
			for i := 1; i < len(vs); i++ {
				if vs[i].Compare(vs[i-1]) < 0 {
					t.Fatalf("the seal went down: %v", vs)
				}
			}
			if len(vs) == 0 || vs[len(vs)-1] != want {
				t.Fatalf("seal values %v; want to end at %s", vs, want)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deletedSafely fails t unless every key the reports deleted is
// unpublishable in the final state (<= max(pointer, seal), or an older
// epoch) and not the pointer's object. It returns the number of deletions.
func (e *env) deletedSafely(res string, reps ...*passReport) int {
	e.t.Helper()
	return e.deletedSafelyUnder(res, reps...)
}

// deletedSafelyUnder is deletedSafely for the decisions under res's prefix
// only (reports of passes over several resources).
func (e *env) deletedSafelyUnder(res string, reps ...*passReport) int {
	e.t.Helper()
	ptr := e.Pointer(res)
	top := layout.MaxVersion(ptr.Version, e.seal(res).Version)
	n := 0
	for _, rep := range reps {
		for _, d := range rep.Decisions {
			if d.Action != "deleted" || !strings.HasPrefix(d.Key, e.NS.ObjectsPrefix(res)) {
				continue
			}
			n++
			if d.Key == ptr.Object.Key || d.Version == nil || top.Compare(*d.Version) < 0 {
				e.t.Fatalf("deleted %s (%s, %s) though it is publishable: pointer %s, max(pointer, seal) %s", d.Key, d.Kind, d.Reason, ptr.Version, top)
			}
		}
	}
	return n
}

// paused starts a pass over res with a clock 3 h ahead that runs between
// (if not nil) after its snapshot and stops before its seal transaction; it
// returns when the pass got there. resume lets it finish and returns its
// report.
func (e *env) paused(res string, between func()) (resume func() *passReport) {
	e.t.Helper()
	c := e.collector(later(3 * time.Hour))
	if between != nil {
		c.afterState = func(string) { between() }
	}
	ready, cont := make(chan struct{}), make(chan struct{})
	c.beforeSeal = func(string) { close(ready); <-cont }
	type result struct {
		rep *passReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := c.runPass(context.Background(), RunOptions{Resources: []string{res}}, true)
		done <- result{rep, err}
	}()
	select {
	case <-ready:
	case r := <-done:
		e.t.Fatalf("the pass ended before its seal: %v %+v", r.err, r.rep)
	case <-time.After(30 * time.Second):
		e.t.Fatal("the pass did not reach its seal")
	}
	return func() *passReport {
		close(cont)
		r := <-done
		if r.err != nil {
			e.t.Fatal(r.err)
		}
		return r.rep
	}
}

// Two collectors with different snapshots seal and delete concurrently,
// without any lease: the seal never goes down and nothing publishable is
// deleted. A seal transaction from an old snapshot loses whichever of the
// seal, the pointer or the epoch changed, and its candidates are kept.
func TestConcurrentCollectorsDifferentSnapshots(t *testing.T) {
	e := newEnv(t)
	const res = "contended"
	w := e.watchSeal(res)
	a, pa := e.worker(res, "a")
	p1 := e.publish(pa, "1", publisher.Applied)
	o12 := e.inFlight(a, "2")
	e.expire(a)

	// 1. The seal moved: GC1 (snapshot: seal 0, candidate o12) stops; B
	// leaves a newer in-flight object and GC2 seals over both.
	resume := e.paused(res, nil)
	b := e.acquire(res, "b", 0)
	o21 := e.inFlight(b, "3")
	e.expire(b)
	rep2 := e.run(e.collector(later(3*time.Hour)), res)
	mustDecide(t, rep2, o12.Attempt.Object.Key, kindAbandoned, "deleted", "")
	mustDecide(t, rep2, o21.Attempt.Object.Key, kindAbandoned, "deleted", "")
	rep1 := resume()
	mustDecide(t, rep1, o12.Attempt.Object.Key, kindAbandoned, "skipped", "changed since the snapshot")
	if rep1.Sealed != 0 || rep1.SealRaises != 0 {
		t.Fatalf("GC1 report %+v", rep1)
	}
	w.check(t, o21.Version)

	// 2. The pointer moved: right after GC1's snapshot, a worker whose lease
	// is already gone (fencing still lets it publish: nothing newer was
	// accepted) publishes; GC1 lists that object, holds it as abandoned (a
	// dead grant's object above the snapshot's pointer), and must not delete
	// what is now the published object.
	c, pc := e.worker(res, "c")
	e.expire(c)
	var (
		late    publisher.Result
		lateErr error
	)
	resume = e.paused(res, func() { late, lateErr = pc.Publish(context.Background(), op("4", "late")) })
	if late.Outcome != publisher.Applied || e.Pointer(res).Object.Key != late.Object.Key {
		t.Fatalf("late publish: %+v %v", late, lateErr)
	}
	rep1b := resume()
	mustDecide(t, rep1b, late.Object.Key, kindAbandoned, "skipped", "changed since the snapshot")
	if !e.Exists(late.Object.Key) {
		t.Fatal("deleted the object a late transaction published")
	}
	w.check(t, o21.Version)

	// 3. The epoch moved: recover after GC1's snapshot makes GC1's
	// candidate an old-epoch object above the restored pointer
	// (quarantined); GC1 must not delete it.
	d := e.acquire(res, "d", 0)
	o51 := e.inFlight(d, "5")
	e.expire(d)
	resume = e.paused(res, nil)
	if _, err := recovery.Recover(ctxT(t, time.Minute), e.auth, recovery.Options{}); err != nil {
		t.Fatal(err)
	}
	rep1c := resume()
	mustDecide(t, rep1c, o51.Attempt.Object.Key, kindAbandoned, "skipped", "")
	rep3 := e.run(e.collector(later(3*time.Hour)), res)
	mustDecide(t, rep3, o51.Attempt.Object.Key, kindQuarantined, "kept", "")
	w.check(t, o21.Version)
	for _, k := range []string{p1.Object.Key, late.Object.Key, o51.Attempt.Object.Key} {
		if !e.Exists(k) {
			t.Fatalf("%s deleted", k)
		}
	}
	e.deletedSafely(res, rep1, rep2, rep1b, rep1c, rep3)

	// 4. Several rounds of two collectors racing on fresh orphans from dead
	// grants, with no hook: the seal only rises and nothing publishable
	// goes.
	var reps []*passReport
	for round := range 3 {
		g, pg := e.worker(res, "w")
		e.publish(pg, fmt.Sprintf("round-%d", round), publisher.Applied)
		for i := range 3 {
			e.inFlight(g, fmt.Sprintf("lost-%d-%d", round, i))
		}
		e.expire(g)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rep, err := e.collector(later(3*time.Hour)).runPass(context.Background(), RunOptions{Resources: []string{res}}, true)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				reps = append(reps, rep)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	w.check(t, e.seal(res).Version)
	if n := e.deletedSafely(res, reps...); n == 0 {
		t.Fatal("the racing collectors deleted nothing")
	}
	rep := e.run(e.collector(later(3*time.Hour)), res)
	if rep.ByDecision[kindAbandoned] != 0 || rep.ByDecision[kindInFlight] != 0 {
		t.Fatalf("orphans left after the races: %+v", rep.ByDecision)
	}
}

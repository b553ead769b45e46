//go:build !unit

package publisher

import (
	"context"
	"errors"
	"fmt"
	"github.com/fencepub/fencepub/internal/recovery"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The protocol source's timeline 41, 42, 41: A holds fence f, pauses past its lease;
// the authority grants f+1 to B atomically; B publishes; A resumes and
// publishes with f. The resource rejects A at its commit point: stale by the
// pointer, B's pointer stays, and A's object is left unreferenced for GC.
func TestSeedTimelineStaleAfterNewerFence(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "report"
	gA := e.acquire(authority.AcquireRequest{Resource: res, Owner: "worker-A", TTL: 2 * time.Second})
	pA := e.bind(gA, false)
	// A pauses: it never renews. B waits for etcd to expire A's lease.
	gB := e.acquire(authority.AcquireRequest{Resource: res, Owner: "worker-B", TTL: 10 * time.Second, Wait: true})
	if gB.Generation != gA.Generation+1 {
		t.Fatalf("B's fence %d, want A's %d + 1", gB.Generation, gA.Generation)
	}
	pB := e.bind(gB, false)
	rB, err := pB.Publish(ctx, op("result-B", "state computed by B"))
	mustOutcome(t, "B", rB, err, Applied, reasonNone)

	rA, err := pA.Publish(ctx, op("result-A", "state computed by A"))
	mustOutcome(t, "A after B", rA, err, Stale, ReasonPointer)

	ptr := e.Pointer(res)
	if ptr.Version != rB.Version || ptr.Object.Key != rB.Object.Key {
		t.Fatalf("pointer %+v, want B's %s %s", ptr.Version, rB.Version, rB.Object.Key)
	}
	if !e.Exists(rA.Object.Key) || rA.Object.Key == ptr.Object.Key {
		t.Fatalf("A's object %s must exist, unreferenced", rA.Object.Key)
	}
	if got := e.history(res); len(got) != 1 || got[0] != rB.Version {
		t.Fatalf("history %v, want only B's %s", got, rB.Version)
	}
	if n := e.counter("fencepub_publish_total", map[string]string{"outcome": "stale", "reason": "pointer"}); n != 1 {
		t.Fatalf("stale/pointer counter = %v, want 1", n)
	}
	if n := e.counter("fencepub_publish_failures_total", nil); n != 0 {
		t.Fatalf("failures counter = %v, want 0 (stale is an outcome, not a failure)", n)
	}
}

// The protocol source's "key limitation": before B's newer state is durably accepted, old A may
// still publish; that is allowed, and B then supersedes it.
func TestOlderFenceMayPublishBeforeNewer(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "report"
	gA := e.acquire(authority.AcquireRequest{Resource: res, Owner: "worker-A"})
	pA := e.bind(gA, false)
	e.expire(gA) // the authority considers A gone (A, paused, never released)
	gB := e.acquire(authority.AcquireRequest{Resource: res, Owner: "worker-B"})
	pB := e.bind(gB, false)

	rA, err := pA.Publish(ctx, op("result-A", "A"))
	mustOutcome(t, "A before B", rA, err, Applied, reasonNone)
	rB, err := pB.Publish(ctx, op("result-B", "B"))
	mustOutcome(t, "B after A", rB, err, Applied, reasonNone)
	rA2, err := pA.Publish(ctx, op("result-A2", "A again"))
	mustOutcome(t, "A after B", rA2, err, Stale, ReasonPointer)
	if got := e.history(res); !slices.Equal(got, []layout.Version{rA.Version, rB.Version}) {
		t.Fatalf("history %v, want [%s %s]", got, rA.Version, rB.Version)
	}
}

// One term, many writes: seq 2 committed first makes a late seq 1 stale.
func TestSeqTwoThenSeqOneIsStale(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	r2, err := p.PublishSeq(ctx, 2, op("k2", "two"))
	mustOutcome(t, "seq 2", r2, err, Applied, reasonNone)
	r1, err := p.PublishSeq(ctx, 1, op("k1", "one"))
	mustOutcome(t, "seq 1", r1, err, Stale, ReasonPointer)
	if ptr := e.Pointer("r"); ptr.Version != r2.Version {
		t.Fatalf("pointer %s, want %s", ptr.Version, r2.Version)
	}
	if p.nextSeq() != 3 {
		t.Fatalf("next seq %d, want 3", p.nextSeq())
	}
}

// The protocol source's operations case: seq1 applied, seq2 applied, the same key
// retried in a new term is a duplicate with the original result, the same key
// with another body a conflict, a new key with an old seq stale — and etcd
// holds exactly two effects.
func TestOperationsCase(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "ledger"
	gA := e.acquire(authority.AcquireRequest{Resource: res, Owner: "worker-A"})
	pA := e.bind(gA, false)
	r1, err := pA.Publish(ctx, op("op-1", "first"))
	mustOutcome(t, "seq1", r1, err, Applied, reasonNone)
	r2, err := pA.Publish(ctx, op("op-2", "second"))
	mustOutcome(t, "seq2", r2, err, Applied, reasonNone)
	e.release(gA)

	pB := e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "worker-B"}), false)
	dup, err := pB.Publish(ctx, op("op-1", "first"))
	mustOutcome(t, "same key, same body, new term", dup, err, Duplicate, reasonNone)
	if dup.Version != r1.Version || dup.Object != r1.Object || dup.Digest != r1.Digest {
		t.Fatalf("duplicate returned %s %+v, want the original %s %+v", dup.Version, dup.Object, r1.Version, r1.Object)
	}
	if dup.Attempt == nil || dup.Attempt.Object.Key == r1.Object.Key {
		t.Fatalf("duplicate's own attempt %+v must be a separate (orphan) object", dup.Attempt)
	}
	conf, err := pB.Publish(ctx, op("op-1", "different body"))
	mustOutcome(t, "same key, other body", conf, err, Conflict, reasonNone)
	if conf.Version == r1.Version || conf.Object.Key == r1.Object.Key {
		t.Fatalf("conflict must not return the original success: %+v", conf)
	}
	stale, err := pA.PublishSeq(ctx, 1, op("op-3", "third"))
	mustOutcome(t, "new key, old seq", stale, err, Stale, ReasonPointer)

	if ptr := e.Pointer(res); ptr.Version != r2.Version || ptr.Object != r2.Object {
		t.Fatalf("pointer %s, want seq2's %s", ptr.Version, r2.Version)
	}
	if got := e.history(res); !slices.Equal(got, []layout.Version{r1.Version, r2.Version}) {
		t.Fatalf("history %v: want exactly the two effects", got)
	}
	if n := e.Count(e.NS.OpsPrefix(res)); n != 2 {
		t.Fatalf("%d op records, want 2", n)
	}
}

// Tokens not bound to a grant of this resource in the current epoch never
// take effect (DESIGN.md invariant 2): the transaction rejects them.
func TestUnauthorizedTokensRejected(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const res = "model"
	gA := e.acquire(authority.AcquireRequest{Resource: res, Owner: "owner-a"})
	pA := e.bind(gA, false)
	first, err := pA.Publish(ctx, op("k-first", "v1"))
	mustOutcome(t, "first", first, err, Applied, reasonNone)

	// Grants of another resource, with fences this resource never granted.
	var gX authority.Grant
	for range 3 {
		gX = e.acquire(authority.AcquireRequest{Resource: "other", Owner: "owner-x"})
		e.release(gX)
	}
	cases := []struct {
		name string
		term Term
	}{
		{"fence of another resource's grant", Term{resource: res, owner: gX.Owner, epoch: gX.Epoch, fence: gX.Generation}},
		{"fence never granted", Term{resource: res, owner: gA.Owner, epoch: gA.Epoch, fence: 999}},
		{"right fence, wrong owner", Term{resource: res, owner: "mallory", epoch: gA.Epoch, fence: gA.Generation}},
	}
	for i, c := range cases {
		p, err := e.pub.Bind(ctx, c.term)
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.PublishSeq(ctx, 5, op(fmt.Sprintf("k-bad-%d", i), "forged"))
		mustOutcome(t, c.name, r, err, Stale, ReasonGrant)
	}

	// The domain moves to a new epoch (after an etcd restore, `recover`).
	rep, err := recovery.Recover(ctx, e.auth, recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NewEpoch <= gA.Epoch {
		t.Fatalf("recover moved to epoch %d, want above %d", rep.NewEpoch, gA.Epoch)
	}
	r, err := pA.Publish(ctx, op("k-old-epoch", "from the old epoch"))
	mustOutcome(t, "old epoch", r, err, Stale, ReasonEpoch)

	if ptr := e.Pointer(res); ptr.Version != first.Version {
		t.Fatalf("pointer moved to %s", ptr.Version)
	}
	if n := len(e.history(res)); n != 1 {
		t.Fatalf("%d history entries, want 1", n)
	}
}

// Strict mode adds the holder compare: once the grant no longer holds the
// resource, a publish is stale with reason lease (before any pointer check),
// while a non-strict publisher of the same grant is still fenced only by the
// resource.
func TestStrictModeLeaseLost(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	g := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"})
	strict := e.bind(g, true)
	r1, err := strict.Publish(ctx, op("k1", "one"))
	mustOutcome(t, "strict while held", r1, err, Applied, reasonNone)
	loose := e.bind(g, false) // continues at seq 2
	e.expire(g)
	r2, err := strict.Publish(ctx, op("k2", "two"))
	mustOutcome(t, "strict after the lease expired", r2, err, Stale, ReasonLease)
	if !errors.Is(err, authority.ErrLeaseLost) {
		t.Fatalf("err %v, want authority.ErrLeaseLost", err)
	}
	r3, err := loose.Publish(ctx, op("k3", "three"))
	mustOutcome(t, "non-strict after the lease expired", r3, err, Applied, reasonNone)
}

// A Publisher rebuilt for a grant it got back through a retried request id
// continues seq above max(pointer, seal) for its fence, never from 1.
func TestRebindContinuesSeq(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	req := authority.AcquireRequest{Resource: "r", Owner: "w", RequestID: "job-7-attempt-1"}
	g := e.acquire(req)
	p := e.bind(g, false)
	for i := range 2 {
		r, err := p.Publish(ctx, op(fmt.Sprintf("k%d", i), "x"))
		mustOutcome(t, "publish", r, err, Applied, reasonNone)
	}
	g2 := e.acquire(req) // the retried request gets the original grant back
	if g2.Generation != g.Generation || g2.HolderRevision != g.HolderRevision {
		t.Fatalf("retried acquire returned a new grant %+v", g2)
	}
	if n := e.bind(g2, false).nextSeq(); n != 3 {
		t.Fatalf("rebound publisher starts at seq %d, want 3", n)
	}
	// A resolve that sealed seq 5 of this fence moves the start above it.
	v5 := layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: 5}
	if _, err := e.pub.Resolve(ctx, "r", "lost-op", v5, unsent); !errors.Is(err, ErrStale) {
		t.Fatalf("resolve: %v", err)
	}
	p3 := e.bind(g2, false)
	if n := p3.nextSeq(); n != 6 {
		t.Fatalf("rebound publisher starts at seq %d, want 6", n)
	}
	r, err := p3.Publish(ctx, op("k-after", "y"))
	mustOutcome(t, "after rebind", r, err, Applied, reasonNone)
}

// 16 concurrent publishers with a random mix of fences and seqs on one
// resource: every publish is applied or stale, the final pointer is the
// maximum applied version, history holds exactly the applied versions, and
// etcd's own watch of the pointer saw strictly increasing versions.
func TestConcurrentPublishers(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const res = "hot"
	var pubs []*Publisher
	for i := range 4 {
		g := e.acquire(authority.AcquireRequest{Resource: res, Owner: fmt.Sprintf("w%d", i)})
		pubs = append(pubs, e.bind(g, false))
		e.expire(g)
	}
	start, err := e.Etcd.Get(ctx, e.NS.PointerKey(res))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watch := e.Etcd.Watch(wctx, e.NS.PointerKey(res), clientv3.WithRev(start.Header.Revision+1))
	rd, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}}, res)
	if err != nil {
		t.Fatal(err)
	}
	updates := rd.Watch(wctx)

	type outcome struct {
		r   Result
		err error
	}
	results := make(chan outcome, 16*4)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for i := range 4 {
				p := pubs[rng.IntN(len(pubs))]
				seq := uint64(1 + rng.IntN(6))
				r, err := p.PublishSeq(ctx, seq, op(fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("body %d/%d", w, i)))
				results <- outcome{r, err}
			}
		})
	}
	wg.Wait()
	close(results)

	applied := map[layout.Version]bool{}
	var maxApplied layout.Version
	for o := range results {
		switch o.r.Outcome {
		case Applied:
			applied[o.r.Version] = true
			maxApplied = layout.MaxVersion(maxApplied, o.r.Version)
		case Stale:
			if o.r.Reason != ReasonPointer {
				t.Errorf("stale with reason %q: %v", o.r.Reason, o.err)
			}
		default:
			t.Errorf("outcome %q: %v", o.r.Outcome, o.err)
		}
	}
	ptr := e.Pointer(res)
	if ptr.Version != maxApplied {
		t.Fatalf("pointer %s, want the maximum applied %s", ptr.Version, maxApplied)
	}
	hist := e.history(res)
	if len(hist) != len(applied) {
		t.Fatalf("history %v, applied %v", hist, applied)
	}
	for _, v := range hist {
		if !applied[v] {
			t.Fatalf("history has %s, which no publish reported applied", v)
		}
	}
	var seen []layout.Version
	for len(seen) == 0 || seen[len(seen)-1] != maxApplied {
		wr, ok := <-watch
		if !ok {
			t.Fatalf("watch ended after %v", seen)
		}
		for _, ev := range wr.Events {
			p, err := layout.DecodePointer(ev.Kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) > 0 && seen[len(seen)-1].Compare(p.Version) >= 0 {
				t.Fatalf("pointer went from %s to %s", seen[len(seen)-1], p.Version)
			}
			seen = append(seen, p.Version)
		}
	}
	if len(seen) != len(applied) {
		t.Fatalf("etcd watch saw %d pointer writes, %d applied", len(seen), len(applied))
	}
	var got []layout.Version
	for len(got) == 0 || got[len(got)-1] != maxApplied {
		u, ok := <-updates
		if !ok {
			t.Fatalf("reader watch ended after %v", got)
		}
		if u.Err != nil {
			t.Fatalf("reader watch: %v", u.Err)
		}
		if len(got) > 0 && got[len(got)-1].Compare(u.Pointer.Version) >= 0 || !applied[u.Pointer.Version] {
			t.Fatalf("reader watch sent %s after %v", u.Pointer.Version, got)
		}
		got = append(got, u.Pointer.Version)
	}
	t.Logf("%d of 64 publishes applied; pointer writes in order: %v; the reader's watch saw %v", len(applied), seen, got)
}

// Contiguous mode: a seq after a gap is refused (reason gap) and succeeds
// once the missing seq is published, in order.
func TestContiguousMode(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bindContiguous(ctx, "counter")
	r1, err := p.PublishSeq(ctx, 1, op("inc-1", "+1"))
	mustOutcome(t, "seq 1", r1, err, Applied, reasonNone)
	r3, err := p.PublishSeq(ctx, 3, op("inc-3", "+3"))
	mustOutcome(t, "seq 3 after a gap", r3, err, Stale, ReasonGap)
	r2, err := p.PublishSeq(ctx, 2, op("inc-2", "+2"))
	mustOutcome(t, "seq 2", r2, err, Applied, reasonNone)
	r3, err = p.PublishSeq(ctx, 3, op("inc-3", "+3"))
	mustOutcome(t, "seq 3 in order", r3, err, Applied, reasonNone)
	// Publishing a seq again is stale by the pointer, never a gap.
	again, err := p.PublishSeq(ctx, 3, op("inc-3b", "+3 again"))
	mustOutcome(t, "seq 3 again", again, err, Stale, ReasonPointer)
	if got := e.history("counter"); !slices.Equal(got, []layout.Version{r1.Version, r2.Version, r3.Version}) {
		t.Fatalf("history %v", got)
	}
}

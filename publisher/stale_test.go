//go:build !unit

package publisher

import (
	"errors"
	"io"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestPausedWorkerBetweenWriteAndPublish pauses real worker
// processes (SIGSTOP) after their object write and before their publish
// transaction, past their lease's TTL, and resumes them:
//   - "seed": meanwhile B acquires a larger fence and publishes; A's publish
//     is stale (pointer), B's state stays, A's object exists unreferenced;
//   - "lax": nobody else acts; A's publish applies — lease expiry alone does
//     not reject (the protocol source: fencing only orders against accepted writes);
//   - "strict": nobody else acts; A's strict-mode publish is refused
//     (reason lease) because etcd expired its holder.
func TestPausedWorkerBetweenWriteAndPublish(t *testing.T) {
	e := newEnv(t)
	sh := testenv.Get(t)
	spec := func(res string, strict bool) pausedWorkerSpec {
		return pausedWorkerSpec{Servers: sh.Servers(e.NS), Resource: res, Owner: "A-" + res, TTL: 2 * time.Second,
			Strict: strict, Key: "a-" + res, Body: "A's stale result"}
	}
	workers := map[string]*pausedWorker{
		"seed":   startPausedWorker(t, spec("seed", false)),
		"lax":    startPausedWorker(t, spec("lax", false)),
		"strict": startPausedWorker(t, spec("strict", true)),
	}
	grants := map[string]authority.Grant{}
	objects := map[string]layout.Object{}
	for res, w := range workers {
		grants[res] = *w.next("grant").Grant
		objects[res] = *w.next("written").Object
		w.stop()
		if _, err := io.WriteString(w.child.Stdin(), "go\n"); err != nil { // read only after SIGCONT
			t.Fatal(err)
		}
	}
	for res := range workers {
		e.awaitLeaseGone(res, grants[res].HolderRevision)
	}

	// B: a strictly larger fence, and its state published while A sleeps.
	gb := e.acquire(authority.AcquireRequest{Resource: "seed", Owner: "B"})
	if gb.Generation <= grants["seed"].Generation {
		t.Fatalf("B's generation %d is not above A's %d", gb.Generation, grants["seed"].Generation)
	}
	rb, err := e.bind(gb, false).Publish(ctxT(t, 30*time.Second), op("b", "B's newer result"))
	mustOutcome(t, "B publishes", rb, err, Applied, reasonNone)

	for _, w := range workers {
		w.signal(syscall.SIGCONT)
	}
	results := map[string]workerEvent{}
	for res, w := range workers {
		results[res] = w.next("result")
	}

	seed := results["seed"]
	if seed.Result.Outcome != Stale || seed.Result.Reason != ReasonPointer || !seed.IsStale {
		t.Fatalf("A's resumed publish after B's: %+v (%s); want stale (pointer)", seed.Result, seed.Err)
	}
	if ptr := e.Pointer("seed"); ptr.Version != rb.Version || ptr.Object != rb.Object {
		t.Fatalf("pointer %+v; want B's %s", ptr.Version, rb.Version)
	}
	if !e.Exists(objects["seed"].Key) {
		t.Fatalf("A's object %s is gone; only GC deletes", objects["seed"].Key)
	}
	if h := e.history("seed"); len(h) != 1 || h[0] != rb.Version {
		t.Fatalf("history %v; want only B's %s", h, rb.Version)
	}

	lax := results["lax"]
	if lax.Result.Outcome != Applied {
		t.Fatalf("A's resumed publish with nobody newer: %+v (%s); want applied", lax.Result, lax.Err)
	}
	if ptr := e.Pointer("lax"); ptr.Object != objects["lax"] {
		t.Fatalf("pointer of lax names %+v; want A's object", ptr.Object)
	}

	strict := results["strict"]
	if strict.Result.Outcome != Stale || strict.Result.Reason != ReasonLease {
		t.Fatalf("A's resumed strict publish: %+v (%s); want stale (lease)", strict.Result, strict.Err)
	}
	if ptr := e.Pointer("strict"); !ptr.Version.IsZero() {
		t.Fatalf("pointer of strict moved to %s", ptr.Version)
	}
}

// TestResolveFutureVersion: Resolve raises the seal, and the seal
// never goes down, so a version that no publish can carry — an epoch above
// the domain's or a fence above the resource's generation — must be refused
// without writing. Before the fix one `fencepub resolve --epoch 2^63-1`
// sealed the resource for good: every later grant's publish was stale.
func TestResolveFutureVersion(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "victim"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	p := e.bind(g, false)
	r1, err := p.Publish(ctx, op("k1", "one"))
	mustOutcome(t, "first publish", r1, err, Applied, reasonNone)
	sealBefore := e.sealValue(res)

	for _, v := range []layout.Version{
		{Epoch: layout.MaxNumber, Fence: 1, Seq: 1},
		{Epoch: g.Epoch + 1, Fence: 1, Seq: 1},
		{Epoch: g.Epoch, Fence: layout.MaxNumber, Seq: 1},
		{Epoch: g.Epoch, Fence: g.Generation + 1, Seq: 1},
	} {
		r, err := e.pub.Resolve(ctx, res, "future", v, unsent)
		if !errors.Is(err, fencepub.ErrInvalid) || r.Outcome != "" {
			t.Errorf("resolve %s: %+v, %v; want fencepub.ErrInvalid and no outcome", v, r, err)
		}
		if got := e.sealValue(res); got != sealBefore {
			t.Fatalf("resolve %s moved the seal to %q", v, got)
		}
	}

	// The current term and later grants still publish.
	r2, err := p.Publish(ctx, op("k2", "two"))
	mustOutcome(t, "publish after the refused resolves", r2, err, Applied, reasonNone)
	e.release(g)
	g2 := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w2"})
	r3, err := e.bind(g2, false).Publish(ctx, op("k3", "three"))
	mustOutcome(t, "publish under the next grant", r3, err, Applied, reasonNone)

	// A real unknown attempt of the current term is still settled by a seal.
	r, err := e.pub.Resolve(ctx, res, "k-unknown", g2.Version(5), unsent)
	mustOutcome(t, "resolve of a granted fence", r, err, Stale, ReasonSeal)

	// An attempt of an older epoch is settled without a seal: the epoch
	// compare already refuses it for good.
	if _, err := e.Etcd.Put(ctx, e.NS.EpochKey(), layout.EncodeNumber(g.Epoch+1)); err != nil {
		t.Fatal(err)
	}
	sealBefore = e.sealValue(res)
	r, err = e.pub.Resolve(ctx, res, "k-old", layout.Version{Epoch: g.Epoch, Fence: g2.Generation + 7, Seq: 1}, unsent)
	mustOutcome(t, "resolve of an old-epoch attempt", r, err, Stale, ReasonEpoch)
	if got := e.sealValue(res); got != sealBefore {
		t.Fatalf("resolve of an old-epoch attempt moved the seal to %q", got)
	}
}

// TestSeqBounds: an explicit seq above layout.MaxNumber is bad
// input (fencepub.ErrInvalid, exit 2 in the CLI); the last seq publishes, and a
// publish after it is stale (the seq is never wrapped); a term sealed at its
// last seq (`resource delete --force` of a live holder) is stale (seal) for
// its holder, and a retry of a key applied before the seal is duplicate.
func TestSeqBounds(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	for _, seq := range []uint64{layout.MaxNumber + 1, math.MaxUint64} {
		if _, err := p.PublishSeq(ctx, seq, op("k", "x")); !errors.Is(err, fencepub.ErrInvalid) {
			t.Fatalf("seq %d: %v, want fencepub.ErrInvalid", seq, err)
		}
	}
	r, err := p.PublishSeq(ctx, layout.MaxNumber, op("k-last", "last"))
	mustOutcome(t, "the last seq", r, err, Applied, reasonNone)
	if n := p.nextSeq(); n != layout.MaxNumber {
		t.Fatalf("NextSeq after the last seq: %d", n)
	}
	r, err = p.Publish(ctx, op("k-next", "next"))
	mustOutcome(t, "past the last seq", r, err, Stale, ReasonPointer)
	if ptr := e.Pointer("r"); ptr.Version.Seq != layout.MaxNumber {
		t.Fatalf("pointer %s", ptr.Version)
	}

	g := e.acquire(authority.AcquireRequest{Resource: "sealed", Owner: "w"})
	p = e.bind(g, false)
	first, err := p.Publish(ctx, op("k1", "one"))
	mustOutcome(t, "before the seal", first, err, Applied, reasonNone)
	seal, err := layout.EncodeSeal(layout.Seal{Version: layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: layout.MaxNumber}, Reason: "decommissioned", At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Etcd.Put(ctx, e.NS.SealKey("sealed"), seal); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*Publisher{p, e.bind(g, false)} { // bound before and after the seal
		r, err := q.Publish(ctx, op("k2", "two"))
		mustOutcome(t, "a sealed term", r, err, Stale, ReasonSeal)
		r, err = q.Publish(ctx, op("k1", "one"))
		mustOutcome(t, "a retry after the seal", r, err, Duplicate, reasonNone)
	}
}

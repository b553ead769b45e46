//go:build !unit

package authority

import (
	"errors"
	"github.com/fencepub/fencepub/internal/recovery"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestCorruptAuthorityState writes corrupt values under every key
// a grant reads. Each refusal is typed (fencepub.ErrCorruptState, ErrRequestConflict,
// ErrRolledBack, ErrLeaseLost), never a panic, and mints nothing: the keys
// of the domain are unchanged afterwards.
func TestCorruptAuthorityState(t *testing.T) {
	env := testenv.Get(t)
	cli := env.EtcdClient(t)
	ctx := ctxT(t, time.Minute)
	unchanged := func(a *Authority, what string, f func() error, want error) {
		t.Helper()
		before := keyRevisions(t, cli, a.ns.Root())
		if err := f(); !errors.Is(err, want) {
			t.Errorf("%s: %v; want %v", what, err, want)
		}
		after := keyRevisions(t, cli, a.ns.Root())
		for k, rev := range after {
			if before[k] != rev {
				t.Errorf("%s wrote %s", what, k)
			}
		}
	}
	acquire := func(a *Authority, res, reqID string) func() error {
		return func() error {
			_, err := a.Acquire(ctx, AcquireRequest{Resource: res, Owner: "w", RequestID: reqID, TTL: 10 * time.Second})
			return err
		}
	}

	a := shared(t)
	base := mustAcquire(t, a, AcquireRequest{Resource: "base", Owner: "w"})

	putRaw(t, cli, a.ns.GenerationKey("gen"), "garbage", 0)
	unchanged(a, "acquire over a corrupt generation", acquire(a, "gen", ""), fencepub.ErrCorruptState)
	putRaw(t, cli, a.ns.GenerationKey("gen2"), layout.EncodeNumber(7)+" ", 0)
	unchanged(a, "acquire over a padded generation", acquire(a, "gen2", ""), fencepub.ErrCorruptState)

	// The counter pushed back below a grant record: refused, not re-minted.
	g1 := mustAcquire(t, a, AcquireRequest{Resource: "back", Owner: "w"})
	if err := a.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	g2 := mustAcquire(t, a, AcquireRequest{Resource: "back", Owner: "w"})
	if err := a.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	putRaw(t, cli, a.ns.GenerationKey("back"), layout.EncodeNumber(g1.Generation), 0)
	unchanged(a, "acquire over a counter pushed back", acquire(a, "back", ""), fencepub.ErrCorruptState)

	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, cli, a.ns.HolderKey("held"), "{not json", lease.ID)
	unchanged(a, "acquire under a corrupt holder", acquire(a, "held", ""), fencepub.ErrCorruptState)
	unchanged(a, "inspect of a corrupt holder", func() error { _, err := a.inspect(ctx, "held"); return err }, fencepub.ErrCorruptState)
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if g := mustAcquire(t, a, AcquireRequest{Resource: "held", Owner: "w"}); g.Generation != 1 {
		t.Fatalf("after the corrupt holder's lease ended: %+v", g)
	}

	putRaw(t, cli, a.ns.RequestKey("req", "r1"), "{", 0)
	unchanged(a, "acquire with a corrupt request record", acquire(a, "req", "r1"), fencepub.ErrCorruptState)
	putRaw(t, cli, a.ns.RequestKey("req", "r2"), `{"grant":{"resource":"other","owner":"w","generation":3}}`, 0)
	unchanged(a, "acquire with another resource's request record", acquire(a, "req", "r2"), fencepub.ErrCorruptState)
	putRaw(t, cli, a.ns.RequestKey("req", "r3"), `{"grant":{"resource":"req","owner":"someone","generation":3}}`, 0)
	unchanged(a, "acquire with another owner's request record", acquire(a, "req", "r3"), ErrRequestConflict)

	// A corrupt grant record: the grant can no longer be released by it
	// (the release compares it), nor publish; it is not renewed into more.
	putRaw(t, cli, a.ns.GrantKey("base", base.Generation), "garbage", 0)
	unchanged(a, "release with a corrupt grant record", func() error { return a.Release(ctx, base) }, ErrLeaseLost)
	if st, err := a.inspect(ctx, "base"); err != nil || st.Generation != base.Generation {
		t.Fatalf("inspect %+v, %v", st, err)
	}

	// Domain-wide corruption: a fresh namespace each.
	ae := shared(t)
	ge := mustAcquire(t, ae, AcquireRequest{Resource: "r", Owner: "w"})
	putRaw(t, cli, ae.ns.EpochKey(), "x", 0)
	unchanged(ae, "acquire under a corrupt epoch", acquire(ae, "r2", ""), fencepub.ErrCorruptState)
	unchanged(ae, "epoch", func() error { _, err := ae.currentEpoch(ctx); return err }, fencepub.ErrCorruptState)
	// Renew is lease liveness only (the holder lives exactly as long as its
	// lease): it still succeeds and writes nothing; the corrupt epoch stops
	// the grant's publishes instead (their epoch compare fails).
	unchanged(ae, "renew under a corrupt epoch", func() error { return ae.Renew(ctx, ge) }, nil)

	af := shared(t)
	mustAcquire(t, af, AcquireRequest{Resource: "r", Owner: "w", TTL: 2 * time.Second})
	putRaw(t, cli, af.ns.RollbackKey(), "", 0)
	unchanged(af, "acquire with an empty rollback flag", acquire(af, "r2", ""), ErrRolledBack)
}

// TestCounterBackWithoutGrantRecord pushes a resource's counter
// back AND removes the grant record above it (GC prunes grant records below
// the pointer's fence), so etcd alone cannot see the reuse. The bucket's
// grant marker must: the re-minted token is refused (ErrRolledBack), its
// lease revoked, and the domain refuses grants until recover.
func TestCounterBackWithoutGrantRecord(t *testing.T) {
	a := shared(t)
	cli := a.cli
	ctx := ctxT(t, time.Minute)
	var last Grant
	for range 3 {
		last = mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "w"})
		if err := a.Release(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	putRaw(t, cli, a.ns.GenerationKey("r"), layout.EncodeNumber(last.Generation-1), 0)
	if _, err := cli.Delete(ctx, a.ns.GrantKey("r", last.Generation)); err != nil {
		t.Fatal(err)
	}
	b := newAuthority(t, cli, a.st, a.ns) // another process: no cached counter
	g, err := b.Acquire(ctx, AcquireRequest{Resource: "r", Owner: "intruder", TTL: 10 * time.Second})
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("re-minting generation %d: %+v, %v; want ErrRolledBack", last.Generation, g, err)
	}
	if _, ok, err := b.Holder(ctx, "r"); err != nil || ok {
		t.Fatalf("the re-minted grant still holds the resource (%v, %v)", ok, err)
	}
	if _, err := b.Acquire(ctx, AcquireRequest{Resource: "other", Owner: "w", TTL: 10 * time.Second}); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("another resource before recover: %v; want ErrRolledBack", err)
	}
}

// TestRecoverCorruptHolder: a holder record that does not decode,
// and one attached to no lease (written out of band: it would never
// expire). Recover switches the epoch first and then ends the restored
// holders; before the fix a corrupt holder made it fail after the switch —
// the lease kept blocking its resource and every re-run burnt another
// epoch. Both holders are now ended and reported.
func TestRecoverCorruptHolder(t *testing.T) {
	a := shared(t)
	cli := a.cli
	ctx := ctxT(t, time.Minute)
	mustAcquire(t, a, AcquireRequest{Resource: "good", Owner: "w", TTL: 60 * time.Second})
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, cli, a.ns.HolderKey("corrupt"), "{not json", lease.ID)
	putRaw(t, cli, a.ns.HolderKey("leaseless"), `{"resource":"leaseless","owner":"ghost","epoch":1,"generation":1}`, 0)

	rep, err := a.recoverDomain(ctx, recovery.Options{})
	if err != nil {
		t.Fatalf("recover with corrupt holders: %v", err)
	}
	got := map[string]bool{}
	for _, h := range rep.Revoked {
		got[h.Resource] = true
	}
	for _, res := range []string{"good", "corrupt", "leaseless"} {
		if !got[res] {
			t.Errorf("recover did not report the holder of %q: %+v", res, rep.Revoked)
		}
		if n := countKeys(t, cli, a.ns.HolderKey(res)); n != 0 {
			t.Errorf("the holder of %q survived recover", res)
		}
	}
	// Every resource is free in the new epoch.
	for _, res := range []string{"good", "corrupt", "leaseless"} {
		if g := mustAcquire(t, a, AcquireRequest{Resource: res, Owner: "w2"}); g.Epoch != rep.NewEpoch {
			t.Errorf("%s: grant in epoch %d; want %d", res, g.Epoch, rep.NewEpoch)
		}
	}
}

// TestRecoverCorruptEpoch: an epoch key that does not decode
// stops every grant (fencepub.ErrCorruptState) and every publish (stale, epoch) of
// the domain. Recover is its repair: before the fix it refused with
// fencepub.ErrCorruptState and the operator had to pick an epoch by hand. It now
// moves the domain to an epoch above every marker, and grants resume above
// every earlier grant.
func TestRecoverCorruptEpoch(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, time.Minute)
	before := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "w", TTL: 2 * time.Second})
	putRaw(t, a.cli, a.ns.EpochKey(), "garbage", 0)
	if _, err := a.Acquire(ctx, AcquireRequest{Resource: "r2", Owner: "w", TTL: 2 * time.Second}); !errors.Is(err, fencepub.ErrCorruptState) {
		t.Fatalf("acquire under a corrupt epoch: %v", err)
	}
	rep, err := a.recoverDomain(ctx, recovery.Options{})
	if err != nil {
		t.Fatalf("recover of a corrupt epoch: %v", err)
	}
	if rep.CorruptEpoch != "garbage" || rep.NewEpoch <= before.Epoch || rep.NewEpoch <= rep.Highest.EpochMarker {
		t.Fatalf("report %+v", rep)
	}
	if e, err := a.currentEpoch(ctx); err != nil || e != rep.NewEpoch {
		t.Fatalf("epoch %d, %v; want %d", e, err, rep.NewEpoch)
	}
	after := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "w2"})
	if after.Epoch != rep.NewEpoch || after.Generation <= before.Generation {
		t.Fatalf("grant after recover %+v; want above %+v", after, before)
	}
	if cmpHolds(t, a, before.epochCmp(a.ns)) {
		t.Fatal("the old grant's epoch still compares equal")
	}
}

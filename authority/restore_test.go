//go:build !unit

package authority

import (
	"errors"
	"github.com/fencepub/fencepub/internal/recovery"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRestoreRollback restores etcd from an old snapshot with etcdutl, once
// plainly and once with --bump-revision --mark-compacted, and checks
// DESIGN.md invariant 3: before recover the rolled-back counter is detected
// and no token is handed out twice; after recover every grant compares
// greater than every grant before the restore, the restored leases are
// revoked, and the restored pointers and the objects above them are
// recorded and reported.
func TestRestoreRollback(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testRestoreRollback(t, 0) })
	t.Run("bump-revision-mark-compacted", func(t *testing.T) { testRestoreRollback(t, 1_000_000) })
}

func testRestoreRollback(t *testing.T, bump uint64) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{})
	cli := testenv.EtcdClient(t, e)
	st := testenv.Get(t).Store(t)
	ns := testenv.Namespace(t)
	a := newAuthority(t, cli, st, ns)
	ctx := ctxT(t, 2*time.Minute)

	// publish stands in for the publisher: an object under the
	// grant's version, then the pointer swapped to it.
	publish := func(g Grant) layout.Version {
		t.Helper()
		v := g.Version(1)
		key := ns.ObjectKey(g.Resource, v, layout.NewNonce())
		if _, err := objstore.PutSmallCreateOnly(ctx, st, key, []byte(v.String()), "text/plain"); err != nil {
			t.Fatal(err)
		}
		val, err := layout.EncodePointer(layout.Pointer{Version: v, Object: layout.Object{Bucket: st.Bucket, Key: key}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, ns.PointerKey(g.Resource), val); err != nil {
			t.Fatal(err)
		}
		return v
	}
	acquireRelease := func(res string) Grant {
		t.Helper()
		g := mustAcquire(t, a, AcquireRequest{Resource: res, Owner: owner("w")})
		publish(g)
		if err := a.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		return g
	}

	// Before the snapshot: r published with generation 2; h held with a
	// long lease (the snapshot will bring it back).
	var before []Grant
	before = append(before, acquireRelease("r"), acquireRelease("r"))
	restoredPointer := before[1].Version(1)
	gh := mustAcquire(t, a, AcquireRequest{Resource: "h", Owner: owner("old-holder"), TTL: 60 * time.Second})
	before = append(before, gh)
	snap := filepath.Join(t.TempDir(), "snap.db")
	if err := e.Members[0].SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	// After the snapshot: two more grants and publishes of r (the restore
	// will lose them), and h released.
	g3, g4 := acquireRelease("r"), acquireRelease("r")
	before = append(before, g3, g4)
	if err := a.Release(ctx, gh); err != nil {
		t.Fatal(err)
	}
	pre, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	preRestoreRev := pre.Header.Revision

	if err := e.RestoreSnapshot(ctx, snap, devstack.RestoreOptions{BumpRevision: bump}); err != nil {
		t.Fatal(err)
	}
	if gen := generation(t, a, "r"); gen != 2 {
		t.Fatalf("restored generation of r = %d; want 2 (the snapshot's)", gen)
	}
	if bump > 0 {
		// Watchers from before the restore are told to re-sync.
		wctx := ctxT(t, 10*time.Second)
		wr := <-cli.Watch(wctx, ns.PointerKey("r"), clientv3.WithRev(preRestoreRev))
		if !errors.Is(wr.Err(), rpcCompacted) {
			t.Fatalf("watch from a pre-restore revision: %v; want a compaction error", wr.Err())
		}
	}

	// Before recover: the counter went back to 2, so the next grant would
	// reuse generation 3. The bucket's marker shows it; nothing is handed
	// out and the domain refuses every grant from then on.
	for _, b := range []*Authority{a, newAuthority(t, cli, st, ns)} {
		g, err := b.Acquire(ctx, AcquireRequest{Resource: "r", Owner: owner("new"), TTL: 5 * time.Second})
		if !errors.Is(err, ErrRolledBack) || g != (Grant{}) {
			t.Fatalf("acquire after the restore = %+v, %v; want ErrRolledBack and no grant", g, err)
		}
	}
	if _, ok, _ := a.Holder(ctx, "r"); ok {
		t.Fatal("the refused grant still holds r")
	}
	if _, err := a.Acquire(ctx, AcquireRequest{Resource: "fresh", Owner: owner("new"), TTL: 5 * time.Second}); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("acquire of another resource: %v; want ErrRolledBack (the domain refuses until recover)", err)
	}
	if gen := generation(t, a, "fresh"); gen != 0 {
		t.Fatalf("the refused grant minted generation %d of another resource", gen)
	}
	if !cmpHolds(t, a, gh.holderCmp(a.ns)) {
		t.Fatal("the snapshot's holder of h should be back before recover")
	}

	// A dry run changes nothing.
	dry, err := a.recoverDomain(ctx, recovery.Options{DryRun: true})
	if err != nil || dry.NewEpoch <= dry.OldEpoch || len(dry.Revoked) != 0 {
		t.Fatalf("dry run = %+v, %v", dry, err)
	}
	if ep, _ := a.currentEpoch(ctx); ep != dry.OldEpoch {
		t.Fatalf("dry run changed the epoch to %d", ep)
	}

	rep, err := a.recoverDomain(ctx, recovery.Options{})
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	t.Logf("recover: epoch %d -> %d, highest seen %+v, revoked %d, rollback flag %q", rep.OldEpoch, rep.NewEpoch, rep.Highest, len(rep.Revoked), rep.RollbackFlag)
	if rep.OldEpoch != gh.Epoch || rep.NewEpoch <= rep.OldEpoch || rep.RollbackFlag == "" {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Revoked) != 1 || rep.Revoked[0].Resource != "h" || rep.Revoked[0].Owner != gh.Owner {
		t.Fatalf("revoked %+v; want the restored holder of h", rep.Revoked)
	}
	var rr *recovery.ResourceRecovery
	for i := range rep.Resources {
		if rep.Resources[i].Resource == "r" {
			rr = &rep.Resources[i]
		}
	}
	if rr == nil || !rr.HasPointer || rr.RestoredPointer != restoredPointer || len(rr.Above) != 2 ||
		rr.Above[0].Version != g3.Version(1) || rr.Above[1].Version != g4.Version(1) {
		t.Fatalf("resource report %+v; want restored pointer %v and the lost publishes of generations 3 and 4", rr, restoredPointer)
	}
	if len(rr.Recorded) != 1 || rr.Recorded[0] != rep.OldEpoch {
		t.Fatalf("recorded epochs %v; want [%d]", rr.Recorded, rep.OldEpoch)
	}
	resp, err := cli.Get(ctx, ns.RestoredKey("r", rep.OldEpoch))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("restored record: %+v, %v", resp, err)
	}
	if p, err := layout.DecodePointer(resp.Kvs[0].Value); err != nil || p.Version != restoredPointer {
		t.Fatalf("restored record = %+v, %v; want pointer %v", p, err, restoredPointer)
	}

	// After recover: restored leases are gone, the old grants cannot renew
	// or satisfy the epoch compare, and every new grant compares greater
	// than every grant before the restore, epoch first.
	if cmpHolds(t, a, gh.holderCmp(a.ns)) {
		t.Fatal("the restored holder of h survived recover")
	}
	if ttl, err := cli.TimeToLive(ctx, gh.LeaseID); err != nil || ttl.TTL != -1 {
		t.Fatalf("restored lease: %+v, %v; want it revoked", ttl, err)
	}
	if err := a.Renew(ctx, gh); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew of the restored grant: %v", err)
	}
	for _, g := range before {
		if cmpHolds(t, a, g.epochCmp(a.ns)) {
			t.Fatalf("grant %+v still matches the epoch", g)
		}
	}
	for _, res := range []string{"r", "h", "fresh"} {
		g := mustAcquire(t, a, AcquireRequest{Resource: res, Owner: owner("new")})
		for _, old := range before {
			if old.Version(layout.MaxNumber).Compare(g.Version(1)) >= 0 {
				t.Fatalf("new grant %d.%d of %q does not compare above old grant %d.%d", g.Epoch, g.Generation, res, old.Epoch, old.Generation)
			}
		}
		if g.Epoch != rep.NewEpoch {
			t.Fatalf("new grant in epoch %d; want %d", g.Epoch, rep.NewEpoch)
		}
	}
	// Recovering again is harmless: a new epoch, nothing lost twice.
	rep2, err := a.recoverDomain(ctx, recovery.Options{})
	if err != nil || rep2.NewEpoch <= rep.NewEpoch || rep2.RollbackFlag != "" {
		t.Fatalf("second recover = %+v, %v", rep2, err)
	}
}

// TestRollbackDetectedAfterPruning: markers are pruned to a bounded number,
// and a counter that went back below every retained marker is still
// detected (the newest marker survives pruning); recover then clears it.
// Without Wait the listing runs before the grant transaction, with Wait
// after it (DESIGN.md "Rollback detection"): both catch it.
func TestRollbackDetectedAfterPruning(t *testing.T) {
	t.Run("no-wait", func(t *testing.T) { testRollbackDetectedAfterPruning(t, false) })
	t.Run("wait", func(t *testing.T) { testRollbackDetectedAfterPruning(t, true) })
}

func testRollbackDetectedAfterPruning(t *testing.T, wait bool) {
	a := shared(t, func(c *Config) { c.MarkerKeep = 2 })
	ctx := ctxT(t, time.Minute)
	for range 12 {
		g := mustAcquire(t, a, AcquireRequest{Resource: "m", Owner: owner("w")})
		if err := a.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	markers := listObjects(t, a.st, a.ns.GrantMarkersPrefix("m"))
	if len(markers) > 2*2+1 {
		t.Fatalf("%d grant markers kept with MarkerKeep 2: %v", len(markers), markers)
	}
	// Simulate a restore that rolled the counter back to 1 (with the grant
	// records above it, as a snapshot would): generation 2's marker is long
	// pruned.
	if _, err := a.cli.Put(ctx, a.ns.GenerationKey("m"), layout.EncodeNumber(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli.Delete(ctx, a.ns.GrantKey("m", 2), clientv3.WithRange(clientv3.GetPrefixRangeEnd(a.ns.GrantsPrefix("m")))); err != nil {
		t.Fatal(err)
	}
	a = newAuthority(t, a.cli, a.st, a.ns, func(c *Config) { c.MarkerKeep = 2 }) // a fresh process: no cached counter
	if _, err := a.Acquire(ctx, AcquireRequest{Resource: "m", Owner: owner("w"), TTL: 5 * time.Second, Wait: wait}); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("acquire below the pruned markers: %v; want ErrRolledBack", err)
	}
	rep, err := a.recoverDomain(ctx, recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := mustAcquire(t, a, AcquireRequest{Resource: "m", Owner: owner("w")})
	if g.Epoch != rep.NewEpoch {
		t.Fatalf("grant after recover in epoch %d; want %d", g.Epoch, rep.NewEpoch)
	}
}

// rpcCompacted is etcd's "required revision has been compacted".
var rpcCompacted = rpctypes.ErrCompacted

// TestRestoreUndoesRecover: the snapshot predates a recover, so the restore
// brings back the old epoch and loses a whole epoch of grants and
// publishes. The next acquire sees the lost epoch's marker above it; recover
// moves above the lost epoch and records the restored pointer for both the
// restored and the lost epoch, so GC quarantines the lost epoch's objects.
func TestRestoreUndoesRecover(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{})
	cli := testenv.EtcdClient(t, e)
	st := testenv.Get(t).Store(t)
	ns := testenv.Namespace(t)
	a := newAuthority(t, cli, st, ns)
	ctx := ctxT(t, 2*time.Minute)
	publish := func(g Grant) {
		t.Helper()
		v := g.Version(1)
		key := ns.ObjectKey(g.Resource, v, layout.NewNonce())
		if _, err := objstore.PutSmallCreateOnly(ctx, st, key, []byte("x"), "text/plain"); err != nil {
			t.Fatal(err)
		}
		val, _ := layout.EncodePointer(layout.Pointer{Version: v, Object: layout.Object{Key: key}})
		if _, err := cli.Put(ctx, ns.PointerKey(g.Resource), val); err != nil {
			t.Fatal(err)
		}
	}
	g1 := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: owner("w")})
	publish(g1)
	if err := a.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snap.db")
	if err := e.Members[0].SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := a.recoverDomain(ctx, recovery.Options{}); err != nil {
		t.Fatal(err)
	}
	g2 := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: owner("w")})
	publish(g2)
	if g2.Epoch != 2 || g2.Generation != 2 {
		t.Fatalf("grant after the first recover %d.%d; want 2.2", g2.Epoch, g2.Generation)
	}
	if err := e.RestoreSnapshot(ctx, snap, devstack.RestoreOptions{BumpRevision: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	if ep, err := a.currentEpoch(ctx); err != nil || ep != 1 {
		t.Fatalf("restored epoch %d, %v; want 1", ep, err)
	}
	if _, err := a.Acquire(ctx, AcquireRequest{Resource: "r", Owner: owner("w"), TTL: 5 * time.Second}); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("acquire after a restore that undid a recover: %v; want ErrRolledBack", err)
	}
	rep, err := a.recoverDomain(ctx, recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OldEpoch != 1 || rep.NewEpoch != 3 || rep.Highest.EpochMarker != 2 {
		t.Fatalf("recover %+v; want epoch 1 -> 3 (above the lost epoch 2)", rep)
	}
	if len(rep.Resources) != 1 || len(rep.Resources[0].Above) != 1 || rep.Resources[0].Above[0].Version != g2.Version(1) ||
		!slices.Equal(rep.Resources[0].Recorded, []uint64{1, 2}) {
		t.Fatalf("resources %+v; want the lost epoch-2 publish above pointer %v, recorded for epochs 1 and 2", rep.Resources, g1.Version(1))
	}
	for _, ep := range []uint64{1, 2} {
		resp, err := cli.Get(ctx, ns.RestoredKey("r", ep))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("restored record for epoch %d: %+v, %v", ep, resp, err)
		}
		if v, err := layout.DecodeVersion(string(resp.Kvs[0].Value)); err != nil || v != g1.Version(1) {
			t.Fatalf("restored record for epoch %d = %v, %v; want %v", ep, v, err, g1.Version(1))
		}
	}
	g3 := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: owner("w")})
	if g2.Version(layout.MaxNumber).Compare(g3.Version(1)) >= 0 {
		t.Fatalf("grant %d.%d after recover is not above the lost grant %d.%d", g3.Epoch, g3.Generation, g2.Epoch, g2.Generation)
	}
}

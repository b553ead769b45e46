//go:build !unit

package authority

import (
	"errors"
	"github.com/fencepub/fencepub/internal/recovery"
	"slices"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/ownership"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestInitRefusesForeignHistory: an etcd with no epoch for the domain never
// initialises itself over a bucket that holds anything under the domain's
// root (DESIGN.md invariant 9): initDomain, Acquire, checkHistory and a plain
// Recover return a *foreignHistoryError naming what was found and write
// nothing to etcd or the bucket.
func TestInitRefusesForeignHistory(t *testing.T) {
	env := testenv.Get(t)
	st := env.Store(t)
	ctx := ctxT(t, time.Minute)
	cases := []struct {
		name    string
		fill    func(t *testing.T, ns layout.Namespace) // what the bucket holds
		wantDep bool
		epoch   uint64
	}{
		{name: "another etcd's live history", wantDep: true, epoch: 1, fill: func(t *testing.T, ns layout.Namespace) {
			mustAcquire(t, newAuthority(t, env.EtcdClient(t), st, ns), AcquireRequest{Resource: "r", Owner: owner("w")})
		}},
		{name: "epoch markers only", epoch: 7, fill: func(t *testing.T, ns layout.Namespace) {
			a := newAuthority(t, env.EtcdClient(t), st, ns)
			for _, e := range []uint64{3, 7} {
				if ours, err := a.reserveEpoch(ctx, epochMarker{Epoch: e, Deployment: "old", Reason: "recover", Nonce: "x"}); err != nil || !ours {
					t.Fatal(ours, err)
				}
			}
		}},
		{name: "an object only", fill: func(t *testing.T, ns layout.Namespace) {
			key := ns.ObjectKey("r", layout.Version{Epoch: 1, Fence: 1, Seq: 1}, layout.NewNonce())
			if _, err := objstore.PutSmallCreateOnly(ctx, st, key, []byte("x"), "text/plain"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	fresh := testenv.EtcdClient(t, testenv.StartEtcd(t, devstack.EtcdOptions{}))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := testenv.Namespace(t)
			c.fill(t, ns)
			before := listObjects(t, st, ns.Root())
			a := newAuthority(t, fresh, st, ns)
			check := func(what string, err error) {
				t.Helper()
				var fh *foreignHistoryError
				if !errors.Is(err, ErrForeignHistory) || !errors.As(err, &fh) {
					t.Fatalf("%s: %v; want ErrForeignHistory", what, err)
				}
				if fh.Root != ns.Root() || (fh.DeploymentID != "") != c.wantDep || fh.HighestEpoch != c.epoch || fh.Found == "" {
					t.Fatalf("%s: %+v", what, fh)
				}
			}
			_, err := a.initDomain(ctx)
			check("init", err)
			_, err = a.Acquire(ctx, AcquireRequest{Resource: "r", Owner: owner("w2"), TTL: 5 * time.Second})
			check("acquire", err)
			check("check history", a.checkHistory(ctx))
			_, err = a.recoverDomain(ctx, recovery.Options{})
			check("recover without --from-bucket", err)
			if n := countKeys(t, fresh, ns.Root()); n != 0 {
				t.Fatalf("the refusals wrote %d etcd keys", n)
			}
			if after := listObjects(t, st, ns.Root()); !slices.Equal(before, after) {
				t.Fatalf("the refusals changed the bucket:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestInitClaims: an init of this etcd interrupted after it wrote the
// ownership marker completes on the next run; an init that loses the
// marker to another etcd's withdraws its claim on the deployment key.
func TestInitClaims(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, time.Minute)
	if _, err := a.cli.Put(ctx, a.ns.DeploymentKey(), "dep-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.putCreateOnly(ctx, a.ns.OwnershipObject(), ownership.Marker{DeploymentID: "dep-1"}); err != nil {
		t.Fatal(err)
	}
	if d, err := a.initDomain(ctx); err != nil || d != (domain{Epoch: 1, DeploymentID: "dep-1"}) {
		t.Fatalf("init after an interrupted one = %+v, %v; want epoch 1 of dep-1", d, err)
	}

	b := shared(t)
	if _, err := b.putCreateOnly(ctx, b.ns.OwnershipObject(), ownership.Marker{DeploymentID: "other"}); err != nil {
		t.Fatal(err)
	}
	// The marker appeared after the bucket was found empty.
	dep, err := b.claimOwnership(ctx)
	var fh *foreignHistoryError
	if !errors.As(err, &fh) || fh.DeploymentID != "other" || dep != "" {
		t.Fatalf("claim lost to another marker = %q, %v; want ErrForeignHistory naming it", dep, err)
	}
	if n := countKeys(t, b.cli, b.ns.Root()); n != 0 {
		t.Fatalf("the lost claim left %d etcd keys", n)
	}
}

// TestRecoverFromBucket: Recover with FromBucket on an empty etcd adopts the
// bucket's deployment, reserves an epoch above everything, quarantines every
// object (zero restored pointer per epoch found) and records the new epoch;
// a dry run changes nothing; it is refused once etcd holds an epoch.
func TestRecoverFromBucket(t *testing.T) {
	env := testenv.Get(t)
	st := env.Store(t)
	ns := testenv.Namespace(t)
	ctx := ctxT(t, time.Minute)
	old := newAuthority(t, env.EtcdClient(t), st, ns)
	d1, err := old.initDomain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, res := range []string{"r", "r", "q"} {
		g := mustAcquire(t, old, AcquireRequest{Resource: res, Owner: owner("w")})
		key := ns.ObjectKey(res, g.Version(1), layout.NewNonce())
		if _, err := objstore.PutSmallCreateOnly(ctx, st, key, []byte("x"), "text/plain"); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		if err := old.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	cli := testenv.EtcdClient(t, testenv.StartEtcd(t, devstack.EtcdOptions{}))
	a := newAuthority(t, cli, st, ns)
	before := listObjects(t, st, ns.Root())
	dry, err := a.recoverDomain(ctx, recovery.Options{FromBucket: true, DryRun: true})
	if err != nil || !dry.FromBucket || dry.NewEpoch != 2 || len(dry.Resources) != 2 {
		t.Fatalf("dry run = %+v, %v", dry, err)
	}
	if countKeys(t, cli, ns.Root()) != 0 || !slices.Equal(before, listObjects(t, st, ns.Root())) {
		t.Fatal("the dry run changed something")
	}
	rep, err := a.recoverDomain(ctx, recovery.Options{FromBucket: true})
	if err != nil || !rep.FromBucket || rep.DeploymentID != d1.DeploymentID || rep.OldEpoch != 0 || rep.NewEpoch != 2 {
		t.Fatalf("recover --from-bucket = %+v, %v; want deployment %s moved to epoch 2", rep, err, d1.DeploymentID)
	}
	var found []string
	for _, r := range rep.Resources {
		if r.HasPointer || !slices.Equal(r.Recorded, []uint64{1}) {
			t.Fatalf("resource %+v; want no pointer and epoch 1 recorded", r)
		}
		for _, o := range r.Above {
			found = append(found, o.Key)
		}
		resp, err := cli.Get(ctx, ns.RestoredKey(r.Resource, 1))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("restored record of %s: %+v, %v", r.Resource, resp, err)
		}
		if p, err := layout.DecodePointer(resp.Kvs[0].Value); err != nil || p.Version != (layout.Version{}) {
			t.Fatalf("restored record of %s = %+v, %v; want the zero pointer", r.Resource, p, err)
		}
	}
	slices.Sort(found)
	slices.Sort(keys)
	if !slices.Equal(found, keys) {
		t.Fatalf("quarantined %v; want every object %v", found, keys)
	}
	if countKeys(t, cli, ns.EpochRecord(2)) != 1 || countKeys(t, cli, ns.EpochRecord(1)) != 0 {
		t.Fatal("want the epoch record of epoch 2 only: epoch 1 was never issued by this etcd")
	}
	if e, err := a.currentEpoch(ctx); err != nil || e != 2 {
		t.Fatalf("epoch %d, %v; want 2", e, err)
	}
	if _, err := a.recoverDomain(ctx, recovery.Options{FromBucket: true}); !errors.Is(err, ErrInitialized) {
		t.Fatalf("second --from-bucket: %v; want ErrInitialized", err)
	}
	if g := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: owner("w")}); g.Epoch != 2 {
		t.Fatalf("grant after the take-over in epoch %d; want 2", g.Epoch)
	}
}

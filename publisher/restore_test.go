//go:build !unit

package publisher

import (
	"github.com/fencepub/fencepub/internal/recovery"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestRestoreLostSkipsResolvedAttempt: an attempt whose transaction never
// reached etcd, which Resolve then settled as never applied, stays never
// applied after etcd is restored from a snapshot that predates the seal:
// RestoreLost republishes the lost publish below it, not the attempt
// (DESIGN.md invariant 8). Without the settled marker in the bucket the
// attempt, the newest object above the restored pointer, came back.
func TestRestoreLostSkipsResolvedAttempt(t *testing.T) {
	etcd := testenv.StartEtcd(t, devstack.EtcdOptions{})
	d := testenv.NewDomain(t)
	d.Etcd = testenv.EtcdClient(t, etcd)
	e := newDomainEnv(t, d, nil)
	ctx := ctxT(t, 2*time.Minute)
	const res = "r"

	g1 := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w1"})
	r, err := e.bind(g1, false).Publish(ctx, op("k1", "version one"))
	mustOutcome(t, "publish k1", r, err, Applied, reasonNone)
	e.release(g1)
	snap := filepath.Join(t.TempDir(), "snap.db")
	if err := etcd.Members[0].SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}

	// After the snapshot: a publish the restore loses, then an attempt
	// whose object is written and whose transaction is never sent.
	p2 := e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w1"}), false)
	lost, err := p2.Publish(ctx, op("k2", "version two"))
	mustOutcome(t, "publish k2", lost, err, Applied, reasonNone)
	v := p2.take(0).v
	o, err := normalize(op("k3", "never applied"))
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := e.pub.writeObject(ctx, e.NS.ObjectKey(res, v, layout.NewNonce()), o.Body, bodySize(o.Body, o.Size), o.ContentType, o.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	settled, err := e.pub.Resolve(ctx, res, "k3", v, AttemptID{ObjectKey: obj.Key})
	mustOutcome(t, "resolve k3", settled, err, Stale, ReasonSeal)
	// Resolving it again finds the marker there and answers the same.
	again, err := e.pub.Resolve(ctx, res, "k3", v, AttemptID{ObjectKey: obj.Key})
	mustOutcome(t, "resolve k3 again", again, err, Stale, ReasonSeal)

	if err := etcd.RestoreSnapshot(ctx, snap, devstack.RestoreOptions{BumpRevision: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	rep, err := recovery.Recover(ctx, e.auth, recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := e.pub.restoreLost(ctx, e.auth, rep)
	if len(out) != 1 || out[0].Error != "" || out[0].Result.(Result).Outcome != Applied {
		t.Fatalf("RestoreLost: %+v; want one republish applied", out)
	}
	if out[0].From != lost.Version {
		t.Fatalf("RestoreLost republished %s; want the lost publish %s, not the attempt %s settled as never applied", out[0].From, lost.Version, v)
	}
	if got := string(e.readObject(out[0].Result.(Result).Object.Key)); got != "version two" {
		t.Fatalf("the republished object holds %q, want %q", got, "version two")
	}
	if !strings.HasPrefix(out[0].Key, e.NS.ObjectsPrefix(res)) {
		t.Fatalf("republished from %q", out[0].Key)
	}
}

//go:build !unit

package authority

import (
	"errors"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Release seals the finished term (DESIGN.md "Leftovers of finished work").

// initResource creates res's pointer and seal with zero versions, as the
// publisher's resource init does.
func initResource(t *testing.T, a *Authority, res string) {
	t.Helper()
	ptr, err := layout.EncodePointer(layout.Pointer{})
	if err != nil {
		t.Fatal(err)
	}
	seal, err := layout.EncodeSeal(layout.Seal{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.cli.Txn(ctxT(t, 10*time.Second)).Then(clientv3.OpPut(a.ns.PointerKey(res), ptr), clientv3.OpPut(a.ns.SealKey(res), seal)).Commit(); err != nil {
		t.Fatal(err)
	}
}

// sealOf reads res's seal and its etcd key version (0: absent).
func sealOf(t *testing.T, a *Authority, res string) (layout.Seal, int64) {
	t.Helper()
	resp, err := a.cli.Get(ctxT(t, 10*time.Second), a.ns.SealKey(res))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return layout.Seal{}, 0
	}
	s, err := layout.DecodeSeal(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return s, resp.Kvs[0].Version
}

// Release raises the seal to (epoch, fence, max) and revokes the lease; a
// second release is ErrLeaseLost and writes nothing; a grant whose lease
// expired is still sealed by its release; the next grant's versions stay
// above every such seal; reserved and never initialised resources get no
// seal.
func TestReleaseSealsTerm(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, time.Minute)
	if _, err := a.initDomain(ctx); err != nil {
		t.Fatal(err)
	}
	initResource(t, a, "r")
	g1 := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: owner("a")})
	if err := a.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	s, ver := sealOf(t, a, "r")
	if s.Version != g1.Version(layout.MaxNumber) || s.Reason != sealReasonReleased || s.At.IsZero() {
		t.Fatalf("seal after release %+v; want %s, reason %q", s, g1.Version(layout.MaxNumber), sealReasonReleased)
	}
	if _, ok, err := a.Holder(ctx, "r"); ok || err != nil {
		t.Fatalf("holder after release: %v %v", ok, err)
	}
	if err := a.Release(ctx, g1); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("second release: %v; want ErrLeaseLost", err)
	}
	if _, v := sealOf(t, a, "r"); v != ver {
		t.Fatalf("second release rewrote the seal (key version %d -> %d)", ver, v)
	}

	// A grant whose lease ended without a release (expiry): the seal stays
	// below its versions until its late release, which seals it too.
	g2 := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: owner("b")})
	if s, _ := sealOf(t, a, "r"); s.Version.Compare(g2.Version(1)) >= 0 {
		t.Fatalf("seal %s is not below the next grant's first version %s", s.Version, g2.Version(1))
	}
	if _, err := a.cli.Revoke(ctx, g2.LeaseID); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, g2); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("release after expiry: %v; want ErrLeaseLost", err)
	}
	if s, _ := sealOf(t, a, "r"); s.Version != g2.Version(layout.MaxNumber) {
		t.Fatalf("seal after a late release %s; want %s", s.Version, g2.Version(layout.MaxNumber))
	}
	// Another owner cannot seal g3's term with a grant naming it.
	g3 := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: owner("c")})
	forged := g3
	forged.Owner = owner("mallory")
	if err := a.Release(ctx, forged); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("release of a forged grant: %v; want ErrLeaseLost", err)
	}
	if s, _ := sealOf(t, a, "r"); s.Version != g2.Version(layout.MaxNumber) {
		t.Fatalf("a forged release moved the seal to %s", s.Version)
	}
	if err := a.Renew(ctx, g3); err != nil {
		t.Fatalf("the live grant after a forged release: %v", err)
	}

	// No pointer and seal: nothing to seal, nothing created.
	g := mustAcquire(t, a, AcquireRequest{Resource: "fresh", Owner: owner("a")})
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, v := sealOf(t, a, "fresh"); v != 0 {
		t.Fatal("release created a seal on a resource never initialised")
	}
	rctx := layout.WithReservedNames(ctx)
	gr, err := a.Acquire(rctx, AcquireRequest{Resource: "_lease", Owner: owner("gc"), TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(rctx, gr); err != nil {
		t.Fatal(err)
	}
	if _, v := sealOf(t, a, "_lease"); v != 0 {
		t.Fatal("release wrote a seal for a reserved resource")
	}
}

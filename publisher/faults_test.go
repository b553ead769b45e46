//go:build !unit

package publisher

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// proxied returns a fault proxy in front of the shared etcd and a publisher
// Client whose etcd client goes through it (RequestTimeout 500 ms, metrics
// in reg).
func (e *env) proxied(reg prometheus.Registerer) (*faultproxy.Proxy, *Client) {
	e.t.Helper()
	px, cli := testenv.Get(e.t).EtcdProxy(e.t)
	return px, e.client(cli, func(c *Config) {
		c.RequestTimeout = 500 * time.Millisecond
		c.Registerer = reg
	})
}

// A publish whose transaction reaches etcd and is applied, but whose response
// is lost, is re-sent unchanged; the re-send finds its own op record and
// reports applied. Exactly one effect: one history entry, one op record
// written once.
func TestLostResponseAppliesExactlyOnce(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, c := e.proxied(nil)
	g := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"})
	p, err := c.Bind(ctx, GrantTerm(g, false)) // the resource init goes through the proxy first
	if err != nil {
		t.Fatal(err)
	}
	fired := px.DropResponse(1, 300*time.Millisecond)
	r, err := p.Publish(ctx, op("k-once", "exactly once"))
	mustOutcome(t, "publish with a lost response", r, err, Applied, reasonNone)
	select {
	case <-fired:
	default:
		t.Fatal("the proxy never dropped a response")
	}
	if st := px.Stats(); r.Attempts < 2 || st.DroppedDown == 0 || st.Resets == 0 {
		t.Fatalf("attempts %d, proxy %+v: the first response was not lost", r.Attempts, st)
	}
	if got := e.history("r"); len(got) != 1 || got[0] != r.Version {
		t.Fatalf("history %v, want exactly %s", got, r.Version)
	}
	resp, err := e.Etcd.Get(ctx, e.NS.OpKey("r", "k-once"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 {
		t.Fatalf("op record %+v, %v: want one record written once", resp, err)
	}
	if ptr := e.Pointer("r"); ptr.Version != r.Version || ptr.Object != r.Object {
		t.Fatalf("pointer %+v", ptr)
	}
	t.Logf("applied after %d sends; proxy %+v", r.Attempts, px.Stats())
}

// When no answer comes before the deadline the outcome is unknown, and
// Resolve settles it: applied if the transaction got through, otherwise the
// seal is raised so that the very same transaction can never apply later.
func TestUnknownOutcomeResolved(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	reg := prometheus.NewRegistry()
	px, c := e.proxied(reg)
	const res = "r"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	p, err := c.Bind(ctx, GrantTerm(g, false))
	if err != nil {
		t.Fatal(err)
	}
	unknown := func(faults faultproxy.Faults, key string) Result {
		t.Helper()
		px.Set(faults)
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := p.Publish(pctx, op(key, "body of "+key))
		mustOutcome(t, key, r, err, Unknown, reasonNone)
		if r.Attempts < 2 || r.Pointer != nil {
			t.Fatalf("%s: %+v: want several sends and no pointer", key, r)
		}
		px.Set(faultproxy.Faults{})
		px.ResetAll() // dropped bytes desynchronised HTTP/2: reconnect
		return r
	}

	// Requests delivered, responses lost: the publish was applied.
	r1 := unknown(faultproxy.Faults{DropDownstream: true}, "k-delivered")
	got, err := e.pub.Resolve(ctx, res, "k-delivered", r1.Version, r1.AttemptID())
	mustOutcome(t, "resolve delivered", got, err, Applied, reasonNone)
	if got.Object != r1.Object || got.Digest != r1.Digest {
		t.Fatalf("resolve returned %+v, want the attempt's object", got)
	}
	if ptr := e.Pointer(res); ptr.Version != r1.Version {
		t.Fatalf("pointer %s, want %s", ptr.Version, r1.Version)
	}

	// Requests lost: not applied; Resolve raises the seal over the version.
	r2 := unknown(faultproxy.Faults{DropUpstream: true}, "k-lost")
	got, err = e.pub.Resolve(ctx, res, "k-lost", r2.Version, r2.AttemptID())
	mustOutcome(t, "resolve lost", got, err, Stale, ReasonSeal)
	again, err := e.pub.Resolve(ctx, res, "k-lost", r2.Version, r2.AttemptID())
	mustOutcome(t, "resolve lost again", again, err, Stale, ReasonSeal)
	// The same transaction arriving late (a delayed packet, a retry) is
	// refused by the seal and never applies.
	late := e.pub.prepare(p.term, r2.Version, "k-lost", r2.Digest, r2.Object, "text/plain")
	lr, err := e.pub.commit(ctx, late)
	mustOutcome(t, "late delivery", lr, err, Stale, ReasonSeal)
	if ptr := e.Pointer(res); ptr.Version != r1.Version {
		t.Fatalf("pointer %s, want %s", ptr.Version, r1.Version)
	}

	// The same operation retried under a new version applies; resolving the
	// old attempt then reports the operation's actual result as duplicate.
	r3, err := p.Publish(ctx, op("k-lost", "body of k-lost"))
	mustOutcome(t, "retry of the lost op", r3, err, Applied, reasonNone)
	got, err = e.pub.Resolve(ctx, res, "k-lost", r2.Version, r2.AttemptID())
	mustOutcome(t, "resolve after the retry applied", got, err, Duplicate, reasonNone)
	if got.Version != r3.Version {
		t.Fatalf("resolve reports %s, want the applied %s", got.Version, r3.Version)
	}
	if got := e.history(res); len(got) != 2 {
		t.Fatalf("history %v, want 2 entries", got)
	}
	if n := counterOf(t, reg, "fencepub_publish_total", map[string]string{"outcome": "unknown"}); n != 2 {
		t.Fatalf("%v unknown publishes counted, want 2", n)
	}
	if n := counterOf(t, reg, "fencepub_publish_txn_resends_total", nil); n < 2 {
		t.Fatalf("%v re-sends counted, want at least 2", n)
	}
}

// Rollback copies an older version's object server-side to a fresh key under
// a new version and publishes it normally.
func TestRollback(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "config"
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false)
	v1op := Operation{IdempotencyKey: "k1", Body: strings.NewReader("version one"), ContentType: "text/csv", Metadata: map[string]string{"Team": "data"}}
	r1, err := p.Publish(ctx, v1op)
	mustOutcome(t, "v1", r1, err, Applied, reasonNone)
	r2, err := p.Publish(ctx, op("k2", "version two"))
	mustOutcome(t, "v2", r2, err, Applied, reasonNone)

	rb, err := p.Rollback(ctx, r1.Version, "rollback-to-v1")
	mustOutcome(t, "rollback", rb, err, Applied, reasonNone)
	v, _, ok := e.NS.ParseObjectKey(res, rb.Object.Key)
	if !ok || v != rb.Version || rb.Version.Seq != 3 || rb.Object.Key == r1.Object.Key {
		t.Fatalf("rollback object %s for version %s: want a fresh key of the new version", rb.Object.Key, rb.Version)
	}
	if rb.Digest != r1.Digest || rb.Object.SHA256 != r1.Object.SHA256 || rb.Object.Size != r1.Object.Size {
		t.Fatalf("rollback digest %s / sha %s, want v1's %s / %s", rb.Digest, rb.Object.SHA256, r1.Digest, r1.Object.SHA256)
	}
	ptr := e.Pointer(res)
	if ptr.Version != rb.Version || ptr.ContentType != "text/csv" {
		t.Fatalf("pointer %+v", ptr)
	}
	if got := e.readObject(ptr.Object.Key); !bytes.Equal(got, []byte("version one")) {
		t.Fatalf("rolled-back content %q", got)
	}
	info, err := e.Store.Client.StatObject(ctx, e.Store.Bucket, ptr.Object.Key, minio.StatObjectOptions{})
	if err != nil || info.ContentType != "text/csv" || info.UserMetadata["Team"] != "data" || info.ETag != ptr.Object.ETag {
		t.Fatalf("copy %+v, %v", info, err)
	}

	dup, err := p.Rollback(ctx, r1.Version, "rollback-to-v1")
	mustOutcome(t, "rollback retried", dup, err, Duplicate, reasonNone)
	if dup.Version != rb.Version {
		t.Fatalf("retried rollback reports %s, want %s", dup.Version, rb.Version)
	}
	if _, err := p.Rollback(ctx, layout.Version{Epoch: 1, Fence: 99, Seq: 1}, "rb-x"); !errors.Is(err, ErrNoSuchVersion) {
		t.Fatalf("rollback to an unknown version: %v", err)
	}
	// GC collected v2's object after its retention.
	if err := e.Store.Client.RemoveObject(ctx, e.Store.Bucket, r2.Object.Key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Rollback(ctx, r2.Version, "rb-v2"); !errors.Is(err, ErrSourceGone) {
		t.Fatalf("rollback to a collected object: %v", err)
	}
	if ptr := e.Pointer(res); ptr.Version != rb.Version {
		t.Fatalf("pointer moved to %s", ptr.Version)
	}
}

// Resolve validates its input and works on a resource never published.
func TestResolveEdges(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	for _, c := range []struct {
		res, key string
		v        layout.Version
	}{
		{"bad/res", "k", layout.Version{Epoch: 1, Fence: 1, Seq: 1}},
		{"r", "", layout.Version{Epoch: 1, Fence: 1, Seq: 1}},
		{"r", "k", layout.Version{Epoch: 1, Fence: 1}},
		{"r", "k", layout.Version{Epoch: 1, Fence: layout.MaxNumber + 1, Seq: 1}},
	} {
		if _, err := e.pub.Resolve(ctx, c.res, c.key, c.v, unsent); !errors.Is(err, fencepub.ErrInvalid) {
			t.Errorf("resolve %+v: %v, want fencepub.ErrInvalid", c, err)
		}
	}
	// A fence never granted is refused and seals nothing (see
	// TestAdversarialResolveFutureVersion).
	if _, err := e.pub.Resolve(ctx, "fresh", "k", layout.Version{Epoch: 1, Fence: 3, Seq: 2}, unsent); !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("resolve of a fence never granted: %v, want fencepub.ErrInvalid", err)
	}
	g := e.acquire(authority.AcquireRequest{Resource: "fresh", Owner: "w"})
	v := g.Version(2)
	r, err := e.pub.Resolve(ctx, "fresh", "k", v, unsent)
	mustOutcome(t, "resolve on a resource never published", r, err, Stale, ReasonSeal)
	resp, err := e.Etcd.Get(ctx, e.NS.SealKey("fresh"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(resp, err)
	}
	seal, err := layout.DecodeSeal(resp.Kvs[0].Value)
	if err != nil || seal.Version != v {
		t.Fatalf("seal %+v, %v; want %s", seal, err, v)
	}
	// A lower version does not lower the seal.
	r, err = e.pub.Resolve(ctx, "fresh", "k2", g.Version(1), unsent)
	mustOutcome(t, "resolve below the seal", r, err, Stale, ReasonSeal)
	resp, _ = e.Etcd.Get(ctx, e.NS.SealKey("fresh"), clientv3.WithSerializable())
	if s, _ := layout.DecodeSeal(resp.Kvs[0].Value); s.Version != v {
		t.Fatalf("seal went to %s", s.Version)
	}
}

// A re-send that finds the resource gone (etcd restored from a snapshot
// taken before the resource existed, or replaced, after the first send
// applied and its response was lost) cannot tell whether that send
// applied: the outcome is unknown, not a definite ErrNotInitialized.
func TestResendAfterResourceWipedIsUnknown(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, c := e.proxied(nil)
	g := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"})
	p, err := c.Bind(ctx, GrantTerm(g, false))
	if err != nil {
		t.Fatal(err)
	}
	wiped := make(chan error, 1)
	go func() {
		for {
			resp, err := e.Etcd.Get(ctx, e.NS.OpKey("r", "k-wiped"))
			if err == nil && len(resp.Kvs) == 1 {
				_, err = e.Etcd.Txn(ctx).Then(clientv3.OpDelete(e.NS.PointerKey("r")), clientv3.OpDelete(e.NS.SealKey("r")),
					clientv3.OpDelete(e.NS.OpKey("r", "k-wiped"))).Commit()
				wiped <- err
				return
			}
			if ctx.Err() != nil {
				wiped <- ctx.Err()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	px.DropResponse(1, 300*time.Millisecond)
	r, err := p.Publish(ctx, op("k-wiped", "applied, then lost"))
	if werr := <-wiped; werr != nil {
		t.Fatal(werr)
	}
	if !errors.Is(err, ErrUnknown) || r.Outcome != Unknown || r.Attempts < 2 {
		t.Fatalf("publish whose applied send was wiped before its re-send: outcome %q after %d sends, %v; want unknown", r.Outcome, r.Attempts, err)
	}
}

//go:build !unit

package publisher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/reader"
	"github.com/minio/minio-go/v7"
)

// lostAttempt publishes op(key, body) at seq through a proxy that drops
// every request, so its transaction never reaches etcd: the outcome is
// unknown. The proxy is healed before it returns.
func (e *env) lostAttempt(g authority.Grant, seq uint64, key, body string) Result {
	e.t.Helper()
	ctx := ctxT(e.t, time.Minute)
	px, c := e.proxied(nil)
	p, err := c.Bind(ctx, GrantTerm(g, false))
	if err != nil {
		e.t.Fatal(err)
	}
	px.Set(faultproxy.Faults{DropUpstream: true})
	defer px.Set(faultproxy.Faults{})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := p.PublishSeq(pctx, seq, op(key, body))
	mustOutcome(e.t, "attempt with its requests lost", r, err, Unknown, reasonNone)
	return r
}

// Resolve settles the attempt it is given (DESIGN.md invariant 11): when
// another attempt under the same key and version applied with another
// body, the lost attempt is a conflict, by digest or by object key, and
// only the winner is applied; an attempt with the same digest as the
// winner is applied at its version and a duplicate at another. Nothing is
// sealed when the op record answers.
func TestResolveSettlesOneAttempt(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res, key = "r", "K"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	lost := e.lostAttempt(g, 1, key, "body 1")
	if lost.Digest == "" || lost.Object.Key == "" || lost.Version != g.Version(1) || lost.IdempotencyKey != key || lost.Resource != res {
		t.Fatalf("unknown result %+v lacks what Resolve needs", lost)
	}
	won, err := e.bind(g, false).PublishSeq(ctx, 1, op(key, "body 2"))
	mustOutcome(t, "second attempt, same key, grant and seq", won, err, Applied, reasonNone)
	sealBefore := e.sealValue(res)

	for name, id := range map[string]AttemptID{
		"digest and object": lost.AttemptID(),
		"digest":            {Digest: lost.Digest},
		"object":            {ObjectKey: lost.Object.Key},
	} {
		r, err := e.pub.Resolve(ctx, res, key, lost.Version, id)
		mustOutcome(t, "resolve the lost attempt by "+name, r, err, Conflict, reasonNone)
		if r.Digest != won.Digest || r.Object != won.Object || r.Version != won.Version {
			t.Fatalf("conflict result %+v; want the winner's digest %s and object %s", r, won.Digest, won.Object.Key)
		}
	}
	for name, id := range map[string]AttemptID{
		"digest and object": won.AttemptID(),
		"digest":            {Digest: won.Digest},
		"object":            {ObjectKey: won.Object.Key},
	} {
		r, err := e.pub.Resolve(ctx, res, key, won.Version, id)
		mustOutcome(t, "resolve the winner by "+name, r, err, Applied, reasonNone)
	}

	// Same digest as the winner: the same logical operation took effect.
	same := AttemptID{Digest: won.Digest, ObjectKey: e.NS.ObjectKey(res, won.Version, layout.NewNonce())}
	r, err := e.pub.Resolve(ctx, res, key, won.Version, same)
	mustOutcome(t, "same digest, same version, another object", r, err, Applied, reasonNone)
	v2 := g.Version(2)
	r, err = e.pub.Resolve(ctx, res, key, v2, AttemptID{Digest: won.Digest, ObjectKey: e.NS.ObjectKey(res, v2, layout.NewNonce())})
	mustOutcome(t, "same digest, another version", r, err, Duplicate, reasonNone)
	if r.Version != won.Version || r.Object != won.Object {
		t.Fatalf("duplicate result %+v; want the original %s", r, won.Version)
	}
	if got := e.sealValue(res); got != sealBefore {
		t.Fatalf("a resolve answered by the op record moved the seal to %q", got)
	}
}

// Resolve refuses, writing nothing, an attempt it cannot identify: no
// digest and no object key, a malformed digest, or an object key of
// another version or resource.
func TestResolveNeedsTheAttempt(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "r"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	r1, err := e.bind(g, false).Publish(ctx, op("k1", "one"))
	mustOutcome(t, "publish", r1, err, Applied, reasonNone)
	sealBefore := e.sealValue(res)
	v := g.Version(2)
	for name, id := range map[string]AttemptID{
		"nothing":                {},
		"short digest":           {Digest: "abc"},
		"uppercase digest":       {Digest: strings.Repeat("AB", 32)},
		"object of another seq":  {ObjectKey: e.NS.ObjectKey(res, g.Version(3), layout.NewNonce())},
		"object of another name": {ObjectKey: e.NS.ObjectKey("other", v, layout.NewNonce())},
		"not an object key":      {ObjectKey: "x/y"},
	} {
		r, err := e.pub.Resolve(ctx, res, "k2", v, id)
		if !errors.Is(err, fencepub.ErrInvalid) || r.Outcome != "" {
			t.Errorf("resolve with %s: %+v, %v; want fencepub.ErrInvalid", name, r, err)
		}
		if name == "nothing" && (err == nil || !strings.Contains(err.Error(), "cannot tell which attempt")) {
			t.Errorf("resolve with no identity: %v; want it to say it cannot tell which attempt", err)
		}
	}
	if got := e.sealValue(res); got != sealBefore {
		t.Fatalf("a refused resolve moved the seal to %q", got)
	}
}

// A resolve that raises the seal of a decommissioned resource keeps the
// decommission's reason and time, so a reader of the retired resource still
// gets ErrDecommissioned once GC collected its objects, not ErrObjectMissing.
func TestResolveKeepsDecommission(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "retired"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	r1, err := e.bind(g, false).Publish(ctx, op("k1", "one"))
	mustOutcome(t, "publish", r1, err, Applied, reasonNone)
	e.release(g)
	col, err := gc.New(gc.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}, Authority: e.auth})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Decommission(ctx, col, res, false); err != nil {
		t.Fatal(err)
	}
	retired := e.seal(res)

	// A later grant's attempt ends unknown; Resolve seals it.
	g2 := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w2"})
	r, err := e.pub.Resolve(ctx, res, "k2", g2.Version(1), unsent)
	mustOutcome(t, "resolve above the decommission", r, err, Stale, ReasonSeal)
	s := e.seal(res)
	if s.Version != g2.Version(1) || s.Reason != layout.SealReasonDecommissioned || !s.At.Equal(retired.At) {
		t.Fatalf("seal after resolve %+v; want %s with the decommission's reason and time %s", s, g2.Version(1), retired.At)
	}

	// GC collects the retired resource's objects.
	if err := e.Store.Client.RemoveObject(ctx, e.Store.Bucket, r1.Object.Key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	rd, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}}, res)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := rd.Open(ctx); !errors.Is(err, reader.ErrDecommissioned) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("open of the retired resource: %v; want ErrDecommissioned", err)
	}

	// Once something is published above the seal the resource lives again,
	// and a later raise writes its own reason.
	r3, err := e.bind(g2, false).PublishSeq(ctx, 2, op("k3", "three"))
	mustOutcome(t, "publish above the seal", r3, err, Applied, reasonNone)
	r, err = e.pub.Resolve(ctx, res, "k4", g2.Version(5), unsent)
	mustOutcome(t, "resolve of a living resource", r, err, Stale, ReasonSeal)
	if s := e.seal(res); s.Reason == layout.SealReasonDecommissioned {
		t.Fatalf("seal %+v: a resource published since is not retired", s)
	}
}

// In contiguous mode a gap refusal of a re-sent transaction, whose first
// send went unanswered, is unknown: the first send could still apply once
// the missing seq is published. A gap refusal of a first send is stale.
func TestContiguousGapAfterLostResponseIsUnknown(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, c := e.proxied(nil)
	term := GrantTerm(e.acquire(authority.AcquireRequest{Resource: "seqs", Owner: "w"}), false)
	term.contiguous = true
	p, err := c.Bind(ctx, term)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.PublishSeq(ctx, 2, op("k2", "two"))
	mustOutcome(t, "gap on a first send", r, err, Stale, ReasonGap)

	fired := px.DropResponse(1, 300*time.Millisecond)
	r, err = p.PublishSeq(ctx, 3, op("k3", "three"))
	mustOutcome(t, "gap on a re-send after a lost response", r, err, Unknown, reasonNone)
	if errors.Is(err, ErrStale) {
		t.Fatalf("unknown outcome also wraps ErrStale: %v", err)
	}
	select {
	case <-fired:
	default:
		t.Fatal("the proxy never dropped a response")
	}
	if r.Attempts < 2 {
		t.Fatalf("%d sends; want a re-send", r.Attempts)
	}
}

// seal returns the decoded seal of res.
func (e *env) seal(res string) layout.Seal {
	e.t.Helper()
	s, err := layout.DecodeSeal([]byte(e.sealValue(res)))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

//go:build !unit

package gc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/objstore"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the child processes of the race and
	// handover tests (helper_test.go).
	testenv.RunChild(helpers)
	testenv.Main(m)
}

// env is one test's domain on the shared servers: a fresh namespace with an
// initialised authority and a publisher Client.
type env struct {
	*testenv.Domain
	t    testing.TB
	st   objstore.Store // the store of the authority, publishers and collectors: Domain.Store but in newMemEnv
	auth *authority.Authority
	pub  *publisher.Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newDomainEnv(t, testenv.NewDomain(t))
}

// newDomainEnv is newEnv on domain d (testenv.ClusterDomain: a cluster's).
func newDomainEnv(t testing.TB, d *testenv.Domain) *env {
	t.Helper()
	return initEnv(&env{Domain: d, t: t, st: d.Store})
}

// initEnv initialises e's domain and makes its publisher Client.
func initEnv(e *env) *env {
	t := e.t
	t.Helper()
	e.auth = e.authority(e.Etcd)
	if _, err := operator.Init(ctxT(t, 30*time.Second), e.auth); err != nil {
		t.Fatal(err)
	}
	e.pub = e.publisher(e.Etcd, nil)
	return e
}

func (e *env) authority(cli *clientv3.Client) *authority.Authority {
	e.t.Helper()
	a, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: cli, Store: e.st}})
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func (e *env) publisher(cli *clientv3.Client, mod func(*publisher.Config)) *publisher.Client {
	e.t.Helper()
	cfg := publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: cli, Store: e.st}}
	if mod != nil {
		mod(&cfg)
	}
	p, err := publisher.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// collector returns a Collector of e's domain; mod adjusts its Config.
func (e *env) collector(mod func(*Config)) *Collector {
	e.t.Helper()
	cfg := Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.st}, Authority: e.auth}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// later is a Config mod for a collector living d in the future: its wall
// clock runs d ahead and etcd's leases look d older (agedLeases), so the
// domain clock advances by d, to age objects, history and records without
// sleeping.
func later(d time.Duration) func(*Config) {
	return func(c *Config) {
		jumped(d)(c)
		c.leases = agedLeases{Lease: c.Etcd, d: d}
	}
}

// jumped is a Config mod whose wall clock alone runs d ahead: etcd's lease
// timer does not agree.
func jumped(d time.Duration) func(*Config) {
	return func(c *Config) { c.now = func() time.Time { return time.Now().Add(d) } }
}

// agedLeases reports every lease d older than etcd does (its remaining TTL
// d shorter, at least 0), as if d of real time had passed.
type agedLeases struct {
	clientv3.Lease
	d time.Duration
}

func (a agedLeases) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	r, err := a.Lease.TimeToLive(ctx, id, opts...)
	if err != nil || r.TTL < 0 {
		return r, err
	}
	aged := *r
	aged.TTL = max(0, r.TTL-int64(a.d/time.Second))
	return &aged, nil
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// run runs one verbose pass over resources (none: all) and fails t on an
// error.
func (e *env) run(c *Collector, resources ...string) *passReport {
	e.t.Helper()
	rep, err := c.runPass(ctxT(e.t, time.Minute), RunOptions{Resources: resources, All: len(resources) == 0}, true)
	if err != nil {
		e.t.Fatalf("gc pass: %v\nreport errors: %v", err, rep.Errors)
	}
	return rep
}

// acquire gets a grant (TTL ttl, default 10 s).
func (e *env) acquire(res, owner string, ttl time.Duration) authority.Grant {
	e.t.Helper()
	if ttl == 0 {
		ttl = 10 * time.Second
	}
	g, err := e.auth.Acquire(ctxT(e.t, 30*time.Second), authority.AcquireRequest{Resource: res, Owner: owner, TTL: ttl, Wait: true})
	if err != nil {
		e.t.Fatalf("acquire %s for %s: %v", res, owner, err)
	}
	return g
}

func (e *env) release(g authority.Grant) {
	e.t.Helper()
	if err := e.auth.Release(ctxT(e.t, 10*time.Second), g); err != nil {
		e.t.Fatalf("release: %v", err)
	}
}

// expire ends g's lease as etcd's expiry would (a revoke: the holder key
// goes with it) without a release, so g's term is not sealed: a worker
// paused past its TTL, or killed, never releases.
func (e *env) expire(g authority.Grant) {
	e.t.Helper()
	if _, err := e.Etcd.Revoke(ctxT(e.t, 10*time.Second), g.LeaseID); err != nil {
		e.t.Fatalf("revoke the lease of %q generation %d: %v", g.Resource, g.Generation, err)
	}
}

// worker acquires res for owner (10 s TTL) and binds e.pub to the grant.
func (e *env) worker(res, owner string) (authority.Grant, *publisher.Publisher) {
	e.t.Helper()
	g := e.acquire(res, owner, 0)
	return g, e.bind(e.pub, g)
}

func (e *env) bind(c *publisher.Client, g authority.Grant) *publisher.Publisher {
	e.t.Helper()
	p, err := c.Bind(ctxT(e.t, 10*time.Second), publisher.GrantTerm(g, false))
	if err != nil {
		e.t.Fatalf("bind: %v", err)
	}
	return p
}

func op(key, body string) publisher.Operation {
	return publisher.Operation{IdempotencyKey: key, Body: strings.NewReader(body), ContentType: "text/plain"}
}

// publish publishes body under key with p and fails t unless the outcome is
// want.
func (e *env) publish(p *publisher.Publisher, key string, want publisher.Outcome) publisher.Result {
	e.t.Helper()
	r, err := p.Publish(ctxT(e.t, 30*time.Second), op(key, "body of "+key))
	if r.Outcome != want {
		e.t.Fatalf("publish %s: outcome %q reason %q err %v; want %q", key, r.Outcome, r.Reason, err, want)
	}
	return r
}

// inFlight leaves an in-flight object of g on res: it publishes through a
// fault proxy that drops every request to etcd, so the object is written
// but the transaction never arrives (outcome unknown). It returns the
// attempt.
func (e *env) inFlight(g authority.Grant, key string) publisher.Result {
	e.t.Helper()
	px, cli := testenv.Get(e.t).EtcdProxy(e.t)
	defer px.Close() // cut the client off etcd for good once the attempt is over
	pc := e.publisher(cli, func(c *publisher.Config) {
		c.RequestTimeout = 100 * time.Millisecond
		c.ResendTimeout = 300 * time.Millisecond
	})
	p := e.bind(pc, g)
	px.Set(faultproxy.Faults{DropUpstream: true})
	// No deadline: the publisher gives up after its ResendTimeout.
	r, err := p.Publish(context.Background(), op(key, "in flight "+key))
	if r.Outcome != publisher.Unknown || !errors.Is(err, publisher.ErrUnknown) {
		e.t.Fatalf("in-flight publish: outcome %q err %v; want unknown", r.Outcome, err)
	}
	return r
}

func (e *env) put(key, body string) {
	e.t.Helper()
	if _, err := e.Store.Client.PutObject(ctxT(e.t, 10*time.Second), e.Store.Bucket, key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) rm(key string) {
	e.t.Helper()
	if err := e.Store.Client.RemoveObject(ctxT(e.t, 10*time.Second), e.Store.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// get returns the value of an etcd key, or nil.
func (e *env) get(key string) *mvccKV {
	e.t.Helper()
	resp, err := e.Etcd.Get(ctxT(e.t, 10*time.Second), key)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

func (e *env) seal(res string) layout.Seal {
	e.t.Helper()
	kv := e.get(e.NS.SealKey(res))
	if kv == nil {
		e.t.Fatalf("no seal for %s", res)
	}
	s, err := layout.DecodeSeal(kv.Value)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func decodePointerKV(kv *mvccKV) (layout.Pointer, error) { return layout.DecodePointer(kv.Value) }

// decisionOf returns the decision of key in rep, failing t if absent.
func decisionOf(t *testing.T, rep *passReport, key string) decision {
	t.Helper()
	for _, d := range rep.Decisions {
		if d.Key == key && d.UploadID == "" {
			return d
		}
	}
	t.Fatalf("no decision for %s in %+v", key, rep.Decisions)
	return decision{}
}

func mustDecide(t *testing.T, rep *passReport, key string, kind kind, action, reason string) {
	t.Helper()
	d := decisionOf(t, rep, key)
	if d.Kind != kind || d.Action != action || !strings.Contains(d.Reason, reason) {
		t.Fatalf("%s: %s/%s (%s); want %s/%s with reason containing %q", key, d.Kind, d.Action, d.Reason, kind, action, reason)
	}
}

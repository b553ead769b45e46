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
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the paused worker of an adversarial test.
	testenv.RunChild(map[string]testenv.ChildFunc{pausedWorkerChild: runPausedWorker})
	testenv.Main(m)
}

// env is one test's domain on the shared servers: a fresh namespace with an
// initialised authority and a publisher Client with its own registry.
type env struct {
	*testenv.Domain
	t    testing.TB
	auth *authority.Authority
	pub  *Client
	reg  *prometheus.Registry
}

func newEnv(t testing.TB, mods ...func(*Config)) *env {
	t.Helper()
	return newDomainEnv(t, testenv.NewDomain(t), nil, mods...)
}

// newDomainEnv is newEnv on domain d (testenv.ClusterDomain: a cluster's),
// its authority configured by amod when not nil.
func newDomainEnv(t testing.TB, d *testenv.Domain, amod func(*authority.Config), mods ...func(*Config)) *env {
	t.Helper()
	e := &env{Domain: d, t: t, reg: prometheus.NewRegistry()}
	acfg := authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}}
	if amod != nil {
		amod(&acfg)
	}
	a, err := authority.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Init(ctxT(t, 30*time.Second), a); err != nil {
		t.Fatal(err)
	}
	e.auth = a
	withRegistry := func(c *Config) { c.Registerer = e.reg }
	e.pub = e.client(e.Etcd, append([]func(*Config){withRegistry}, mods...)...)
	return e
}

// client builds another publisher Client of e's domain on cli.
func (e *env) client(cli *clientv3.Client, mods ...func(*Config)) *Client {
	e.t.Helper()
	cfg := Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: cli, Store: e.Store}}
	for _, m := range mods {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// acquire gets a grant from the authority (10 s TTL unless req.TTL is set).
func (e *env) acquire(req authority.AcquireRequest) authority.Grant {
	e.t.Helper()
	if req.TTL == 0 {
		req.TTL = 10 * time.Second
	}
	g, err := e.auth.Acquire(ctxT(e.t, 30*time.Second), req)
	if err != nil {
		e.t.Fatalf("acquire %+v: %v", req, err)
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
// paused past its TTL never releases.
func (e *env) expire(g authority.Grant) {
	e.t.Helper()
	if _, err := e.Etcd.Revoke(ctxT(e.t, 10*time.Second), g.LeaseID); err != nil {
		e.t.Fatalf("revoke the lease of %q generation %d: %v", g.Resource, g.Generation, err)
	}
}

// bindContiguous acquires res for owner "w" and binds the grant in
// contiguous mode (each seq must follow the pointer's).
func (e *env) bindContiguous(ctx context.Context, res string) *Publisher {
	e.t.Helper()
	term := GrantTerm(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false)
	term.contiguous = true
	p, err := e.pub.Bind(ctx, term)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) bind(g authority.Grant, strict bool) *Publisher {
	e.t.Helper()
	p, err := e.pub.Bind(ctxT(e.t, 10*time.Second), GrantTerm(g, strict))
	if err != nil {
		e.t.Fatalf("bind: %v", err)
	}
	return p
}

// history returns the versions in res's history, in order.
func (e *env) history(res string) []layout.Version {
	e.t.Helper()
	resp, err := e.Etcd.Get(ctxT(e.t, 10*time.Second), e.NS.HistoryPrefix(res), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	var out []layout.Version
	for _, kv := range resp.Kvs {
		v, err := layout.DecodeVersion(strings.TrimPrefix(string(kv.Key), e.NS.HistoryPrefix(res)))
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// counter returns the value of a counter of e.reg with the given labels.
func (e *env) counter(name string, labels map[string]string) float64 {
	e.t.Helper()
	return counterOf(e.t, e.reg, name, labels)
}

// counterOf returns the value of the first counter of reg named name whose
// labels include labels (0 if none).
func counterOf(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// histogram returns the sum and count of a histogram of e.reg.
func (e *env) histogram(name string) [2]float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return [2]float64{h.GetSampleSum(), float64(h.GetSampleCount())}
		}
	}
	return [2]float64{}
}

// op is an Operation with a small text body.
func op(key, body string) Operation {
	return Operation{IdempotencyKey: key, Body: strings.NewReader(body), ContentType: "text/plain"}
}

// unsent names an attempt whose transaction never reached etcd: no publish
// has its request digest.
var unsent = AttemptID{Digest: strings.Repeat("0", 64)}

// mustOutcome fails t unless (res, err) is the outcome want (and reason).
func mustOutcome(t testing.TB, what string, res Result, err error, want Outcome, reason Reason) {
	t.Helper()
	if res.Outcome != want || res.Reason != reason {
		t.Fatalf("%s: outcome %q reason %q (err %v); want %q %q", what, res.Outcome, res.Reason, err, want, reason)
	}
	var wantErr error
	switch want {
	case Stale:
		wantErr = ErrStale
	case Conflict:
		wantErr = ErrConflict
	case Unknown:
		wantErr = ErrUnknown
	}
	if wantErr == nil && err != nil || wantErr != nil && !errors.Is(err, wantErr) {
		t.Fatalf("%s: err %v; want %v", what, err, wantErr)
	}
}

// readObject returns the bytes of key.
func (e *env) readObject(key string) []byte {
	e.t.Helper()
	o, err := e.Store.Client.GetObject(ctxT(e.t, 30*time.Second), e.Store.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer o.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(o); err != nil {
		e.t.Fatal(err)
	}
	return b.Bytes()
}

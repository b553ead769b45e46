//go:build !unit

package publisher

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Publishing under a released grant: Release seals the term at (epoch,
// fence, max) (DESIGN.md "Leftovers of finished work").

// putsKey reports whether req is a transaction whose success branch puts
// key.
func putsKey(req any, key string) bool {
	tr, ok := req.(*pb.TxnRequest)
	if !ok {
		return false
	}
	for _, op := range tr.Success {
		if put := op.GetRequestPut(); put != nil && string(put.Key) == key {
			return true
		}
	}
	return false
}

// After a release, the term's duplicate and conflict attempts are below
// the seal, its next publish is stale (reason seal), also from a Publisher
// bound again to the grant, and the next grant publishes as before.
func TestPublishAfterRelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "done"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	p := e.bind(g, false)
	r1, err := p.Publish(ctx, op("k1", "one"))
	mustOutcome(t, "publish", r1, err, Applied, reasonNone)
	dup, err := p.Publish(ctx, op("k1", "one"))
	mustOutcome(t, "duplicate", dup, err, Duplicate, reasonNone)
	conf, err := p.Publish(ctx, op("k1", "other"))
	mustOutcome(t, "conflict", conf, err, Conflict, reasonNone)
	e.release(g)
	if s := e.seal(res); s.Version != g.Version(layout.MaxNumber) || s.Version.Compare(conf.Attempt.Version) < 0 || s.Version.Compare(dup.Attempt.Version) < 0 {
		t.Fatalf("seal after release %+v; want %s, above the leftovers %s and %s", s, g.Version(layout.MaxNumber), dup.Attempt.Version, conf.Attempt.Version)
	}
	late, err := p.Publish(ctx, op("k2", "two"))
	mustOutcome(t, "publish after release", late, err, Stale, ReasonSeal)
	again := e.bind(g, false)
	if n := again.nextSeq(); n != layout.MaxNumber {
		t.Fatalf("rebound publisher's next seq %d; want the closed seq space's %d", n, layout.MaxNumber)
	}
	r, err := again.Publish(ctx, op("k3", "three"))
	mustOutcome(t, "rebound publish after release", r, err, Stale, ReasonSeal)
	if ptr := e.Pointer(res); ptr.Version != r1.Version {
		t.Fatalf("pointer %s; want %s", ptr.Version, r1.Version)
	}
	g2 := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w2"})
	r2, err := e.bind(g2, false).Publish(ctx, op("k4", "four"))
	mustOutcome(t, "the next grant", r2, err, Applied, reasonNone)
}

// TestLostReleaseThenResentPublish: a publish whose first send is lost, a
// release of the same grant whose seal answer is lost (faultproxy), then
// the publish's re-send. If the first send reached etcd, the re-send finds
// its op record: applied. If it never did, the seal refuses it: stale,
// reason seal, and it never applies. Either way one seal write.
func TestLostReleaseThenResentPublish(t *testing.T) {
	for _, c := range []struct {
		name      string
		delivered bool // the first send reaches etcd before the release
		want      Outcome
		reason    Reason
	}{
		{"applied before the release", true, Applied, reasonNone},
		{"release before the publish", false, Stale, ReasonSeal},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, time.Minute)
			const res, key = "r", "k"

			// The authority reaches etcd through a fault proxy that loses
			// the answer of the release's seal transaction.
			px, _ := testenv.Get(t).EtcdProxy(t)
			var (
				armed sync.Once
				mu    sync.Mutex
				fired <-chan struct{}
			)
			loseSeal := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if putsKey(req, e.NS.SealKey(res)) {
					armed.Do(func() {
						mu.Lock()
						fired = px.DropResponse(1, time.Second)
						mu.Unlock()
					})
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			acli := etcdClient(t, px.URL(), loseSeal)
			auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: acli, Store: e.Store}, RequestTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})

			// The publisher's first send is lost (delivered or not); the
			// release runs before it is re-sent.
			var sends atomic.Int32
			var releaseErr error
			lose := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if !putsKey(req, e.NS.OpKey(res, key)) || sends.Add(1) > 1 {
					return invoker(ctx, method, req, reply, cc, opts...)
				}
				if c.delivered {
					if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
						return err
					}
				}
				releaseErr = auth.Release(context.WithoutCancel(ctx), g)
				return status.Error(codes.Unavailable, "test: the answer was lost")
			}
			pub := e.client(etcdClient(t, e.Etcd.Endpoints()[0], lose))
			p, err := pub.Bind(ctx, GrantTerm(g, false))
			if err != nil {
				t.Fatal(err)
			}
			sealVer := e.sealWrites(res)
			r, err := p.Publish(ctx, op(key, "body"))
			mustOutcome(t, "re-sent publish after a release", r, err, c.want, c.reason)
			if releaseErr != nil {
				t.Fatalf("release with a lost seal answer: %v", releaseErr)
			}
			mu.Lock()
			f := fired
			mu.Unlock()
			if f == nil {
				t.Fatal("the release's seal transaction never went through the proxy")
			}
			<-f
			if st := px.Stats(); st.DroppedDown == 0 {
				t.Fatalf("proxy %+v: the seal's answer was not lost", st)
			}
			if r.Attempts < 2 || sends.Load() < 2 {
				t.Fatalf("%d sends (%d seen); want the re-send", r.Attempts, sends.Load())
			}
			s, ver := e.seal(res), e.sealWrites(res)
			if s.Version != g.Version(layout.MaxNumber) || ver != sealVer+1 {
				t.Fatalf("seal %s written %d times; want %s once", s.Version, ver-sealVer, g.Version(layout.MaxNumber))
			}
			ptr := e.Pointer(res)
			if c.delivered != (ptr.Version == r.Version) {
				t.Fatalf("pointer %s after %s", ptr.Version, r.Outcome)
			}
			if h := e.history(res); len(h) != map[bool]int{true: 1, false: 0}[c.delivered] {
				t.Fatalf("history %v", h)
			}
		})
	}
}

// sealWrites returns the etcd version of res's seal key: how many times it
// was written since it was created.
func (e *env) sealWrites(res string) int64 {
	e.t.Helper()
	resp, err := e.Etcd.Get(ctxT(e.t, 10*time.Second), e.NS.SealKey(res))
	if err != nil || len(resp.Kvs) != 1 {
		e.t.Fatalf("seal of %q: %v %v", res, resp, err)
	}
	return resp.Kvs[0].Version
}

// etcdClient is an etcd client of endpoint whose unary calls go through
// intercept; it is closed when t ends.
func etcdClient(t *testing.T, endpoint string, intercept grpc.UnaryClientInterceptor) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

//go:build !unit

package authority

import (
	"context"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	testenv.RunChild(map[string]testenv.ChildFunc{helperChild: runHelper})
	testenv.Main(m)
}

// newAuthority builds an Authority on cli and st for a fresh namespace
// unless ns is given; mods adjust the config.
func newAuthority(t testing.TB, cli *clientv3.Client, st objstore.Store, ns layout.Namespace, mods ...func(*Config)) *Authority {
	t.Helper()
	cfg := Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: st}}
	for _, m := range mods {
		m(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// shared returns an Authority on the shared servers with a fresh namespace.
func shared(t testing.TB, mods ...func(*Config)) *Authority {
	t.Helper()
	env := testenv.Get(t)
	return newAuthority(t, env.EtcdClient(t), env.Store(t), testenv.Namespace(t), mods...)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, a *Authority, req AcquireRequest) Grant {
	t.Helper()
	if req.TTL == 0 {
		req.TTL = 10 * time.Second
	}
	g, err := a.Acquire(ctxT(t, 30*time.Second), req)
	if err != nil {
		t.Fatalf("acquire %+v: %v", req, err)
	}
	return g
}

// cmpHolds reports whether all compares hold in etcd right now.
func cmpHolds(t testing.TB, a *Authority, cmps ...clientv3.Cmp) bool {
	t.Helper()
	resp, err := a.cli.Txn(ctxT(t, 10*time.Second)).If(cmps...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Succeeded
}

// generation reads res's durable generation.
func generation(t testing.TB, a *Authority, res string) uint64 {
	t.Helper()
	st, err := a.inspect(ctxT(t, 10*time.Second), res)
	if err != nil {
		t.Fatal(err)
	}
	return st.Generation
}

// countKeys counts etcd keys under prefix.
func countKeys(t testing.TB, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 10*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// listObjects lists the object keys under prefix.
func listObjects(t testing.TB, st objstore.Store, prefix string) []string {
	t.Helper()
	var keys []string
	for o, err := range st.List(ctxT(t, 30*time.Second), prefix, objstore.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// awaitHolderGone blocks until the holder key of res created at rev is
// deleted (lease expiry or revoke), failing t after timeout.
func awaitHolderGone(t testing.TB, a *Authority, res string, rev int64, timeout time.Duration) {
	t.Helper()
	ctx := ctxT(t, timeout)
	for wr := range a.cli.Watch(ctx, a.ns.HolderKey(res), clientv3.WithRev(rev), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		if len(wr.Events) > 0 {
			return
		}
	}
	t.Fatalf("holder of %q (revision %d) still there after %s", res, rev, timeout)
}

// owner returns a fresh owner id starting with who.
func owner(who string) string { return who + "-" + NewID()[:8] }

// sameGrant compares grants field by field, GrantedAt by instant (a grant
// decoded from JSON has no monotonic clock reading).
func sameGrant(x, y Grant) bool {
	if !x.GrantedAt.Equal(y.GrantedAt) {
		return false
	}
	x.GrantedAt, y.GrantedAt = time.Time{}, time.Time{}
	return x == y
}

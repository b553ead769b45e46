//go:build !unit

package authority

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestInitRefusesStoreIgnoringCreateOnly: a domain's first Init runs the
// probe and refuses a store that answers a create-only PUT onto an existing
// key with success, naming its endpoint, and writes nothing to etcd; the
// same domain initialises on the store itself.
func TestInitRefusesStoreIgnoringCreateOnly(t *testing.T) {
	sh := testenv.Get(t)
	cli := sh.EtcdClient(t)
	ns := testenv.Namespace(t)
	badCfg := testenv.IgnoreCreateOnly(t, sh.S3.S3Config())
	bad, err := s3store.New(badCfg)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := badCfg.Endpoint
	_, err = newAuthority(t, cli, bad, ns).initDomain(ctxT(t, 20*time.Second))
	if !errors.Is(err, fencepub.ErrCreateOnlyIgnored) || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "If-None-Match") {
		t.Fatalf("Init on a store ignoring If-None-Match: %v; want ErrCreateOnlyIgnored naming %s", err, endpoint)
	}
	if resp, err := cli.Get(ctxT(t, 10*time.Second), ns.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("a refused Init wrote %d etcd key(s) (%v)", resp.Count, err)
	}
	if _, err := newAuthority(t, cli, sh.Store(t), ns).initDomain(ctxT(t, 20*time.Second)); err != nil {
		t.Fatalf("Init on MinIO: %v", err)
	}
}

// TestNestedNamespaceRefused: a namespace whose prefix is another's root
// (prefix "<p>/<d>") is refused before any I/O, so the outer domain stays
// usable. Before, the nested domain's Init wrote its create-only probe and
// its markers inside domain d of prefix p, whose own Init then met another
// history there (ErrForeignHistory), and so did every acquire, for good.
func TestNestedNamespaceRefused(t *testing.T) {
	sh := testenv.Get(t)
	cli, st := sh.EtcdClient(t), sh.Store(t)
	outer := testenv.Namespace(t)
	nested := layout.Namespace{Prefix: outer.Prefix + "/" + outer.Domain, Domain: "inner"}
	ctx := ctxT(t, time.Minute)
	a, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(nested), Etcd: cli, Store: st}})
	switch {
	case err == nil:
		t.Errorf("New accepted %+v, whose keys lie inside %+v", nested, outer)
		if _, err := a.initDomain(ctx); err != nil {
			t.Fatalf("Init of the nested namespace: %v", err)
		}
	case !errors.Is(err, layout.ErrInvalidName) || !strings.Contains(err.Error(), "namespace.prefix"):
		t.Fatalf("New of a nested namespace: %v; want layout.ErrInvalidName naming namespace.prefix", err)
	}
	if _, err := newAuthority(t, cli, st, outer).initDomain(ctx); err != nil {
		t.Fatalf("Init of %+v: %v", outer, err)
	}
}

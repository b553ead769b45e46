//go:build !unit

package authority

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
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
	_, err = newAuthority(t, cli, bad, ns).Init(ctxT(t, 20*time.Second))
	if !errors.Is(err, fencepub.ErrCreateOnlyIgnored) || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "If-None-Match") {
		t.Fatalf("Init on a store ignoring If-None-Match: %v; want ErrCreateOnlyIgnored naming %s", err, endpoint)
	}
	if resp, err := cli.Get(ctxT(t, 10*time.Second), ns.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("a refused Init wrote %d etcd key(s) (%v)", resp.Count, err)
	}
	if _, err := newAuthority(t, cli, sh.Store(t), ns).Init(ctxT(t, 20*time.Second)); err != nil {
		t.Fatalf("Init on MinIO: %v", err)
	}
}

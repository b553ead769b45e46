package authority

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/harness/testenv"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// overwritingStore is an in-memory store that ignores the create-only
// condition: a PUT onto an existing key replaces it.
type overwritingStore struct{ objstore.Store }

func (s overwritingStore) PutCreateOnly(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	s.Delete(ctx, []string{key})
	return s.Store.PutCreateOnly(ctx, key, body, size, opts)
}

// TestProbeCreateOnly: the probe passes on MinIO (every time: the probe
// object stays) and reports a store that overwrites an existing key as a
// *CreateOnlyError naming the store and the key.
func TestProbeCreateOnly(t *testing.T) {
	st := testenv.Get(t).Store(t)
	key := testenv.Namespace(t).CreateOnlyProbeObject()
	for range 2 {
		if err := ProbeCreateOnly(ctxT(t, 10*time.Second), st, StoreName(st), key); err != nil {
			t.Fatalf("MinIO: %v", err)
		}
	}
	err := ProbeCreateOnly(ctxT(t, 10*time.Second), overwritingStore{memstore.New("fake", time.Now)}, "fake-store", key)
	var ce *CreateOnlyError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCreateOnlyIgnored) || ce.Store != "fake-store" || ce.Key != key {
		t.Fatalf("an overwriting store: %v (%#v)", err, ce)
	}
}

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
	if !errors.Is(err, ErrCreateOnlyIgnored) || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "If-None-Match") {
		t.Fatalf("Init on a store ignoring If-None-Match: %v; want ErrCreateOnlyIgnored naming %s", err, endpoint)
	}
	if resp, err := cli.Get(ctxT(t, 10*time.Second), ns.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("a refused Init wrote %d etcd key(s) (%v)", resp.Count, err)
	}
	if _, err := newAuthority(t, cli, sh.Store(t), ns).Init(ctxT(t, 20*time.Second)); err != nil {
		t.Fatalf("Init on MinIO: %v", err)
	}
}

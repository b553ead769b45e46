package authority

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/harness/testenv"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// overwritingStore is an in-memory store that ignores the create-only
// condition: every write succeeds and replaces the object.
type overwritingStore struct {
	mu   sync.Mutex
	objs map[string][]byte
}

func (s *overwritingStore) PutSmallCreateOnly(_ context.Context, key string, body []byte, _ string) (minio.UploadInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs[key] = body
	return minio.UploadInfo{Key: key}, nil
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
	err := ProbeCreateOnly(ctxT(t, 10*time.Second), &overwritingStore{objs: map[string][]byte{}}, "fake-store", key)
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
	bad, err := objstore.New(badCfg)
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

//go:build !unit

package objstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// overwritingStore is an in-memory store that ignores the create-only
// condition: a PUT onto an existing key replaces it.
type overwritingStore struct{ objstore.Store }

func (s overwritingStore) PutCreateOnly(ctx context.Context, key string, body io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	_ = s.Delete(ctx, []string{key})
	return s.Store.PutCreateOnly(ctx, key, body, size, opts)
}

// TestProbeCreateOnly: the probe passes on the real store (every time: the
// probe object stays) and reports a store that overwrites an existing key
// as ErrCreateOnlyIgnored naming the store and the key.
func TestProbeCreateOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := testenv.Get(t).Store(t)
	key := testenv.Namespace(t).CreateOnlyProbeObject()
	for range 2 {
		if err := objstore.ProbeCreateOnly(ctx, st, key); err != nil {
			t.Fatalf("real store: %v", err)
		}
	}
	err := objstore.ProbeCreateOnly(ctx, overwritingStore{memstore.New("fake", time.Now)}, key)
	if !errors.Is(err, objstore.ErrCreateOnlyIgnored) || !strings.Contains(err.Error(), `bucket "fake"`) || !strings.Contains(err.Error(), key) {
		t.Fatalf("an overwriting store: %v; want ErrCreateOnlyIgnored naming bucket \"fake\" and %s", err, key)
	}
}

// TestProbeOverwrite: on the real store (MinIO, SeaweedFS) the credentials
// may overwrite the probe object, and the probe leaves its bytes and ETag
// as they were; behind a proxy that refuses a PUT without If-None-Match
// with 403 AccessDenied (AWS S3 under examples/policies/worker-aws.json)
// the probe reports the refusal.
func TestProbeOverwrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shared := testenv.Get(t)
	st := shared.Store(t)
	key := testenv.Namespace(t).CreateOnlyProbeObject()
	if err := objstore.ProbeCreateOnly(ctx, st, key); err != nil {
		t.Fatal(err)
	}
	before, err := st.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	refused, err := objstore.ProbeOverwrite(ctx, st, key)
	if err != nil || refused {
		t.Fatalf("real store: refused=%v, %v; want the overwrite let through", refused, err)
	}
	after, err := st.Stat(ctx, key)
	if err != nil || after.ETag != before.ETag || after.Size != before.Size {
		t.Fatalf("the probe changed the probe object: before %+v, after %+v (%v)", before, after, err)
	}

	guarded, err := s3store.New(testenv.RefuseOverwrite(t, shared.S3.S3Config()))
	if err != nil {
		t.Fatal(err)
	}
	if err := objstore.ProbeCreateOnly(ctx, guarded, key); err != nil {
		t.Fatalf("create-only probe through the refusing proxy: %v", err)
	}
	if refused, err := objstore.ProbeOverwrite(ctx, guarded, key); err != nil || !refused {
		t.Fatalf("behind a proxy refusing PUTs without If-None-Match: refused=%v, %v; want refused", refused, err)
	}
}

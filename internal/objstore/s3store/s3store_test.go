//go:build !unit

package s3store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/objstore/storetest"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestAcceptance runs the conformance suite on the shared real store:
// MinIO, and SeaweedFS in make test's second pass (FENCEPUB_TEST_STORE).
func TestAcceptance(t *testing.T) {
	env := testenv.Get(t)
	storetest.AcceptanceTest(t, func(t *testing.T) objstore.Store { return env.Store(t) })
}

// TestMissingBucket: the store's NoSuchBucket answer is ErrNoBucket (and
// so ErrNotFound) on a bucket call and on an object call.
func TestMissingBucket(t *testing.T) {
	cfg := testenv.Get(t).S3.S3Config()
	cfg.Bucket = "fencepub-no-such-bucket"
	st, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.CheckBucket(ctx); !errors.Is(err, objstore.ErrNoBucket) || !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("CheckBucket: %v, want ErrNoBucket", err)
	}
	if _, _, err := st.Get(ctx, "k", ""); !errors.Is(err, objstore.ErrNoBucket) {
		t.Fatalf("Get: %v, want ErrNoBucket", err)
	}
}

//go:build !unit

package s3store_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/storetest"
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

// TestNotS3Endpoint: an endpoint that answers HTTP but not as S3 (etcd's
// client port answers 404 with text, a web console an HTML page) is
// ErrNotS3 from CheckBucket and EnsureBucket, not a missing bucket; one
// that answers S3's XML errors stays ErrNoBucket.
func TestNotS3Endpoint(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body        string
		want        error
	}{
		{"etcd's port", http.StatusNotFound, "text/plain; charset=utf-8", "404 page not found\n", objstore.ErrNotS3},
		{"a console", http.StatusNotFound, "text/html", "<!doctype html><html></html>", objstore.ErrNotS3},
		{"S3", http.StatusNotFound, "application/xml", `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code></Error>`, objstore.ErrNoBucket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.status)
				if r.Method != http.MethodHead {
					_, _ = io.WriteString(w, tc.body)
				}
			}))
			defer srv.Close()
			st, err := s3store.New(s3store.Config{Endpoint: srv.URL, Bucket: "bucket-b", Credentials: s3store.CredentialsStatic, AccessKey: "k", SecretKey: "s", Region: "us-east-1"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := st.CheckBucket(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("CheckBucket: %v, want %v", err, tc.want)
			}
			err = st.EnsureBucket(ctx)
			if tc.want == objstore.ErrNotS3 && !errors.Is(err, objstore.ErrNotS3) {
				t.Fatalf("EnsureBucket: %v, want ErrNotS3", err)
			}
		})
	}
	// A malformed bucket name is a configuration error naming the key,
	// found before any request (not an unavailable store, retried).
	if _, err := s3store.New(s3store.Config{Endpoint: "127.0.0.1:9000", Bucket: "b"}); !errors.Is(err, objstore.ErrInvalidConfig) || !strings.Contains(err.Error(), "s3.bucket") {
		t.Fatalf("New with bucket \"b\": %v, want ErrInvalidConfig naming s3.bucket", err)
	}
}

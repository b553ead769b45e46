//go:build !unit

package testenv

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/objstore/s3store"
)

// IgnoreCreateOnly returns cfg (a plain-HTTP MinIO's) with its endpoint
// replaced by an HTTP proxy that behaves like a store ignoring
// If-None-Match: it answers every create-only PUT (If-None-Match: *) with
// 200 itself, as if it had written the object over whatever was there, and
// forwards every other request to MinIO unchanged. The proxy stops when t
// ends.
func IgnoreCreateOnly(t testing.TB, cfg s3store.Config) s3store.Config {
	t.Helper()
	target, err := url.Parse("http://" + strings.TrimPrefix(cfg.Endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fwd := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*" {
			w.Header().Set("ETag", `"00000000000000000000000000000001"`)
			w.WriteHeader(http.StatusOK)
			return
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.Endpoint = strings.TrimPrefix(srv.URL, "http://")
	return cfg
}

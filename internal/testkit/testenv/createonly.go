//go:build !unit

package testenv

import (
	"html"
	"io"
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

// RefuseOverwrite returns cfg (a plain-HTTP store's) with its endpoint
// replaced by an HTTP proxy that behaves like AWS S3 under a policy that
// admits object creation only with an If-None-Match header
// (examples/policies/worker-aws.json): it answers 403 AccessDenied to every
// PutObject, CopyObject and CompleteMultipartUpload request that carries no
// If-None-Match, and forwards every other request (those with the header,
// the parts and the start of a multipart upload, reads, listings, deletes)
// unchanged. The proxy stops when t ends.
func RefuseOverwrite(t testing.TB, cfg s3store.Config) s3store.Config {
	t.Helper()
	target, err := url.Parse("http://" + strings.TrimPrefix(cfg.Endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fwd := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		object := strings.Count(strings.Trim(r.URL.Path, "/"), "/") > 0 // path-style: /bucket/key
		creates := object && (r.Method == http.MethodPut && !q.Has("partNumber") && !q.Has("uploadId") ||
			r.Method == http.MethodPost && q.Has("uploadId"))
		if creates && r.Header.Get("If-None-Match") == "" {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Error><Code>AccessDenied</Code><Message>Access Denied</Message><Resource>`+html.EscapeString(r.URL.Path)+`</Resource></Error>`)
			return
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.Endpoint = strings.TrimPrefix(srv.URL, "http://")
	return cfg
}

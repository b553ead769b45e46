//go:build !unit

package s3store_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
)

// TestPresignedCreateOnly measures the ground of the planned upload
// service (docs/security-object-store.md, "The way out"): a presigned PUT
// whose signature covers an If-None-Match: * header is create-only, and
// cannot be sent without that header; If-None-Match put in the signed
// query string instead is ignored, so that PUT overwrites. Runs on the
// shared store (MinIO, and SeaweedFS in make test's second pass).
func TestPresignedCreateOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := testenv.Get(t).Store(t)
	key := testenv.Namespace(t).Root() + "presigned/object"
	if _, err := st.Client.PutObject(ctx, st.Bucket, key, strings.NewReader("published"), 9, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	put := func(u *url.URL, header http.Header, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	stored := func() string {
		t.Helper()
		obj, err := st.Client.GetObject(ctx, st.Bucket, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		b, err := io.ReadAll(obj)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ifNoneMatch := http.Header{"If-None-Match": {"*"}}

	signed, err := st.Client.PresignHeader(ctx, http.MethodPut, st.Bucket, key, time.Minute, nil, ifNoneMatch)
	if err != nil {
		t.Fatal(err)
	}
	if code := put(signed, ifNoneMatch, "forged"); code != http.StatusPreconditionFailed {
		t.Fatalf("presigned PUT with a signed If-None-Match header onto an existing key: HTTP %d, want 412", code)
	}
	if code := put(signed, nil, "forged"); code < 400 || code >= 500 {
		t.Fatalf("the same URL sent without the header: HTTP %d, want a refusal (the signature covers the header)", code)
	}
	if got := stored(); got != "published" {
		t.Fatalf("after the refused PUTs the object holds %q", got)
	}
	fresh := key + "-new"
	signedNew, err := st.Client.PresignHeader(ctx, http.MethodPut, st.Bucket, fresh, time.Minute, nil, ifNoneMatch)
	if err != nil {
		t.Fatal(err)
	}
	if code := put(signedNew, ifNoneMatch, "created"); code != http.StatusOK {
		t.Fatalf("presigned create-only PUT onto a new key: HTTP %d, want 200", code)
	}

	inQuery, err := st.Client.PresignHeader(ctx, http.MethodPut, st.Bucket, key, time.Minute, url.Values{"If-None-Match": {"*"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code := put(inQuery, nil, "forged"); code != http.StatusOK {
		t.Fatalf("presigned PUT with If-None-Match in the query string: HTTP %d; it overwrote before (docs/security-object-store.md is then out of date)", code)
	}
	if got := stored(); got != "forged" {
		t.Fatalf("after the query-string PUT the object holds %q, want it overwritten", got)
	}
}

//go:build !unit

package publisher

import (
	"bytes"
	"crypto/rand"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
)

// TestRepublishMultipart republishes an object written in a
// multipart upload — what `recover --republish` does with a large publish
// an etcd restore lost. Such an object carries no sha256 metadata; before
// the fix Republish refused it (ErrObjectMismatch), so a lost state larger
// than one part could not be brought back. It now hashes the object once
// (conditioned on its ETag), and the republished version carries the same
// bytes and the original request digest.
func TestRepublishMultipart(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	c := e.client(e.Etcd, func(c *Config) { c.PartSize = minPartSize })
	body := make([]byte, minPartSize+4321)
	_, _ = rand.Read(body)
	ga := e.acquire(authority.AcquireRequest{Resource: "big", Owner: "A"})
	pa, err := c.Bind(ctx, GrantTerm(ga, false))
	if err != nil {
		t.Fatal(err)
	}
	// A body of unknown length above PartSize goes through multipart.
	orig, err := pa.Publish(ctx, Operation{IdempotencyKey: "lost", Body: io.MultiReader(bytes.NewReader(body)), ContentType: "application/x-big",
		Metadata: map[string]string{"origin": "test"}})
	mustOutcome(t, "multipart publish", orig, err, Applied, reasonNone)
	if !strings.Contains(orig.Object.ETag, "-") {
		t.Fatalf("ETag %q: not a multipart upload", orig.Object.ETag)
	}
	e.release(ga)
	gb := e.acquire(authority.AcquireRequest{Resource: "big", Owner: "B"})
	r, err := e.bind(gb, false).republishKey(ctx, orig.Object.Key, "republish-lost")
	mustOutcome(t, "republish of a multipart object", r, err, Applied, reasonNone)
	if r.Digest != orig.Digest || r.Object.SHA256 != orig.Object.SHA256 || r.Object.Key == orig.Object.Key {
		t.Fatalf("republished %+v; want the original digest %s and sha256 %s under a new key", r, orig.Digest, orig.Object.SHA256)
	}
	if got := e.readVerified("big"); got != string(body) {
		t.Fatalf("reader got %d other bytes", len(got))
	}
}

// Republishing a dataset version's manifest index (what `recover
// --republish` does with a dataset publish an etcd restore lost) publishes
// a dataset version again: its files copied under the new version's key,
// the original content digest, every file readable by path; not the
// index's bytes as a single object, whose older version's files GC would
// then collect.
func TestRepublishDataset(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	ga := e.acquire(authority.AcquireRequest{Resource: "ds", Owner: "A"})
	orig, err := e.bind(ga, false).PublishDataset(ctx, dataset("lost", BaseNone, files("a.txt", "alpha", "dir/b", "beta")...))
	mustOutcome(t, "dataset publish", orig.Result, err, Applied, reasonNone)
	e.release(ga)
	gb := e.acquire(authority.AcquireRequest{Resource: "ds", Owner: "B"})
	r, err := e.bind(gb, false).republishKey(ctx, orig.Object.Key, "republish-lost")
	mustOutcome(t, "republish of a dataset", r, err, Applied, reasonNone)
	if r.Digest != orig.Digest || r.Object.Key == orig.Object.Key {
		t.Fatalf("republished %+v; want the original digest %s under a new key", r, orig.Digest)
	}
	ptr, es := e.entries("ds")
	if ptr.Version != r.Version || len(es) != 2 || e.content(es["a.txt"]) != "alpha" || e.content(es["dir/b"]) != "beta" {
		t.Fatalf("pointer %s with %v; want the republished dataset", ptr.Version, es)
	}
	for path, en := range es {
		if en.Key != layout.FileKey(r.Object.Key, path) {
			t.Fatalf("%s is %s, not a copy under the new version's key", path, en.Key)
		}
	}
}

//go:build !unit

package reader

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/minio/minio-go/v7"
)

// publishDataset publishes path=content pairs as a dataset of res.
func (e *env) publishDataset(key string, pairs ...string) publisher.DatasetResult {
	e.t.Helper()
	var fs []publisher.File
	for i := 0; i+1 < len(pairs); i += 2 {
		fs = append(fs, publisher.BytesFile(pairs[i], []byte(pairs[i+1]), "text/plain"))
	}
	r, err := e.pub.PublishDataset(ctxT(e.t, time.Minute), publisher.Dataset{IdempotencyKey: key, Files: publisher.FileList(fs)})
	if err != nil || r.Outcome != publisher.Applied {
		e.t.Fatalf("publish dataset %s: %+v %v", key, r.Result, err)
	}
	return r
}

// A file of the current dataset version is read by path, verified; the
// manifest lists every file; a path it lacks is ErrNoSuchFile.
func TestOpenFileAndList(t *testing.T) {
	e := newEnv(t)
	e.publishDataset("v1", "a.txt", "one", "dir/b.txt", "two")
	v2 := e.publishDataset("v2", "a.txt", "one", "dir/b.txt", "TWO", "c", "three")
	r := e.reader(e.Etcd)
	ctx := ctxT(t, 30*time.Second)
	for path, want := range map[string]string{"a.txt": "one", "dir/b.txt": "TWO", "c": "three"} {
		got, err := drain(r.OpenFile(ctx, path))
		if err != nil || got != want {
			t.Fatalf("OpenFile(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := r.OpenFile(ctx, "missing"); !errors.Is(err, ErrNoSuchFile) {
		t.Fatalf("missing path: %v", err)
	}
	ptr, err := r.Current(ctx)
	if err != nil || ptr.Version != v2.Version {
		t.Fatal(ptr, err)
	}
	var paths []string
	for f, err := range r.Files(ctx, ptr) {
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, f.Path)
	}
	if strings.Join(paths, " ") != "a.txt c dir/b.txt" {
		t.Fatalf("listed %q", paths)
	}
	e.publish("single", "not a dataset")
	if _, err := r.OpenFile(ctx, "a.txt"); !errors.Is(err, ErrNotDataset) {
		t.Fatalf("OpenFile of a single object: %v", err)
	}
}

// A file whose bytes in the bucket are not the ones published is reported,
// naming its path.
func TestOpenFileCorrupted(t *testing.T) {
	e := newEnv(t)
	v := e.publishDataset("v1", "good", "fine", "bad", "original")
	key := layout.FileKey(v.Object.Key, "bad")
	if _, err := e.Store.Client.PutObject(ctxT(t, 10*time.Second), e.Store.Bucket, key, strings.NewReader("tampered"), 8, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	r := e.reader(e.Etcd)
	_, err := drain(r.OpenFile(ctxT(t, 30*time.Second), "bad"))
	if !errors.Is(err, ErrObjectChanged) && !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("corrupted file: %v; want a mismatch naming the path", err)
	}
	if got, err := drain(r.OpenFile(ctxT(t, 30*time.Second), "good")); err != nil || got != "fine" {
		t.Fatalf("good file: %q %v", got, err)
	}
}

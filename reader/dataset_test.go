//go:build !unit

package reader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
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
	if _, err := r.OpenFile(ctx, "missing"); !errors.Is(err, ErrNoSuchFile) || !errors.Is(err, fencepub.ErrInvalid) || errors.Is(err, fencepub.ErrUnavailable) {
		t.Fatalf("missing path: %v; want ErrNoSuchFile, a fencepub.ErrInvalid", err)
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
	if _, err := r.OpenFile(ctx, "a.txt"); !errors.Is(err, ErrNotDataset) || !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("OpenFile of a single object: %v; want ErrNotDataset, a fencepub.ErrInvalid", err)
	}
	sp, err := r.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range r.Files(ctx, sp) {
		if !errors.Is(err, ErrNotDataset) || !errors.Is(err, fencepub.ErrInvalid) {
			t.Fatalf("Files of a single object: %v; want ErrNotDataset, a fencepub.ErrInvalid", err)
		}
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

// countingStore counts the Gets sent through it.
type countingStore struct {
	objstore.Store
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, key, ifMatch string) (io.ReadCloser, objstore.ObjectInfo, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key, ifMatch)
}

// A cold read of one file of a paged manifest costs the index GET, one page
// GET and the file's GET; a second read of a file of the same page costs
// only the file's GET (the manifest is cached by sha256).
func TestOpenFileRequests(t *testing.T) {
	e := newEnv(t)
	var fs []publisher.File
	for i := range 1500 { // two pages of 1000 entries
		fs = append(fs, publisher.BytesFile(fmt.Sprintf("part-%05d", i), []byte(strconv.Itoa(i)), "text/plain"))
	}
	r, err := e.pub.PublishDataset(ctxT(t, 2*time.Minute), publisher.Dataset{IdempotencyKey: "big", Files: publisher.FileList(fs), Parallel: 16})
	if err != nil || r.Outcome != publisher.Applied {
		t.Fatalf("publish: %+v %v", r.Result, err)
	}
	st := &countingStore{Store: e.Store}
	rd := e.reader(e.Etcd, func(c *Config) { c.Store = st })
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		path string
		gets int64
	}{{"part-01234", 3}, {"part-01499", 1}, {"part-00007", 2}} {
		before := st.gets.Load()
		got, err := drain(rd.OpenFile(ctx, tc.path))
		want := strings.TrimLeft(strings.TrimPrefix(tc.path, "part-"), "0")
		if err != nil || got != want {
			t.Fatalf("OpenFile(%q) = %q, %v; want %q", tc.path, got, err, want)
		}
		if n := st.gets.Load() - before; n != tc.gets {
			t.Fatalf("OpenFile(%q) sent %d GETs, want %d", tc.path, n, tc.gets)
		}
	}
}

// The single-object reads refuse a dataset version with ErrIsDataset
// instead of returning its manifest's bytes as content: Open (with and
// without a speculative guess from an earlier Open), OpenPointer and
// OpenVersion; the files stay readable by path.
func TestOpenRefusesDataset(t *testing.T) {
	e := newEnv(t)
	e.publish("single", "one object")
	r := e.reader(e.Etcd)
	ctx := ctxT(t, 30*time.Second)
	if got, err := drain(r.Open(ctx)); err != nil || got != "one object" {
		t.Fatalf("Open of a single object = %q, %v", got, err)
	}
	ds := e.publishDataset("dataset", "a.txt", "one")
	ptr, err := r.Current(ctx)
	if err != nil || !ptr.IsDataset() {
		t.Fatalf("Current = %+v, %v; want the dataset", ptr, err)
	}
	fresh := e.reader(e.Etcd)
	for name, open := range map[string]func() (*Body, error){
		"Open after a single object": func() (*Body, error) { return r.Open(ctx) },
		"Open of a new Reader":       func() (*Body, error) { return fresh.Open(ctx) },
		"OpenPointer":                func() (*Body, error) { return r.OpenPointer(ctx, ptr) },
		"OpenVersion":                func() (*Body, error) { return r.OpenVersion(ctx, ds.Version) },
	} {
		b, err := open()
		if !errors.Is(err, ErrIsDataset) || !errors.Is(err, fencepub.ErrInvalid) || !strings.Contains(err.Error(), ds.Version.String()) {
			t.Errorf("%s: %v; want ErrIsDataset (a fencepub.ErrInvalid) naming %s", name, err, ds.Version)
		}
		if b != nil {
			_ = b.Close()
			t.Errorf("%s returned a body", name)
		}
	}
	if got, err := drain(r.OpenFile(ctx, "a.txt")); err != nil || got != "one" {
		t.Fatalf("OpenFile = %q, %v", got, err)
	}
}

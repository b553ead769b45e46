//go:build !unit

package publisher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
)

// files returns an in-memory file per path=content pair.
func files(pairs ...string) []File {
	var out []File
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, BytesFile(pairs[i], []byte(pairs[i+1]), "text/plain"))
	}
	return out
}

func dataset(key string, base Base, fs ...File) Dataset {
	return Dataset{IdempotencyKey: key, Files: FileList(fs), Base: base}
}

// entries reads the manifest the pointer of res names, checking that the
// pointer says dataset with the manifest's counts.
func (e *env) entries(res string) (layout.Pointer, map[string]manifest.Entry) {
	e.t.Helper()
	ctx := ctxT(e.t, 30*time.Second)
	kv, err := e.Etcd.Get(ctx, e.NS.PointerKey(res))
	if err != nil || len(kv.Kvs) == 0 {
		e.t.Fatalf("pointer of %s: %v", res, err)
	}
	ptr, err := layout.DecodePointer(kv.Kvs[0].Value)
	if err != nil {
		e.t.Fatal(err)
	}
	if !ptr.IsDataset() {
		e.t.Fatalf("the pointer %+v is not a dataset", ptr)
	}
	ix, err := manifest.LoadIndex(ctx, e.Store, ptr.Object)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]manifest.Entry{}
	var bytes int64
	for en, err := range manifest.NewCache(0).All(ctx, e.Store, ix) {
		if err != nil {
			e.t.Fatal(err)
		}
		out[en.Path] = en
		bytes += en.Size
	}
	if ptr.Files != int64(len(out)) || ptr.Bytes != bytes {
		e.t.Fatalf("pointer says %d files, %d bytes; the manifest holds %d, %d", ptr.Files, ptr.Bytes, len(out), bytes)
	}
	return ptr, out
}

// content reads the object an entry names and checks its sha256.
func (e *env) content(en manifest.Entry) string {
	e.t.Helper()
	body, _, err := e.Store.Get(ctxT(e.t, 30*time.Second), en.Key, en.ETag)
	if err != nil {
		e.t.Fatalf("get %s: %v", en.Key, err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		e.t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != en.SHA256 {
		e.t.Fatalf("%s: bytes do not match the entry's sha256", en.Path)
	}
	return string(b)
}

// A dataset publish stores every file under the version's key and a
// manifest naming them; a retry of the same job with the same output is
// duplicate, with other output conflict.
func TestDatasetPublishRetryDuplicate(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	fs := files("b/2.txt", "two", "a.txt", "one", "b-c", "three", "empty", "")
	r, err := p.PublishDataset(ctx, Dataset{IdempotencyKey: "k1", Files: FileList(fs), Parallel: 2})
	mustOutcome(t, "publish", r.Result, err, Applied, reasonNone)
	if r.Files != 4 || r.Bytes != 11 || r.UploadedFiles != 4 || r.ReusedFiles != 0 || r.SHA256 != r.Object.SHA256 {
		t.Fatalf("stats %+v", r.DatasetStats)
	}
	ptr, es := e.entries("r")
	if ptr.Version != r.Version || ptr.Object.Key != e.NS.ObjectKey("r", r.Version, ptr.Object.Key[len(ptr.Object.Key)-layout.NonceLen:]) {
		t.Fatalf("pointer %+v does not name the publish's manifest at its own key", ptr)
	}
	for _, f := range fs {
		en := es[f.Path]
		if en.Key != layout.FileKey(ptr.Object.Key, f.Path) {
			t.Fatalf("%s is stored at %s, not under the version's key", f.Path, en.Key)
		}
		b, _ := f.Open()
		want, _ := io.ReadAll(b)
		if got := e.content(en); got != string(want) {
			t.Fatalf("%s holds %q, want %q", f.Path, got, want)
		}
	}

	// The same job again, from another term: duplicate, the original
	// version; the pointer does not move.
	q := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w2", Wait: true}), false)
	again, err := q.PublishDataset(ctx, dataset("k1", BaseNone, fs...))
	mustOutcome(t, "retry", again.Result, err, Duplicate, reasonNone)
	if again.Version != r.Version || again.Digest != r.Digest {
		t.Fatalf("duplicate names %s (digest %s), want %s (%s)", again.Version, again.Digest, r.Version, r.Digest)
	}
	if now, _ := e.entries("r"); now.Version != r.Version {
		t.Fatalf("a duplicate moved the pointer to %s", now.Version)
	}
	other, err := q.PublishDataset(ctx, dataset("k1", BaseNone, files("a.txt", "ONE")...))
	mustOutcome(t, "other output under the same key", other.Result, err, Conflict, reasonNone)
}

// Files equal to the base's are not uploaded: the new manifest names the
// base's objects. Changed and new files are uploaded; a file the new
// version drops is not named.
func TestDatasetReuse(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	r1, err := p.PublishDataset(ctx, dataset("v1", "", files("a", "same", "b", "old", "c", "dropped")...))
	mustOutcome(t, "v1", r1.Result, err, Applied, reasonNone)
	_, es1 := e.entries("r")
	r2, err := p.PublishDataset(ctx, dataset("v2", "", files("a", "same", "b", "new", "d", "added")...))
	mustOutcome(t, "v2", r2.Result, err, Applied, reasonNone)
	if r2.Base == nil || *r2.Base != r1.Version || r2.ReusedFiles != 1 || r2.UploadedFiles != 2 || r2.UploadedBytes != 8 {
		t.Fatalf("v2 stats %+v; want base %s, 1 reused, 2 uploaded (8 bytes)", r2.DatasetStats, r1.Version)
	}
	_, es2 := e.entries("r")
	if es2["a"].Key != es1["a"].Key || es2["b"].Key == es1["b"].Key || len(es2) != 3 {
		t.Fatalf("v2 manifest %+v; want a reused from %s", es2, es1["a"].Key)
	}
	if e.content(es2["b"]) != "new" || e.content(es2["a"]) != "same" {
		t.Fatal("v2's files do not hold v2's bytes")
	}
	// With no base, nothing is reused.
	r3, err := p.PublishDataset(ctx, dataset("v3", BaseNone, files("a", "same")...))
	mustOutcome(t, "v3", r3.Result, err, Applied, reasonNone)
	if r3.Base != nil || r3.ReusedFiles != 0 || r3.UploadedFiles != 1 {
		t.Fatalf("v3 stats %+v; want nothing reused", r3.DatasetStats)
	}
}

// Invariant 15: the publish transaction compares the pointer to the base
// exactly. Old worker A publishes (fencing allows it: B has not committed)
// while B, whose base is A's first version, uploads: B is stale with
// reason base, and nothing of B is published.
func TestDatasetBaseMoved(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	ga := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "a"})
	a := e.bind(ga, false)
	r1, err := a.PublishDataset(ctx, dataset("a1", "", files("x", "1", "y", "2")...))
	mustOutcome(t, "a1", r1.Result, err, Applied, reasonNone)
	e.expire(ga)
	b := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "b", Wait: true}), false)
	var moved Result
	ds := dataset("b1", BaseCurrent, files("x", "1", "y", "changed")...)
	ds.Progress = func(FileDone) {
		if moved.Outcome == "" {
			var err error
			moved, err = a.Publish(ctx, op("a2", "A's late write"))
			mustOutcome(t, "A's late write", moved, err, Applied, reasonNone)
		}
	}
	r2, err := b.PublishDataset(ctx, ds)
	mustOutcome(t, "B with a moved base", r2.Result, err, Stale, ReasonBase)
	if r2.Base == nil || *r2.Base != r1.Version || r2.ReusedFiles != 1 {
		t.Fatalf("B's stats %+v: it did not reuse from %s", r2.DatasetStats, r1.Version)
	}
	if got := e.history("r"); len(got) != 2 || got[1] != moved.Version {
		t.Fatalf("history %v; want A's two versions only", got)
	}
	// B's next publish takes the pointer as its base again.
	r3, err := b.PublishDataset(ctx, ds)
	mustOutcome(t, "B again", r3.Result, err, Applied, reasonNone)
}

// A worker paused mid-upload while a newer worker publishes, then resumed:
// its transaction is stale and nothing of it is published.
func TestDatasetPausedWorker(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	ga := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "a"})
	a := e.bind(ga, false)
	paused, resume := make(chan struct{}), make(chan struct{})
	slow := File{Path: "z-last", ContentType: "text/plain", Open: func() (io.ReadCloser, error) {
		select {
		case <-paused:
		default:
			close(paused)
		}
		<-resume
		return io.NopCloser(strings.NewReader("A's late file")), nil
	}}
	type answer struct {
		r   DatasetResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := a.PublishDataset(ctx, dataset("a1", BaseNone, append(files("a", "A"), slow)...))
		done <- answer{r, err}
	}()
	<-paused
	e.expire(ga)
	b := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "b", Wait: true}), false)
	rb, err := b.PublishDataset(ctx, dataset("b1", BaseNone, files("a", "B")...))
	mustOutcome(t, "B", rb.Result, err, Applied, reasonNone)
	close(resume)
	ra := <-done
	mustOutcome(t, "A resumed", ra.r.Result, ra.err, Stale, ReasonPointer)
	ptr, es := e.entries("r")
	if ptr.Version != rb.Version || len(es) != 1 || e.content(es["a"]) != "B" {
		t.Fatalf("pointer %s with %d files; want B's %s", ptr.Version, len(es), rb.Version)
	}
}

// A dataset publish whose transaction gets no answer is unknown; Resolve
// settles it by its manifest key and digest.
func TestDatasetUnknownResolves(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, c := e.proxied(nil)
	g := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"})
	p, err := c.Bind(ctx, GrantTerm(g, false))
	if err != nil {
		t.Fatal(err)
	}
	px.Set(faultproxy.Faults{DropUpstream: true})
	uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := p.PublishDataset(uctx, dataset("k", BaseNone, files("a", "1")...))
	mustOutcome(t, "unanswered", r.Result, err, Unknown, reasonNone)
	res, err := e.pub.Resolve(ctx, "r", "k", r.Version, r.AttemptID())
	mustOutcome(t, "resolve", res, err, Stale, ReasonSeal)
	if got := e.history("r"); len(got) != 0 {
		t.Fatalf("history %v after a resolved unknown", got)
	}
}

// Hostile paths and bad file lists are refused before anything is
// published, and the seq is given back.
func TestDatasetHostilePaths(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	for _, fs := range [][]File{
		files("../escape", "x"), files("/abs", "x"), files("a//b", "x"), files("a/./b", "x"), files("a\\b", "x"),
		files("bad\xffutf8", "x"), files("nul\x00", "x"), files("cafe\u0301", "x"), files("a", "1", "a", "2"),
		files("a", "file", "a/b", "inside a file"), files("", "x"),
	} {
		next := p.nextSeq()
		r, err := p.PublishDataset(ctx, dataset("k", BaseNone, fs...))
		if !errors.Is(err, fencepub.ErrInvalid) || r.Outcome != "" {
			t.Fatalf("files %q: outcome %q, err %v; want ErrInvalid", fs[0].Path, r.Outcome, err)
		}
		if p.nextSeq() != next {
			t.Fatalf("files %q: seq %d not given back (next %d)", fs[0].Path, next, p.nextSeq())
		}
	}
	if got := e.history("r"); len(got) != 0 {
		t.Fatalf("history %v", got)
	}
}

// DirFiles walks a directory in manifest order and refuses symbolic links
// (unless followed), special files and paths that are not valid UTF-8.
func TestDirFilesRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/b", "1")
	write("a-c", "22")
	write("z", "")
	n, size, err := dirTotals(dir, DirOptions{})
	if err != nil || n != 3 || size != 3 {
		t.Fatalf("dirTotals: %d files, %d bytes, %v", n, size, err)
	}
	var order []string
	for f, err := range DirFiles(dir, DirOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, f.Path)
	}
	if strings.Join(order, " ") != "a/b a-c z" {
		t.Fatalf("order %q", order)
	}
	if err := os.Symlink(filepath.Join(dir, "z"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dirTotals(dir, DirOptions{}); !errors.Is(err, fencepub.ErrInvalid) || !strings.Contains(err.Error(), "link") {
		t.Fatalf("symlink: %v", err)
	}
	if n, _, err := dirTotals(dir, DirOptions{FollowSymlinks: true}); err != nil || n != 4 {
		t.Fatalf("followed symlink: %d files, %v", n, err)
	}
	_ = os.Remove(filepath.Join(dir, "link"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dirTotals(dir, DirOptions{}); !errors.Is(err, fencepub.ErrInvalid) || !strings.Contains(err.Error(), "fifo") {
		t.Fatalf("fifo: %v", err)
	}
	_ = os.Remove(filepath.Join(dir, "fifo"))
	write("bad\xff", "x")
	if _, _, err := dirTotals(dir, DirOptions{}); !errors.Is(err, fencepub.ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("non-UTF-8 name: %v", err)
	}
}

// A manifest larger than a page is paged, and reuse follows the base's
// pages: every unchanged file of a three-page base is reused, changed and
// new ones (in any page) are uploaded.
func TestDatasetPagedReuse(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	gen := func(changed map[int]string, extra ...string) []File {
		var fs []File
		for i := range 2500 {
			body := fmt.Sprintf("file %d", i)
			if c, ok := changed[i]; ok {
				body = c
			}
			fs = append(fs, BytesFile(fmt.Sprintf("d%d/part-%05d", i%3, i), []byte(body), "text/plain"))
		}
		return append(fs, files(extra...)...)
	}
	r1, err := p.PublishDataset(ctx, Dataset{IdempotencyKey: "v1", Files: FileList(gen(nil)), Parallel: 16})
	mustOutcome(t, "v1", r1.Result, err, Applied, reasonNone)
	ix, err := manifest.LoadIndex(ctx, e.Store, r1.Object)
	if err != nil || ix.Header.Pages != 3 {
		t.Fatalf("index of 2500 entries: %v pages, %v", ix, err)
	}
	r2, err := p.PublishDataset(ctx, Dataset{IdempotencyKey: "v2", Files: FileList(gen(map[int]string{5: "x", 2200: "y"}, "d1/new", "z")), Parallel: 16})
	mustOutcome(t, "v2", r2.Result, err, Applied, reasonNone)
	if r2.ReusedFiles != 2498 || r2.UploadedFiles != 3 || r2.Files != 2501 {
		t.Fatalf("v2 stats %+v; want 2498 reused, 3 uploaded", r2.DatasetStats)
	}
	_, es := e.entries("r")
	if len(es) != 2501 || e.content(es["d2/part-00005"]) != "x" || e.content(es["d1/new"]) != "z" || e.content(es["d0/part-02400"]) != "file 2400" {
		t.Fatalf("v2 manifest holds %d entries or the wrong bytes", len(es))
	}
}

// A dataset publish that stops at each stage — while its files are read
// (nothing sent), or with its transaction unanswered (unknown) — is rerun
// with the same key: the rerun is applied once, a later rerun is
// duplicate, and the unknown attempt resolves to a definite answer: the
// rerun, bound afresh to the same grant, took the same version with the
// same request digest, so the content the attempt named is applied at its
// version (invariant 11 names an attempt by digest or object key).
func TestDatasetRerunAfterFailure(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	fs := files("a", "1", "b", "2", "c", "3")
	px, c := e.proxied(nil)
	g := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"})
	p, err := c.Bind(ctx, GrantTerm(g, false))
	if err != nil {
		t.Fatal(err)
	}

	// Stage 1: the job's file source fails after two files.
	broken := func(yield func(File, error) bool) {
		for _, f := range fs[:2] {
			if !yield(f, nil) {
				return
			}
		}
		yield(File{}, errors.New("the job died"))
	}
	next := p.nextSeq()
	r, err := p.PublishDataset(ctx, Dataset{IdempotencyKey: "k", Files: broken})
	if err == nil || r.Outcome != "" || p.nextSeq() != next {
		t.Fatalf("a failing file source: outcome %q err %v, next seq %d (was %d)", r.Outcome, err, p.nextSeq(), next)
	}

	// Stage 2: the transaction gets no answer.
	px.Set(faultproxy.Faults{DropUpstream: true})
	uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	unknown, err := p.PublishDataset(uctx, dataset("k", BaseNone, fs...))
	mustOutcome(t, "unanswered", unknown.Result, err, Unknown, reasonNone)

	// The rerun, through a working connection, under the same grant.
	q := e.bind(g, false)
	rerun, err := q.PublishDataset(ctx, dataset("k", BaseNone, fs...))
	mustOutcome(t, "rerun", rerun.Result, err, Applied, reasonNone)
	again, err := q.PublishDataset(ctx, dataset("k", BaseCurrent, fs...))
	mustOutcome(t, "second rerun", again.Result, err, Duplicate, reasonNone)
	if again.UploadedFiles != 0 || again.Version != rerun.Version {
		t.Fatalf("second rerun uploaded %d files, names %s (want %s)", again.UploadedFiles, again.Version, rerun.Version)
	}
	res, err := e.pub.Resolve(ctx, "r", "k", unknown.Version, unknown.AttemptID())
	mustOutcome(t, "resolve the unknown attempt", res, err, Applied, reasonNone)
	if unknown.Version != rerun.Version || res.Object.Key != rerun.Object.Key {
		t.Fatalf("resolve names %s %s; the rerun applied %s %s", res.Version, res.Object.Key, rerun.Version, rerun.Object.Key)
	}
	if got := e.history("r"); len(got) != 1 || got[0] != rerun.Version {
		t.Fatalf("history %v; want only the rerun's %s", got, rerun.Version)
	}
}

// Rolling back to a dataset version publishes its files again as a new
// version, each copied server-side under the new version's key (nothing
// reused), with the old version's content digest. A file of the old
// version that is gone makes the rollback fail with ErrSourceGone,
// nothing published.
func TestDatasetRollback(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	r1, err := p.PublishDataset(ctx, dataset("v1", "", files("a", "one", "d/b", "two")...))
	mustOutcome(t, "v1", r1.Result, err, Applied, reasonNone)
	_, es1 := e.entries("r")
	r2, err := p.PublishDataset(ctx, dataset("v2", "", files("a", "changed")...))
	mustOutcome(t, "v2", r2.Result, err, Applied, reasonNone)
	rb, err := p.Rollback(ctx, r1.Version, "rollback-1")
	mustOutcome(t, "rollback", rb, err, Applied, reasonNone)
	ptr, es := e.entries("r")
	if ptr.Version != rb.Version || rb.Digest != r1.Digest || len(es) != 2 {
		t.Fatalf("rollback published %s (digest %s, %d files); want a new version with v1's digest %s", ptr.Version, rb.Digest, len(es), r1.Digest)
	}
	for path, want := range map[string]string{"a": "one", "d/b": "two"} {
		if es[path].Key != layout.FileKey(ptr.Object.Key, path) || e.content(es[path]) != want {
			t.Fatalf("%s: key %s, not a copy of v1's under the new version", path, es[path].Key)
		}
	}
	if err := e.Store.Delete(ctx, []string{es1["d/b"].Key})[0]; err != nil {
		t.Fatal(err)
	}
	next := p.nextSeq()
	gone, err := p.Rollback(ctx, r1.Version, "rollback-2")
	if !errors.Is(err, ErrSourceGone) || gone.Outcome != "" || p.nextSeq() != next {
		t.Fatalf("rollback to a version whose file is gone: %q, %v, next seq %d (was %d)", gone.Outcome, err, p.nextSeq(), next)
	}
}

// Hostile local trees: the directory given through a symbolic link is
// walked (not published as empty); a symbolic-link loop, a name not in NFC
// and a path over the length limit are refused naming the path; a file
// replaced by a pipe or a symbolic link after the walk is refused when
// opened, promptly, instead of blocking on the pipe or reading the link's
// target.
func TestDirFilesHostile(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "out")
	write := func(rel, body string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "1")
	write("sub/b", "22")
	link := filepath.Join(base, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if n, size, err := dirTotals(link, DirOptions{}); err != nil || n != 2 || size != 3 {
		t.Fatalf("dirTotals through a link to the directory: %d files, %d bytes, %v; want 2, 3", n, size, err)
	}

	refused := func(what, want string, opts DirOptions) {
		t.Helper()
		_, _, err := dirTotals(dir, opts)
		if !errors.Is(err, fencepub.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v; want ErrInvalid naming %q", what, err, want)
		}
	}
	loop := filepath.Join(dir, "loop")
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	refused("a symbolic link loop, followed", "loop", DirOptions{FollowSymlinks: true})
	_ = os.Remove(loop)
	write("cafe\u0301", "x")
	refused("a name in NFD", "cafe\u0301", DirOptions{})
	_ = os.Remove(filepath.Join(dir, "cafe\u0301"))
	long := strings.Repeat(strings.Repeat("d", 200)+"/", 4) + "f"
	write(long, "x")
	refused("a path over the limit", "the limit is", DirOptions{})
	_ = os.RemoveAll(filepath.Join(dir, strings.Repeat("d", 200)))

	fs := map[string]File{}
	for f, err := range DirFiles(dir, DirOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		fs[f.Path] = f
	}
	secret := filepath.Join(base, "secret")
	if err := os.WriteFile(secret, []byte("not for publishing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "sub", "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "sub", "b")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"a": "no longer a regular file", "sub/b": "symbolic link"} {
		opened := make(chan error, 1)
		go func() {
			body, err := fs[path].Open()
			if err == nil {
				_ = body.Close()
			}
			opened <- err
		}()
		select {
		case err := <-opened:
			if !errors.Is(err, fencepub.ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s replaced after the walk: Open = %v; want ErrInvalid saying %q", path, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s replaced by a pipe after the walk: Open blocks", path)
		}
	}
}

// dirTotals is the number of files DirFiles(dir, opts) yields and their
// bytes, or its first error.
func dirTotals(dir string, opts DirOptions) (n, size int64, err error) {
	for f, err := range DirFiles(dir, opts) {
		if err != nil {
			return n, size, err
		}
		n, size = n+1, size+f.Size
	}
	return n, size, nil
}

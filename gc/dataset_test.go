//go:build !unit

package gc

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/publisher"
)

// publishDataset publishes path=content pairs as a dataset with p and
// fails t unless the outcome is want.
func (e *env) publishDataset(p *publisher.Publisher, key string, base publisher.Base, want publisher.Outcome, pairs ...string) publisher.DatasetResult {
	e.t.Helper()
	var fs []publisher.File
	for i := 0; i+1 < len(pairs); i += 2 {
		fs = append(fs, publisher.BytesFile(pairs[i], []byte(pairs[i+1]), "text/plain"))
	}
	r, err := p.PublishDataset(ctxT(e.t, time.Minute), publisher.Dataset{IdempotencyKey: key, Files: publisher.FileList(fs), Base: base})
	if r.Outcome != want {
		e.t.Fatalf("dataset %s: outcome %q reason %q err %v; want %q", key, r.Outcome, r.Reason, err, want)
	}
	return r
}

// manifestOf returns the entries of the manifest obj names, by path.
func (e *env) manifestOf(obj layout.Object) map[string]manifest.Entry {
	e.t.Helper()
	ctx := ctxT(e.t, 30*time.Second)
	ix, err := manifest.LoadIndex(ctx, e.st, obj)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]manifest.Entry{}
	for en, err := range manifest.NewCache(0).All(ctx, e.st, ix) {
		if err != nil {
			e.t.Fatal(err)
		}
		out[en.Path] = en
	}
	return out
}

// aged runs a pass over res per clock offset in ds (later), keeping only
// the newest version beyond the grace (Retain 1), and returns the last
// pass's report and error. The first offset gives the domain clock a point
// to measure the grace from; a version superseded before it is past the
// grace at an offset an hour later.
func (e *env) aged(res string, ds ...time.Duration) (*passReport, error) {
	e.t.Helper()
	var (
		rep *passReport
		err error
	)
	for _, d := range ds {
		c := e.collector(func(c *Config) { later(d)(c); c.Policy = Policy{Retain: 1} })
		rep, err = c.runPass(ctxT(e.t, time.Minute), RunOptions{Resources: []string{res}}, true)
	}
	return rep, err
}

// mustAge is aged, failing t on an error.
func (e *env) mustAge(res string, ds ...time.Duration) *passReport {
	e.t.Helper()
	rep, err := e.aged(res, ds...)
	if err != nil {
		e.t.Fatalf("gc pass: %v\nreport errors: %v", err, rep.Errors)
	}
	return rep
}

// GC keeps every object a retained manifest names, its own files and the
// ones it reuses from an older version, and collects everything else under
// an unpublishable version's key (its manifest and the files no retained
// manifest names); a stale attempt's files go the same way. A dry run says
// which retained version names a kept older file.
func TestDatasetFilesKeptWhileNamed(t *testing.T) {
	e := newEnv(t)
	const res = "export"
	ga, a := e.worker(res, "a")
	v1 := e.publishDataset(a, "v1", publisher.BaseNone, publisher.Applied, "keep", "same", "b", "old", "c", "dropped")
	files1 := e.manifestOf(v1.Object)
	e.expire(ga)
	_, b := e.worker(res, "b")
	v2 := e.publishDataset(b, "v2", publisher.BaseCurrent, publisher.Applied, "keep", "same", "b", "new", "d", "added")
	if v2.ReusedFiles != 1 {
		t.Fatalf("v2 reused %d files, want 1", v2.ReusedFiles)
	}
	files2 := e.manifestOf(v2.Object)
	// A's late attempt, after B's publish: stale, its files unpublishable.
	late := e.publishDataset(a, "a-late", publisher.BaseNone, publisher.Stale, "x", "late")
	lateKey := late.Attempt.Object.Key
	lateFile := layout.FileKey(lateKey, "x")
	if !e.Exists(lateKey) || !e.Exists(lateFile) {
		t.Fatal("the late attempt's objects were not written")
	}

	retainOne := func(c *Config) {
		later(time.Hour)(c)
		c.Policy = Policy{Retain: 1}
	}
	// The first pass starts the domain clock; v1 is one of the last
	// two, the late attempt is collected.
	rep := e.run(e.collector(nil), res)
	mustDecide(t, rep, files1["keep"].Key, kindRetained, "kept", "version 1")
	mustDecide(t, rep, lateKey, kindUnpublishable, "deleted", "<= pointer")
	mustDecide(t, rep, lateFile, kindUnpublishable, "deleted", "<= pointer")
	rep = e.mustAge(res, time.Hour)
	mustDecide(t, rep, files1["keep"].Key, kindRetained, "kept", "version "+v2.Version.String())
	mustDecide(t, rep, v1.Object.Key, kindUnpublishable, "deleted", "<= pointer")
	mustDecide(t, rep, files1["b"].Key, kindUnpublishable, "deleted", "<= pointer")
	mustDecide(t, rep, files1["c"].Key, kindUnpublishable, "deleted", "<= pointer")
	mustDecide(t, rep, v2.Object.Key, kindPublished, "kept", "pointer")
	mustDecide(t, rep, files2["b"].Key, kindPublished, "kept", "pointer's dataset version")
	for _, k := range []string{files1["keep"].Key, v2.Object.Key, files2["b"].Key, files2["d"].Key} {
		if !e.Exists(k) {
			t.Fatalf("%s was deleted", k)
		}
	}
	for _, k := range []string{v1.Object.Key, files1["b"].Key, files1["c"].Key, lateKey, lateFile} {
		if e.Exists(k) {
			t.Fatalf("%s was not collected", k)
		}
	}
	dry, err := e.collector(retainOne).runPass(ctxT(t, time.Minute), RunOptions{Resources: []string{res}, DryRun: true}, true)
	if err != nil {
		t.Fatal(err)
	}
	mustDecide(t, dry, files1["keep"].Key, kindRetained, "kept", "version "+v2.Version.String())
	// Once a version that no longer reuses it is the only one retained,
	// the reused file goes too.
	v3 := e.publishDataset(b, "v3", publisher.BaseNone, publisher.Applied, "keep", "same")
	rep = e.mustAge(res, 2*time.Hour, 3*time.Hour)
	mustDecide(t, rep, files1["keep"].Key, kindUnpublishable, "deleted", "<= pointer")
	if e.Exists(files1["keep"].Key) || !e.Exists(layout.FileKey(v3.Object.Key, "keep")) {
		t.Fatal("the file no retained manifest names was kept, or v3's was deleted")
	}
}

// A retained manifest that cannot be read fails the resource's pass:
// nothing of it is deleted, since the manifest might name any file.
func TestDatasetUnreadableManifestDeletesNothing(t *testing.T) {
	e := newEnv(t)
	const res = "export"
	_, p := e.worker(res, "a")
	v1 := e.publishDataset(p, "v1", publisher.BaseNone, publisher.Applied, "keep", "same", "b", "old")
	files1 := e.manifestOf(v1.Object)
	e.run(e.collector(nil), res) // starts the domain clock
	v2 := e.publishDataset(p, "v2", publisher.BaseCurrent, publisher.Applied, "keep", "same")
	e.rm(v2.Object.Key) // out of band: the store lost the pointer's manifest
	// v1 is past the grace and not among the last 1: only v2's manifest
	// could keep its files.
	rep, err := e.aged(res, time.Hour, 2*time.Hour)
	if err == nil || rep.Deleted != 0 {
		t.Fatalf("pass over an unreadable manifest: err %v, %d deleted", err, rep.Deleted)
	}
	for _, k := range []string{files1["keep"].Key, files1["b"].Key, v1.Object.Key} {
		if !e.Exists(k) {
			t.Fatalf("%s was deleted", k)
		}
	}
}

// GC runs while an incremental publish whose base is being superseded
// uploads: old worker A's late publish moves the pointer off B's base, GC
// collects the base's files (no longer retained), and B's publish, which
// chose to reuse them, is stale with reason base: no published manifest
// ever names a deleted file (invariants 14 and 15; the lab's case
// dataset on real servers).
func TestDatasetGCDuringIncrementalPublish(t *testing.T) {
	e := newEnv(t)
	const res = "export"
	ga, a := e.worker(res, "a")
	v1 := e.publishDataset(a, "v1", publisher.BaseNone, publisher.Applied, "keep", "same", "b", "old")
	files1 := e.manifestOf(v1.Object)
	e.run(e.collector(nil), res) // starts the domain clock
	e.expire(ga)
	_, b := e.worker(res, "b")
	collected := false
	ds := publisher.Dataset{IdempotencyKey: "b1", Base: publisher.BaseCurrent, Files: publisher.FileList([]publisher.File{
		publisher.BytesFile("keep", []byte("same"), "text/plain"), publisher.BytesFile("b", []byte("new"), "text/plain"),
	})}
	ds.Progress = func(publisher.FileDone) {
		if collected {
			return
		}
		collected = true
		e.publishDataset(a, "a-late", publisher.BaseNone, publisher.Applied, "other", "A's late file")
		rep := e.mustAge(res, time.Hour, 2*time.Hour)
		mustDecide(t, rep, files1["keep"].Key, kindUnpublishable, "deleted", "<= pointer")
	}
	r, err := b.PublishDataset(ctxT(t, time.Minute), ds)
	if r.Outcome != publisher.Stale || r.Reason != publisher.ReasonBase || r.ReusedFiles != 1 {
		t.Fatalf("B: outcome %q reason %q, %d reused (err %v); want stale (base) after reusing 1", r.Outcome, r.Reason, r.ReusedFiles, err)
	}
	ptr, err := decodePointerKV(e.get(e.NS.PointerKey(res)))
	if err != nil {
		t.Fatal(err)
	}
	for path, en := range e.manifestOf(ptr.Object) {
		if !e.Exists(en.Key) {
			t.Fatalf("the published manifest %s names %s (%s), which is gone", ptr.Version, path, en.Key)
		}
	}
}

// A worker paused mid-upload of an incremental publish (it reuses a file
// of the base) while a newer worker publishes over the same base, then
// resumed: its transaction is stale, GC collects everything it wrote (the
// files uploaded before and after the pause, its manifest), and never the
// base's file that the new pointer's manifest reuses too, although the
// stale manifest names it as well.
func TestDatasetPausedWorkerWithReuse(t *testing.T) {
	e := newEnv(t)
	const res = "export"
	ga, a := e.worker(res, "a")
	v1 := e.publishDataset(a, "v1", publisher.BaseNone, publisher.Applied, "keep", "same", "b", "old", "c", "dropped")
	files1 := e.manifestOf(v1.Object)
	e.run(e.collector(nil), res) // starts the domain clock

	paused, resume := make(chan struct{}), make(chan struct{})
	slow := publisher.File{Path: "z-last", ContentType: "text/plain", Open: func() (io.ReadCloser, error) {
		select {
		case <-paused:
		default:
			close(paused)
		}
		<-resume
		return io.NopCloser(strings.NewReader("A's late file")), nil
	}}
	type answer struct {
		r   publisher.DatasetResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := a.PublishDataset(ctxT(t, 2*time.Minute), publisher.Dataset{IdempotencyKey: "a2", Base: publisher.BaseCurrent, Parallel: 1,
			Files: publisher.FileList([]publisher.File{
				publisher.BytesFile("b", []byte("A's b"), "text/plain"), publisher.BytesFile("keep", []byte("same"), "text/plain"), slow,
			})})
		done <- answer{r, err}
	}()
	<-paused // A uploaded b, chose to reuse v1's keep, and waits on z-last
	e.expire(ga)
	_, b := e.worker(res, "b")
	v2 := e.publishDataset(b, "b2", publisher.BaseCurrent, publisher.Applied, "keep", "same", "n", "B's file")
	files2 := e.manifestOf(v2.Object)
	if files2["keep"].Key != files1["keep"].Key {
		t.Fatalf("B did not reuse v1's keep: %s", files2["keep"].Key)
	}
	// GC while A is paused: v1 is no longer retained; only B's manifest
	// keeps v1's keep.
	rep := e.mustAge(res, time.Hour, 2*time.Hour)
	mustDecide(t, rep, files1["keep"].Key, kindRetained, "kept", "version "+v2.Version.String())
	mustDecide(t, rep, files1["b"].Key, kindUnpublishable, "deleted", "<= pointer")

	close(resume)
	ra := <-done
	if ra.r.Outcome != publisher.Stale || ra.r.ReusedFiles != 1 {
		t.Fatalf("A resumed: outcome %q reason %q, %d reused (err %v); want stale after reusing 1", ra.r.Outcome, ra.r.Reason, ra.r.ReusedFiles, ra.err)
	}
	attempt := ra.r.Attempt.Object.Key
	// Uploaded before the pause: collected by the passes during it.
	if e.Exists(layout.FileKey(attempt, "b")) {
		t.Fatal("the file A uploaded before the pause survived the passes during it")
	}
	for _, k := range []string{attempt, layout.FileKey(attempt, "z-last")} {
		if !e.Exists(k) {
			t.Fatalf("the stale attempt's %s was not written", k)
		}
	}
	e.mustAge(res, 3*time.Hour)
	e.onlyPointerLeft(res, v2.Object)
}

// onlyPointerLeft fails the test unless the objects of res are exactly
// the dataset manifest obj (the pointer's, alone retained) and the files
// it names: every file it names exists and verifies, and GC collected
// everything else.
func (e *env) onlyPointerLeft(res string, obj layout.Object) {
	e.t.Helper()
	named := map[string]bool{obj.Key: true}
	for _, en := range e.manifestOf(obj) {
		named[en.Key] = true
	}
	for _, k := range e.objectKeys(res) {
		if !named[k] {
			e.t.Errorf("%s survived GC: no retained manifest names it", k)
		}
		delete(named, k)
	}
	for k := range named {
		e.t.Errorf("%s, which the pointer's manifest names, is gone", k)
	}
}

// pipelineAnswer is the one answer on ch.
func pipelineAnswer(t *testing.T, what string, ch <-chan publisher.PipelineResult) publisher.PipelineResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("%s: no answer", what)
	}
	return publisher.PipelineResult{}
}

// pairs returns in-memory files of path=content pairs.
func pairs(ps ...string) []publisher.File {
	var fs []publisher.File
	for i := 0; i+1 < len(ps); i += 2 {
		fs = append(fs, publisher.BytesFile(ps[i], []byte(ps[i+1]), "text/plain"))
	}
	return fs
}

// A pipeline of dataset versions whose bases chain (DESIGN.md "Pipelined
// publishing"), with GC passes (only the pointer retained, past the
// grace) between: while the versions are written and their transactions
// wait, the files a later version reuses from an unpublished one are in
// flight of the live grant and kept; once published, GC keeps exactly the
// files the pointer's manifest names. Then the operation a dataset chains
// to ends conflict: the chained one is stale (base), and once the pointer
// passes them GC collects the files of both, which no published manifest
// names.
func TestDatasetPipelineChain(t *testing.T) {
	e := newEnv(t)
	const res = "export"
	p := e.bind(e.pub, e.acquire(res, "a", time.Minute)) // live through the test
	e.publishDataset(p, "v0", publisher.BaseNone, publisher.Applied, "a", "A0", "b", "B0", "c", "C0")
	e.run(e.collector(nil), res) // starts the domain clock
	hour := 0
	pass := func() *passReport {
		hour++
		return e.mustAge(res, time.Duration(hour)*time.Hour)
	}
	ctx := ctxT(t, 3*time.Minute)
	pl := p.Pipeline(ctx, 4)

	// An object whose body is held first: the datasets behind it are
	// written, their transactions wait. v1 chains to the object, so it
	// reuses nothing; v2 and v3 reuse the files of the unpublished v1, v2.
	body, gate := io.Pipe()
	t.Cleanup(func() { gate.Close() })
	held := publisher.Operation{IdempotencyKey: "obj", Body: body, ContentType: "text/plain"}
	chans := []<-chan publisher.PipelineResult{pl.Submit(held)}
	versions := [][]string{
		{"a", "A1", "b", "B1", "c", "C1"},
		{"a", "A1", "b", "B2", "c", "C1"},
		{"a", "A1", "b", "B2", "c", "C3", "d", "D3"},
	}
	written := make(chan string, len(versions))
	for i, fs := range versions {
		ds := publisher.Dataset{IdempotencyKey: fmt.Sprint("v", i+1), Files: publisher.FileList(pairs(fs...))}
		ds.Progress = func(f publisher.FileDone) {
			if f.Path == "c" {
				written <- f.Path
			}
		}
		chans = append(chans, pl.SubmitDataset(ds))
	}
	for range versions {
		<-written
	}
	rep := pass()
	inFlight := 0
	for _, d := range rep.Decisions {
		if d.Version != nil && d.Version.Seq > 1 {
			if d.Kind != kindInFlight || d.Action != "kept" {
				t.Fatalf("%s of an unpublished version: %s/%s (%s); want kept in flight", d.Key, d.Kind, d.Action, d.Reason)
			}
			inFlight++
		}
	}
	if inFlight < 3+1+1 { // v1's three files and manifest, v2's b at least
		t.Fatalf("%d in-flight keys kept; want every file of v1, v2, v3", inFlight)
	}
	go func() { _, _ = io.WriteString(gate, "held"); gate.Close() }()
	var last publisher.PipelineResult
	for i, ch := range chans {
		last = pipelineAnswer(t, fmt.Sprint("operation ", i), ch)
		if last.Result.Outcome != publisher.Applied {
			t.Fatalf("operation %d: %q %q %v; want applied", i, last.Result.Outcome, last.Result.Reason, last.Err)
		}
		if want := []int64{0, 3, 1, 2}[i]; i > 0 && last.Dataset.UploadedFiles != want {
			t.Fatalf("v%d uploaded %d files; want %d", i, last.Dataset.UploadedFiles, want)
		}
	}
	pass()
	pass()
	e.onlyPointerLeft(res, last.Result.Object)

	// v4 and v5 chain to v3, then v4, with GC passes during their writes.
	for i, fs := range [][]string{{"a", "A4", "b", "B2", "c", "C3", "d", "D3"}, {"a", "A4", "b", "B2", "c", "C3", "d", "D5"}} {
		collected := false
		ds := publisher.Dataset{IdempotencyKey: fmt.Sprint("v", i+4), Files: publisher.FileList(pairs(fs...))}
		ds.Progress = func(publisher.FileDone) {
			if !collected {
				collected = true
				pass()
			}
		}
		chans[i] = pl.SubmitDataset(ds)
	}
	for i, ch := range chans[:2] {
		last = pipelineAnswer(t, fmt.Sprint("v", i+4), ch)
		if last.Result.Outcome != publisher.Applied || last.Dataset.UploadedFiles != 1 {
			t.Fatalf("v%d: %q %v, %+v; want applied, 1 file uploaded", i+4, last.Result.Outcome, last.Err, last.Dataset)
		}
	}
	pass()
	pass()
	e.onlyPointerLeft(res, last.Result.Object)

	// The operation chained to ends conflict (key v1, other files): the
	// chained one, which reuses its files, is stale (base).
	release := make(chan struct{})
	heldFiles := func(yield func(publisher.File, error) bool) {
		<-release
		for _, f := range pairs("a", "other A", "b", "B2") {
			if !yield(f, nil) {
				return
			}
		}
	}
	chans[0] = pl.SubmitDataset(publisher.Dataset{IdempotencyKey: "v1", Base: publisher.BaseNone, Files: heldFiles})
	chans[1] = pl.SubmitDataset(publisher.Dataset{IdempotencyKey: "v6", Files: publisher.FileList(pairs("a", "other A", "b", "B2", "c", "C6"))})
	close(release)
	if r := pipelineAnswer(t, "conflict", chans[0]); r.Result.Outcome != publisher.Conflict {
		t.Fatalf("the operation chained to: %q %v; want conflict", r.Result.Outcome, r.Err)
	}
	stale := pipelineAnswer(t, "chained to the conflict", chans[1])
	if r := stale.Result; r.Outcome != publisher.Stale || r.Reason != publisher.ReasonBase || stale.Dataset.ReusedFiles != 2 {
		t.Fatalf("chained to the conflict: %q %q %v, %+v; want stale (base) after reusing 2 files", r.Outcome, r.Reason, stale.Err, stale.Dataset)
	}
	if err := pl.Close(); err == nil {
		t.Fatal("Close: nil; want the stale answer that stopped the pipeline")
	}
	// Their files are in flight (above the pointer, the grant live) until
	// a publish passes them; then GC collects them.
	rep = pass()
	for _, k := range []string{stale.Result.Attempt.Object.Key, layout.FileKey(stale.Result.Attempt.Object.Key, "c")} {
		mustDecide(t, rep, k, kindInFlight, "kept", "grant")
	}
	v7 := e.publishDataset(p, "v7", publisher.BaseCurrent, publisher.Applied, "a", "A4", "b", "B2", "c", "C3", "d", "D5")
	if v7.UploadedFiles != 0 {
		t.Fatalf("v7 uploaded %d files; want every one reused from the pointer", v7.UploadedFiles)
	}
	pass()
	pass()
	e.onlyPointerLeft(res, v7.Object)
}

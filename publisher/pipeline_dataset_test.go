//go:build !unit

package publisher

import (
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// Datasets in a Pipeline (DESIGN.md "Pipelined publishing"): each version's
// files written ahead, its transaction PublishDataset's, sent in seq order.

// manifestOf returns the entries of the dataset manifest obj, by path.
func (e *env) manifestOf(obj layout.Object) map[string]manifest.Entry {
	e.t.Helper()
	ctx := ctxT(e.t, 30*time.Second)
	ix, err := manifest.LoadIndex(ctx, e.Store, obj)
	if err != nil {
		e.t.Fatalf("manifest %s: %v", obj.Key, err)
	}
	out := map[string]manifest.Entry{}
	for en, err := range manifest.NewCache(0).All(ctx, e.Store, ix) {
		if err != nil {
			e.t.Fatal(err)
		}
		out[en.Path] = en
	}
	return out
}

// versionFiles is the files of the n-th pipelined dataset: the same paths
// each time, with content naming n.
func versionFiles(n int) []string {
	return []string{"a.txt", fmt.Sprintf("a%d", n), "part/0", strings.Repeat(fmt.Sprint(n), 1000+n), "part/1", fmt.Sprintf("one of %d", n)}
}

// TestPipelineDatasets: dataset versions (and an object between them)
// submitted to one pipeline are all applied in seq order, each version's
// manifest naming its own files, read back file by file; the dataset
// behind the object chains to it and so reuses nothing; a dataset with an
// unknown Base is refused at once without stopping the pipeline.
func TestPipelineDatasets(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const res, n = "r", 4
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false)
	pl := p.Pipeline(ctx, 3)
	var chans []<-chan PipelineResult
	for i := range n {
		base := BaseNone
		if i == 2 {
			base = BaseCurrent // behind the object: nothing to reuse
		}
		chans = append(chans, pl.SubmitDataset(dataset(fmt.Sprint("d", i), base, files(versionFiles(i)...)...)))
		if i == 1 {
			r := answer(t, "base bogus", pl.SubmitDataset(dataset("reuse", "bogus", files("x", "y")...)))
			if !errors.Is(r.Err, fencepub.ErrInvalid) || r.Result.Outcome != "" {
				t.Fatalf("a pipelined dataset with base %q: %+v, %v; want fencepub.ErrInvalid", "bogus", r.Result, r.Err)
			}
			chans = append(chans, pl.Submit(op("obj", "an object between datasets")))
		}
	}
	if err := pl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var versions []layout.Version
	for i, ch := range chans {
		r := answer(t, fmt.Sprint("operation ", i), ch)
		mustOutcome(t, fmt.Sprint("operation ", i), r.Result, r.Err, Applied, reasonNone)
		versions = append(versions, r.Result.Version)
		if r.Result.Version.Seq != uint64(i+1) {
			t.Fatalf("operation %d got seq %d; want %d", i, r.Result.Version.Seq, i+1)
		}
		if i == 2 {
			if r.Dataset != (DatasetStats{}) || e.content(manifest.Entry{Path: "obj", Key: r.Result.Object.Key, ETag: r.Result.Object.ETag, SHA256: r.Result.Object.SHA256}) != "an object between datasets" {
				t.Fatalf("the object: %+v", r)
			}
			continue
		}
		d := i
		if i > 2 {
			d--
		}
		want := versionFiles(d)
		if r.Dataset.Files != 3 || r.Dataset.UploadedFiles != 3 || r.Dataset.ReusedFiles != 0 || r.Dataset.Base != nil || r.Dataset.SHA256 != r.Result.Object.SHA256 {
			t.Fatalf("dataset %d stats %+v", d, r.Dataset)
		}
		got := e.manifestOf(r.Result.Object)
		if len(got) != 3 {
			t.Fatalf("dataset %d manifest %v", d, got)
		}
		for j := 0; j < len(want); j += 2 {
			en, ok := got[want[j]]
			if !ok {
				t.Fatalf("dataset %d: no %s", d, want[j])
			}
			if v, own, ok := e.NS.ParseVersionKey(res, en.Key); !ok || v != r.Result.Version || own != r.Result.Object.Key {
				t.Fatalf("dataset %d: %s stored at %s, not under its own version %s", d, want[j], en.Key, r.Result.Version)
			}
			if c := e.content(en); c != want[j+1] {
				t.Fatalf("dataset %d: %s reads %q; want %q", d, want[j], c, want[j+1])
			}
		}
	}
	if h := e.history(res); len(h) != len(versions) || h[len(h)-1] != versions[len(versions)-1] {
		t.Fatalf("history %v; want %v", h, versions)
	}
	ptr, cur := e.entries(res)
	if ptr.Version != versions[len(versions)-1] || e.content(cur["a.txt"]) != fmt.Sprintf("a%d", n-1) {
		t.Fatalf("pointer %s; want the last dataset %s", ptr.Version, versions[len(versions)-1])
	}
}

// TestPipelineDatasetFailureStops: the second of four pipelined datasets
// fails while its files are written (its file source ends in an error,
// after the later two were written); it gets that error, the two behind
// it are not sent, their files stay as orphans for GC, and every seq but
// the first is given back.
func TestPipelineDatasetFailureStops(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const res = "r"
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false)
	pl := p.Pipeline(ctx, 4)
	first := pl.SubmitDataset(dataset("d1", BaseNone, files(versionFiles(1)...)...))
	gate := make(chan struct{})
	died := errors.New("the job died")
	broken := func(yield func(File, error) bool) {
		if !yield(BytesFile("a", []byte("1"), ""), nil) {
			return
		}
		<-gate
		yield(File{}, died)
	}
	chans := []<-chan PipelineResult{pl.SubmitDataset(Dataset{IdempotencyKey: "d2", Files: broken, Base: BaseNone})}
	for i := 3; i <= 4; i++ {
		chans = append(chans, pl.SubmitDataset(dataset(fmt.Sprint("d", i), BaseNone, files(versionFiles(i)...)...)))
	}
	r := answer(t, "d1", first)
	mustOutcome(t, "d1", r.Result, r.Err, Applied, reasonNone)
	if n := p.nextSeq(); n != 5 {
		t.Fatalf("NextSeq %d with four datasets submitted; want 5", n)
	}
	// The manifests of d3 and d4 are written ahead, behind the stuck d2.
	ahead := func() int {
		n := 0
		for _, k := range e.listObjects(e.NS.ObjectsPrefix(res)) {
			if v, own, ok := e.NS.ParseVersionKey(res, k); ok && own == k && v.Seq >= 3 {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, "d3 and d4 written ahead", 30*time.Second, func() bool { return ahead() == 2 })
	close(gate)
	stop := answer(t, "d2", chans[0])
	if !errors.Is(stop.Err, died) || stop.Result.Outcome != "" {
		t.Fatalf("d2: %+v, %v; want the file source's error, nothing published", stop.Result, stop.Err)
	}
	for i, ch := range chans[1:] {
		what := fmt.Sprint("d", i+3)
		mustNotSent(t, what, answer(t, what, ch))
	}
	if err := pl.Close(); !errors.Is(err, died) {
		t.Fatalf("Close: %v; want the error that stopped it", err)
	}
	mustNotSent(t, "a dataset after the stop", answer(t, "d5", pl.SubmitDataset(dataset("d5", BaseNone, files("x", "y")...))))
	if n := p.nextSeq(); n != 2 {
		t.Fatalf("NextSeq %d; want 2: the seqs of d2..d4 were never sent", n)
	}
	if h := e.history(res); len(h) != 1 || h[0] != r.Result.Version {
		t.Fatalf("history %v; want only d1's %s", h, r.Result.Version)
	}
	if ptr, _ := e.entries(res); ptr.Version != r.Result.Version {
		t.Fatalf("pointer %s; want d1's %s", ptr.Version, r.Result.Version)
	}
	if n := ahead(); n != 2 {
		t.Fatalf("%d manifests of d3, d4 left; want both, orphans for GC (the publisher deletes nothing)", n)
	}
}

// gatedFiles is FileList(fs) whose first file is yielded only once the
// returned release was called: a dataset whose write, and so its
// transaction, waits while later ones are submitted.
func gatedFiles(t *testing.T, fs []File) (iter.Seq2[File, error], func()) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return func(yield func(File, error) bool) {
		<-gate
		for f, err := range FileList(fs) {
			if !yield(f, err) {
				return
			}
		}
	}, release
}

// chainVersions are the files of a stream of dataset versions, each
// changing some files of the one before: a, b, c, d at version 0.
var chainVersions = [][]string{
	{"a", "A0", "b", "B0", "c", "C0", "d", "D0"},
	{"a", "A0", "b", "B1", "c", "C0", "d", "D0"},            // b changed
	{"a", "A0", "b", "B1", "c", "C2", "d", "D0", "e", "E2"}, // c changed, e added
	{"a", "A3", "b", "B1", "c", "C2", "e", "E2"},            // a changed, d dropped
	{"a", "A3", "b", "B1", "c", "C2", "e", "E2"},            // the same files, another key
}

// chainUploads is how many files each of chainVersions[1:] uploads when
// it reuses from the one before.
var chainUploads = []int64{1, 2, 1, 0}

// TestPipelineDatasetChain: a stream of dataset versions submitted to one
// pipeline with BaseCurrent, while the first one's write (so its
// transaction) is held: the first reuses from the pointer (read as
// PublishDataset reads it), each later one from the version submitted
// before it, still in flight, whose manifest is known from its write. Each
// uploads only its changed files, names the others at the version that
// uploaded them, and is applied over exactly that base (DESIGN.md
// "Pipelined publishing").
func TestPipelineDatasetChain(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const res = "r"
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false)
	r0, err := p.PublishDataset(ctx, dataset("v0", BaseNone, files(chainVersions[0]...)...))
	mustOutcome(t, "v0", r0.Result, err, Applied, reasonNone)
	pl := p.Pipeline(ctx, 3)
	held, release := gatedFiles(t, files(chainVersions[1]...))
	chans := []<-chan PipelineResult{pl.SubmitDataset(Dataset{IdempotencyKey: "v1", Files: held})}
	for i := 2; i < len(chainVersions); i++ {
		if i == 4 {
			release() // depth 3: the fourth waits for the first's answer
		}
		chans = append(chans, pl.SubmitDataset(dataset(fmt.Sprint("v", i), BaseCurrent, files(chainVersions[i]...)...)))
	}
	if err := pl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	prev, prevFiles := r0.Result, e.manifestOf(r0.Result.Object)
	for i, ch := range chans {
		what := fmt.Sprint("v", i+1)
		r := answer(t, what, ch)
		mustOutcome(t, what, r.Result, r.Err, Applied, reasonNone)
		want := chainVersions[i+1]
		st := r.Dataset
		if st.Base == nil || *st.Base != prev.Version || st.UploadedFiles != chainUploads[i] || st.ReusedFiles != int64(len(want)/2)-chainUploads[i] {
			t.Fatalf("%s stats %+v; want base %s, %d uploaded, the rest reused", what, st, prev.Version, chainUploads[i])
		}
		got := e.manifestOf(r.Result.Object)
		if len(got) != len(want)/2 {
			t.Fatalf("%s manifest %v; want %d files", what, got, len(want)/2)
		}
		for j := 0; j < len(want); j += 2 {
			path, content := want[j], want[j+1]
			en := got[path]
			if c := e.content(en); c != content {
				t.Fatalf("%s: %s reads %q; want %q", what, path, c, content)
			}
			if old, ok := prevFiles[path]; ok && e.content(old) == content {
				if en.Key != old.Key {
					t.Fatalf("%s: unchanged %s stored at %s; want it reused from %s", what, path, en.Key, old.Key)
				}
			} else if v, own, ok := e.NS.ParseVersionKey(res, en.Key); !ok || v != r.Result.Version || own != r.Result.Object.Key {
				t.Fatalf("%s: changed %s stored at %s, not under its own version %s", what, path, en.Key, r.Result.Version)
			}
		}
		prev, prevFiles = r.Result, got
	}
	if h := e.history(res); len(h) != len(chainVersions) || h[len(h)-1] != prev.Version {
		t.Fatalf("history %v; want %d versions ending at %s", h, len(chainVersions), prev.Version)
	}
}

// TestPipelineDatasetChainBroken: the operation a pipelined dataset
// chains to ends conflict, or duplicate (its key was applied before as a
// version with the same files, which the pointer still is): the chained
// dataset, having reused that operation's files, is Stale with ReasonBase,
// never applied over another version; the pipeline stops there, and no
// published version names a file of either. A dataset submitted after the
// conflict was answered reads the pointer as its base instead.
func TestPipelineDatasetChainBroken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prev  []string // the files of the operation chained to, under v1's key
		want  Outcome
		reuse int64
	}{
		{"conflict", []string{"a", "A", "b", "other B"}, Conflict, 2},
		{"duplicate", []string{"a", "A", "b", "B"}, Duplicate, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, 2*time.Minute)
			const res = "r"
			p := e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false)
			r1, err := p.PublishDataset(ctx, dataset("v1", BaseNone, files("a", "A", "b", "B")...))
			mustOutcome(t, "v1", r1.Result, err, Applied, reasonNone)
			published := e.manifestOf(r1.Result.Object)
			pl := p.Pipeline(ctx, 3)
			held, release := gatedFiles(t, files(tc.prev...))
			prevCh := pl.SubmitDataset(Dataset{IdempotencyKey: "v1", Files: held, Base: BaseNone})
			nextCh := pl.SubmitDataset(dataset("v2", BaseCurrent, files(append(tc.prev, "c", "C")...)...))
			release()
			prev := answer(t, "the operation chained to", prevCh)
			mustOutcome(t, "the operation chained to", prev.Result, prev.Err, tc.want, reasonNone)
			if prev.Dataset.UploadedFiles != 2 || prev.Result.Attempt == nil {
				t.Fatalf("the operation chained to: %+v; want its own 2 files uploaded", prev)
			}
			stop := mustStopAt(t, pl, []<-chan PipelineResult{nextCh}, Stale, ReasonBase)
			if st := stop.Dataset; st.Base == nil || *st.Base != prev.Result.Attempt.Version || st.ReusedFiles != tc.reuse || st.UploadedFiles != 1 {
				t.Fatalf("the chained dataset's stats %+v; want base %s, %d reused", st, prev.Result.Attempt.Version, tc.reuse)
			}
			if h := e.history(res); len(h) != 1 || h[0] != r1.Result.Version {
				t.Fatalf("history %v; want only v1 %s", h, r1.Result.Version)
			}
			ptr, cur := e.entries(res)
			if ptr.Version != r1.Result.Version || len(cur) != len(published) {
				t.Fatalf("pointer %s %v; want v1", ptr.Version, cur)
			}
			for path, en := range cur {
				if en.Key != published[path].Key {
					t.Fatalf("the pointer names %s at %s; v1 had it at %s", path, en.Key, published[path].Key)
				}
			}
			if tc.want != Conflict {
				return
			}
			// Once the conflict is answered, a dataset reads the pointer.
			pl = p.Pipeline(ctx, 3)
			again := answer(t, "conflict again", pl.SubmitDataset(dataset("v1", BaseNone, files(tc.prev...)...)))
			mustOutcome(t, "conflict again", again.Result, again.Err, Conflict, reasonNone)
			r := answer(t, "after the conflict", pl.SubmitDataset(dataset("v3", BaseCurrent, files("a", "A", "b", "B", "c", "C")...)))
			mustOutcome(t, "after the conflict", r.Result, r.Err, Applied, reasonNone)
			if st := r.Dataset; st.Base == nil || *st.Base != r1.Result.Version || st.ReusedFiles != 2 || st.UploadedFiles != 1 {
				t.Fatalf("after the conflict: stats %+v; want base v1 %s, 2 reused", st, r1.Result.Version)
			}
			if err := pl.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

//go:build !unit

package publisher

import (
	"errors"
	"fmt"
	"strings"
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
// manifest naming its own files, read back file by file; a dataset with
// a base to reuse from is refused at once without stopping the pipeline.
func TestPipelineDatasets(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const res, n = "r", 4
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false)
	pl := p.Pipeline(ctx, 3)
	var chans []<-chan PipelineResult
	for i := range n {
		chans = append(chans, pl.SubmitDataset(dataset(fmt.Sprint("d", i), BaseNone, files(versionFiles(i)...)...)))
		if i == 1 {
			for _, b := range []Base{"", BaseCurrent} {
				r := answer(t, "base "+string(b), pl.SubmitDataset(dataset("reuse", b, files("x", "y")...)))
				if !errors.Is(r.Err, fencepub.ErrInvalid) || r.Result.Outcome != "" {
					t.Fatalf("a pipelined dataset with base %q: %+v, %v; want fencepub.ErrInvalid", b, r.Result, r.Err)
				}
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
		if r.Dataset.Files != 3 || r.Dataset.UploadedFiles != 3 || r.Dataset.ReusedFiles != 0 || r.Dataset.SHA256 != r.Result.Object.SHA256 {
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

//go:build !unit

package chaos

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
)

// datasetWorker returns a dataset worker of e.
func (e *brokenEnv) datasetWorker(id string) *worker {
	w := e.worker(id)
	w.datasets, w.rcfg = true, e.read.cfg
	return w
}

// publishFiles publishes specs as a dataset version of g's resource under
// key with base, through the real publisher, requires outcome and returns
// the logged publish.
func (e *brokenEnv) publishFiles(w *worker, g authority.Grant, key string, base publisher.Base, outcome string, specs ...datasetFileSpec) PublishOp {
	t := publisher.GrantTerm(g, false)
	p, err := e.pub.Bind(e.ctx, t)
	if err != nil {
		e.t.Fatal(err)
	}
	w.n++
	w.publishFiles(p, t, key, base, specs)
	h := e.rec.History()
	got := h.Publishes[len(h.Publishes)-1]
	if got.Outcome != outcome {
		e.t.Fatalf("%s: dataset publish %s: %s (%s), want %s", w.id, key, got.Outcome, got.Err, outcome)
	}
	return got
}

// sweep runs the final sweep of the dataset resources (sweepDatasets).
func (e *brokenEnv) sweep() {
	if err := sweepDatasets(e.ctx, e.rec, e.read.cfg); err != nil {
		e.t.Fatal(err)
	}
}

// TestCheckerCatchesBrokenDatasetGC: an incremental publish reuses a file
// of the version before; the real GC, retaining only the current version,
// collects the older version but keeps the file the current manifest
// names, and the run passes. A broken GC that deletes a superseded
// version's files whether a retained manifest names them or not makes the
// final sweep find the reused file missing: dataset_file_kept, naming the
// file of the current version.
func TestCheckerCatchesBrokenDatasetGC(t *testing.T) {
	e := newBrokenEnv(t)
	w := e.datasetWorker("dw")
	const res = "dgc"
	g := e.acquire(w, res)
	v1 := e.publishFiles(w, g, "k1", publisher.BaseNone, Applied, datasetFileSpec{"a.bin", 0}, datasetFileSpec{"dir/b.bin", 0})
	v2 := e.publishFiles(w, g, "k2", publisher.BaseCurrent, Applied, datasetFileSpec{"a.bin", 0}, datasetFileSpec{"dir/b.bin", 1})
	if v2.Reused != 1 || v2.Base == nil || *v2.Base != v1.Version {
		t.Fatalf("the incremental publish reused %d files from base %v, want 1 from %s", v2.Reused, v2.Base, v1.Version)
	}
	l := &datasetReadLoop{id: "dreader", clock: e.rec.Clock(), cfg: e.read.cfg, wl: e.wl, rng: w.rng, rec: e.rec}
	rd, err := reader.New(l.cfg, res)
	if err != nil {
		t.Fatal(err)
	}
	for range 8 {
		l.read(res, rd)
	}

	// The real GC, retaining only the current version with a reader grace
	// of a millisecond: a first pass starts the domain clock, which etcd's
	// lease timer advances; the passes after it collect the older version.
	st := testenv.Get(t).Store(t)
	col, err := gc.New(gc.Config{
		Env: fencepub.Env{Namespace: e.ns, Etcd: e.cli, Store: st}, Authority: e.auth,
		Policy: gc.Policy{Retain: 1, Grace: time.Millisecond, ClockSkew: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	var deleted int64
	for pass := 0; pass < 10 && deleted == 0; pass++ {
		rep, err := col.Run(e.ctx, gc.RunOptions{Resources: []string{res}})
		if err != nil {
			t.Fatal(err)
		}
		deleted += rep.Deleted
		time.Sleep(time.Second)
	}
	if deleted == 0 {
		t.Fatalf("GC collected nothing of the superseded version %s", v1.Version)
	}
	e.sweep()
	if got := e.verify(); len(got) > 0 {
		t.Fatalf("the real GC: violations %v", got)
	}
	if n := len(e.rec.History().DatasetReads); n == 0 {
		t.Fatal("no dataset read was logged")
	}

	// The broken GC: every object of the superseded version goes.
	keys, err := objectsAt(e.ctx, st, e.ns, res, v1.Version)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, "a.bin") }) {
		t.Fatalf("the real GC deleted a.bin, which version %s reuses: %v", v2.Version, keys)
	}
	if err := errors.Join(st.Delete(e.ctx, keys)...); err != nil {
		t.Fatal(err)
	}
	e.sweep()
	vs := Verify(e.rec.History(), VerifyOptions{})
	if !slices.ContainsFunc(vs, func(v Violation) bool {
		return v.Invariant == InvDatasetFileKept && strings.Contains(v.Detail, `"a.bin" of `+v2.Version.String())
	}) {
		t.Fatalf("the broken GC: violations %v, want %s naming a.bin of %s", vs, InvDatasetFileKept, v2.Version)
	}
}

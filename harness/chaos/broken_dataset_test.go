//go:build !unit

package chaos

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	w.publishFiles(p, g, false, key, base, specs)
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
		Env: fencepub.Env{Namespace: fencepub.Namespace(e.ns), Etcd: e.cli, Store: st}, Authority: e.auth,
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

// TestCheckerCatchesDatasetPublishWithoutBaseCompare: C, holding fence 3,
// publishes incrementally from base v1 (reusing a.bin); while it uploads,
// B, whose fence-2 lease has expired, publishes a version without a.bin,
// and GC, retaining only the current version, collects v1. The real
// publisher's transaction finds the pointer is no longer its base: stale,
// reason base, and the run is clean. A publish path without the base
// compare commits C's manifest anyway: its pointer names the collected
// a.bin, which the final sweep finds missing (dataset_file_kept), and the
// pointer moved from a version other than its base (dataset_base).
func TestCheckerCatchesDatasetPublishWithoutBaseCompare(t *testing.T) {
	e := newBrokenEnv(t)
	const res = "dbase"
	wa, wb, wc := e.datasetWorker("a"), e.datasetWorker("b"), e.datasetWorker("c")
	ga := e.acquire(wa, res)
	v1 := e.publishFiles(wa, ga, "ka", publisher.BaseNone, Applied, datasetFileSpec{"a.bin", 0}, datasetFileSpec{"dir/b.bin", 0})
	gb := e.acquire(wb, res) // once a's lease expired
	pb, err := e.pub.Bind(e.ctx, publisher.GrantTerm(gb, false))
	if err != nil {
		t.Fatal(err)
	}
	gc3 := e.acquire(wc, res) // once b's lease expired
	st := testenv.Get(t).Store(t)
	col, err := gc.New(gc.Config{
		Env: fencepub.Env{Namespace: fencepub.Namespace(e.ns), Etcd: e.cli, Store: st}, Authority: e.auth,
		Policy: gc.Policy{Retain: 1, Grace: time.Millisecond, ClockSkew: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := col.Run(e.ctx, gc.RunOptions{Resources: []string{res}}); err != nil { // starts the domain clock
		t.Fatal(err)
	}
	var (
		once     sync.Once
		hookErr  error
		bApplied bool
	)
	wc.wl.PublishTimeout = time.Minute
	wc.beforeOpen = func() {
		once.Do(func() {
			bApplied = wb.publishFiles(pb, gb, false, "kb", publisher.BaseNone, []datasetFileSpec{{"z.txt", 0}})
			for pass := 0; pass < 10; pass++ {
				time.Sleep(time.Second)
				if _, hookErr = col.Run(e.ctx, gc.RunOptions{Resources: []string{res}}); hookErr != nil {
					return
				}
				keys, err := objectsAt(e.ctx, st, e.ns, res, v1.Version)
				if hookErr = err; err != nil || !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, "a.bin") }) {
					return
				}
			}
			hookErr = errors.New("GC did not collect a.bin of the superseded version")
		})
	}
	pc, err := e.pub.Bind(e.ctx, publisher.GrantTerm(gc3, false))
	if err != nil {
		t.Fatal(err)
	}
	wc.publishFiles(pc, gc3, false, "kc", publisher.BaseCurrent, []datasetFileSpec{{"a.bin", 0}, {"dir/b.bin", 1}})
	if hookErr != nil || !bApplied {
		t.Fatalf("while c uploaded: b applied %v, GC: %v", bApplied, hookErr)
	}
	h := e.rec.History()
	c := h.Publishes[slices.IndexFunc(h.Publishes, func(p PublishOp) bool { return p.Client == wc.id })]
	if c.Outcome != Stale || c.Reason != string(publisher.ReasonBase) || c.Base == nil || *c.Base != v1.Version || c.Reused != 1 {
		t.Fatalf("c: %s reason %q (%s), base %v, reused %d; want stale reason base, base %s, 1 reused", c.Outcome, c.Reason, c.Err, c.Base, c.Reused, v1.Version)
	}
	e.sweep()
	if got := e.verify(); len(got) > 0 {
		t.Fatalf("the real publisher: violations %v", got)
	}

	// The broken publish path commits c's manifest without the base compare.
	info, err := st.Stat(e.ctx, c.Object)
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, f := range c.Files {
		bytes += f.Size
	}
	obj := layout.Object{Bucket: st.BucketName(), Key: c.Object, SHA256: c.Digest, ETag: info.ETag, Size: info.Size}
	ptr, _ := layout.EncodePointer(layout.Pointer{
		Version: c.Version, Object: obj, IdempotencyKey: c.Key, Digest: c.RequestDigest, ContentType: info.ContentType, Owner: c.Owner,
		CommittedAt: time.Now().UTC(), Kind: layout.KindDataset, Files: int64(len(c.Files)), Bytes: bytes,
	})
	rec, _ := layout.EncodeOp(e.ns.OpKey(res, c.Key), layout.OpRecord{Digest: c.RequestDigest, Version: c.Version, ObjectKey: c.Object, Owner: c.Owner})
	broken := c
	broken.ID, broken.Client, broken.Call = "broken/kc", "broken", e.rec.Clock().Now()
	e.rec.Invoke(broken)
	if resp, err := e.cli.Txn(e.ctx).Then(
		clientv3.OpPut(e.ns.PointerKey(res), ptr),
		clientv3.OpPut(e.ns.OpKey(res, c.Key), rec),
		clientv3.OpPut(e.ns.HistoryKey(res, c.Version), ptr),
	).Commit(); err != nil || !resp.Succeeded {
		t.Fatalf("broken publish: %v %v", resp, err)
	}
	broken.Return, broken.Reported, broken.Outcome, broken.Reason = e.rec.Clock().Now(), Applied, Applied, ""
	e.rec.Complete(broken)
	e.sweep()
	got := e.verify()
	for _, want := range []string{InvDatasetBase, InvDatasetFileKept} {
		if !slices.Contains(got, want) {
			t.Errorf("the publish without the base compare: violations %v, want %s among them", got, want)
		}
	}
}

//go:build !unit

package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/recovery"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/objstore"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// brokenEnv is one domain on the shared servers with the harness's
// recorder, watch, workers and a reader, for histories made partly by a
// deliberately broken publish path.
type brokenEnv struct {
	t     *testing.T
	ctx   context.Context
	ns    layout.Namespace
	cli   *clientv3.Client
	rec   *Recorder
	watch *watcher
	auth  *authority.Authority
	pub   *publisher.Client
	read  *readLoop
	wl    Workload
	// stopWatch ends the watch goroutine and waits for it.
	stopWatch func()
}

func newBrokenEnv(t *testing.T) *brokenEnv {
	shared := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	e := &brokenEnv{t: t, ctx: ctx, ns: testenv.Namespace(t), cli: shared.EtcdClient(t), wl: Workload{}.withDefaults()}
	st := shared.Store(t)
	var err error
	if e.auth, err = authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.ns), Etcd: e.cli, Store: st}}); err != nil {
		t.Fatal(err)
	}
	d, err := operator.Init(ctx, e.auth)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := etcdRevision(ctx, e.cli, e.ns.EpochKey())
	if err != nil {
		t.Fatal(err)
	}
	clock := NewClock()
	e.rec = NewRecorder(e.ns, d.Epoch, clock)
	e.watch = newWatcher(e.cli, e.ns, clock, e.rec)
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.watch.run(wctx, rev+1)
	}()
	e.stopWatch = func() { wcancel(); <-done }
	t.Cleanup(func() { e.stopWatch() })
	if e.pub, err = publisher.New(publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.ns), Etcd: e.cli, Store: st}}); err != nil {
		t.Fatal(err)
	}
	e.read = &readLoop{id: "reader", clock: clock, cfg: reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.ns), Etcd: e.cli, Store: st}}, wl: e.wl, rec: e.rec}
	return e
}

func (e *brokenEnv) worker(id string) *worker {
	return &worker{
		id: id, clock: e.rec.Clock(), epoch: func() uint64 { return e.rec.History().Epoch }, auth: e.auth, pub: e.pub, wl: e.wl,
		rng: rand.New(rand.NewPCG(1, 2)), out: e.rec, stop: make(chan struct{}),
	}
}

// acquire gets and logs a grant of res for w (waiting for a held lease).
func (e *brokenEnv) acquire(w *worker, res string) authority.Grant {
	g, _, ok := w.acquire(res)
	if !ok {
		e.t.Fatalf("%s could not acquire %s", w.id, res)
	}
	return g
}

// publish publishes through the real publisher and requires outcome.
func (e *brokenEnv) publish(w *worker, g authority.Grant, seq uint64, key, body, outcome string) {
	t := publisher.GrantTerm(g, false)
	p, err := e.pub.Bind(e.ctx, t)
	if err != nil {
		e.t.Fatal(err)
	}
	w.publish(p, g, false, seq, key, []byte(body), false)
	h := e.rec.History()
	if got := h.Publishes[len(h.Publishes)-1]; got.Outcome != outcome {
		e.t.Fatalf("%s: publish %s: %s (%s), want %s", w.id, key, got.Outcome, got.Err, outcome)
	}
}

// readNow reads res once through the real reader and returns the version.
func (e *brokenEnv) readNow(res string) layout.Version {
	rd, err := reader.New(e.read.cfg, res)
	if err != nil {
		e.t.Fatal(err)
	}
	e.read.read(res, rd, 0)
	h := e.rec.History()
	return h.Reads[len(h.Reads)-1].Version
}

// brokenPublish is a publish path with its compares removed: it writes the
// object like the publisher does, then swaps the pointer and writes the op
// record and history entry in a transaction with no If at all (a raw put),
// and reports applied. checks lists compares it keeps anyway.
func (e *brokenEnv) brokenPublish(g authority.Grant, seq uint64, key, body string, checks ...clientv3.Cmp) {
	e.brokenPublishReporting(Applied, g, seq, key, body, checks...)
}

// brokenPublishReporting is brokenPublish reporting outcome instead of
// applied (a publish path that loses track of what it sent).
func (e *brokenEnv) brokenPublishReporting(outcome string, g authority.Grant, seq uint64, key, body string, checks ...clientv3.Cmp) {
	v := g.Version(seq)
	st := testenv.Get(e.t).Store(e.t)
	objKey := e.ns.ObjectKey(g.Resource, v, layout.NewNonce())
	sum := sha256.Sum256([]byte(body))
	digest := hex.EncodeToString(sum[:])
	op := PublishOp{
		ID: "broken/" + key, Client: "broken", Resource: g.Resource, Key: key, Digest: digest, Size: int64(len(body)),
		Owner: g.Owner, Version: v, Call: e.rec.Clock().Now(),
	}
	e.rec.Invoke(op)
	info, err := objstore.PutSmallCreateOnly(e.ctx, st, objKey, []byte(body), "application/octet-stream")
	if err != nil {
		e.t.Fatal(err)
	}
	obj := layout.Object{Bucket: st.Bucket, Key: objKey, SHA256: digest, ETag: info.ETag, Size: int64(len(body))}
	now := time.Now().UTC()
	ptr, _ := layout.EncodePointer(layout.Pointer{Version: v, Object: obj, IdempotencyKey: key, Digest: digest, Owner: g.Owner, CommittedAt: now})
	rec, _ := layout.EncodeOp(e.ns.OpKey(g.Resource, key), layout.OpRecord{Digest: digest, Version: v, ObjectKey: obj.Key, Owner: g.Owner})
	resp, err := e.cli.Txn(e.ctx).If(checks...).Then(
		clientv3.OpPut(e.ns.PointerKey(g.Resource), ptr),
		clientv3.OpPut(e.ns.OpKey(g.Resource, key), rec),
		clientv3.OpPut(e.ns.HistoryKey(g.Resource, v), ptr),
	).Commit()
	if err != nil || !resp.Succeeded {
		e.t.Fatalf("broken publish: %v %v", resp, err)
	}
	op.Return, op.Done, op.Reported, op.Outcome, op.Result = e.rec.Clock().Now(), true, outcome, outcome, v
	if outcome == Applied {
		op.Object = objKey
	}
	e.rec.Complete(op)
}

// verify waits for the watch and returns the invariants Verify reports.
func (e *brokenEnv) verify() []string { return e.verifyWith(VerifyOptions{}) }

// verifyWith is verify with opts.
func (e *brokenEnv) verifyWith(opts VerifyOptions) []string {
	if _, err := e.watch.sync(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	vs := Verify(e.rec.History(), opts)
	for _, v := range vs {
		e.t.Logf("reported: %s", v)
	}
	return invariants(vs)
}

// TestCheckerCatchesBrokenPublisher: histories made against real etcd and
// MinIO by a publish path with a compare removed are rejected, under the
// invariants the missing compare protects; the same steps through the real
// publisher pass.
func TestCheckerCatchesBrokenPublisher(t *testing.T) {
	t.Run("real publisher: the late fence is stale", func(t *testing.T) {
		e := newBrokenEnv(t)
		a, b := e.worker("a"), e.worker("b")
		ga := e.acquire(a, "r")
		gb := e.acquire(b, "r") // waits for A's lease to expire: A is paused
		e.publish(b, gb, 1, "kb", "state of B", Applied)
		e.readNow("r")
		e.publish(a, ga, 1, "ka", "late state of A", Stale)
		e.readNow("r")
		if got := e.verify(); len(got) > 0 {
			t.Fatalf("violations %v on a correct history", got)
		}
	})
	t.Run("no pointer compare: the late fence overwrites", func(t *testing.T) {
		e := newBrokenEnv(t)
		a, b := e.worker("a"), e.worker("b")
		ga := e.acquire(a, "r")
		gb := e.acquire(b, "r")
		e.publish(b, gb, 1, "kb", "state of B", Applied)
		before := e.readNow("r")
		e.brokenPublish(ga, 1, "ka", "late state of A")
		if after := e.readNow("r"); after.Compare(before) >= 0 {
			t.Fatalf("the broken publish did not move the pointer back: %s then %s", before, after)
		}
		got := e.verify()
		for _, want := range []string{InvLinearizable, InvPointerMonotonic, InvReaderMonotonic} {
			if !slices.Contains(got, want) {
				t.Errorf("violations %v, want %s", got, want)
			}
		}
	})
	t.Run("no op-record compare: a key applies twice", func(t *testing.T) {
		e := newBrokenEnv(t)
		b := e.worker("b")
		gb := e.acquire(b, "r")
		e.publish(b, gb, 1, "k", "first body", Applied)
		// Keeps the pointer compare, drops the op record's.
		e.brokenPublish(gb, 2, "k", "second body",
			clientv3.Compare(clientv3.Value(e.ns.PointerKey("r")), "<", layout.EncodeVersion(gb.Version(2))))
		e.readNow("r")
		got := e.verify()
		for _, want := range []string{InvLinearizable, InvKeyOnce} {
			if !slices.Contains(got, want) {
				t.Errorf("violations %v, want %s", got, want)
			}
		}
	})
}

// TestCheckerCatchesUncheckedPaths: the parts of a history that stay out of
// the linearizability check (failed publishes, failed reads) and the check's
// own timeout still fail the run, on histories made against real etcd and
// MinIO.
func TestCheckerCatchesUncheckedPaths(t *testing.T) {
	t.Run("a failed publish whose pointer moved", func(t *testing.T) {
		e := newBrokenEnv(t)
		b := e.worker("b")
		gb := e.acquire(b, "r")
		e.publish(b, gb, 1, "k1", "first body", Applied)
		e.brokenPublishReporting(Failed, gb, 2, "k2", "second body")
		if got := e.readNow("r"); got != gb.Version(2) {
			t.Fatalf("read %s, want the failed publish's %s", got, gb.Version(2))
		}
		got := e.verify()
		for _, want := range []string{InvNoPhantom, InvReaderBytes} {
			if !slices.Contains(got, want) {
				t.Errorf("violations %v, want %s", got, want)
			}
		}
	})
	t.Run("a read of a missing object", func(t *testing.T) {
		e := newBrokenEnv(t)
		b := e.worker("b")
		gb := e.acquire(b, "r")
		e.publish(b, gb, 1, "k1", "the only body", Applied)
		h := e.rec.History()
		obj := h.Publishes[len(h.Publishes)-1].Object
		// A broken GC deletes the published object.
		st := testenv.Get(t).Store(t)
		if err := st.Client.RemoveObject(e.ctx, st.Bucket, obj, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		e.readNow("r")
		h = e.rec.History()
		if r := h.Reads[len(h.Reads)-1]; r.Problem != ReadMissing || r.Object != obj {
			t.Fatalf("read %+v, want %s of %s", r, ReadMissing, obj)
		}
		if got := e.verify(); !slices.Equal(got, []string{InvObjectKept}) {
			t.Errorf("violations %v, want %s", got, InvObjectKept)
		}
	})
	t.Run("a check over its timeout", func(t *testing.T) {
		e := newBrokenEnv(t)
		b := e.worker("b")
		gb := e.acquire(b, "r")
		e.publish(b, gb, 1, "k1", "first body", Applied)
		e.readNow("r")
		if got := e.verify(); len(got) > 0 {
			t.Fatalf("violations %v on a correct history", got)
		}
		if got := e.verifyWith(VerifyOptions{Timeout: time.Nanosecond}); !slices.Equal(got, []string{InvLinearizable}) {
			t.Errorf("violations %v with a 1 ns timeout, want %s", got, InvLinearizable)
		}
	})
}

// takeOver replaces etcd by an empty one for the domain the way an
// EtcdReplaced fault does, on the shared servers: the watch stops, every key
// under the domain's root is deleted (an empty etcd as the domain sees it),
// the watch follows again from the revision after, Recover takes the
// bucket over (FromBucket) and the newest object of each resource is
// republished. treatAsIssued is the broken take-over: it
// records every older epoch as issued by this etcd and drops the restored
// pointers, so GC no longer quarantines the older objects. A GC pass over
// every resource and the final listing follow.
func (e *brokenEnv) takeOver(treatAsIssued bool, resources ...string) {
	if _, err := e.watch.sync(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	ev := RestoreEvent{Start: e.rec.Clock().Now(), OldEpoch: e.rec.History().Epoch, Replaced: true}
	ev.Snapshot = ev.Start
	e.stopWatch()
	resp, err := e.cli.Delete(e.ctx, e.ns.Root(), clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	ev.Revision = resp.Header.Revision
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.watch.run(wctx, ev.Revision+1)
	}()
	e.stopWatch = func() { wcancel(); <-done }
	rep, err := recovery.Recover(e.ctx, e.auth, recovery.Options{FromBucket: true})
	if err != nil {
		e.t.Fatal(err)
	}
	ev.NewEpoch, ev.End = rep.NewEpoch, e.rec.Clock().Now()
	e.rec.Restore(ev)
	for i, r := range rep.Resources {
		if !republishOne(e.ctx, e.auth, e.pub, e.read.cfg, e.rec, fmt.Sprintf("recover/%d", i), r.Resource, r.Above[len(r.Above)-1]) {
			e.t.Fatalf("republish of %s did not apply", r.Resource)
		}
	}
	if treatAsIssued {
		for epoch := uint64(1); epoch < rep.NewEpoch; epoch++ {
			if _, err := e.cli.Put(e.ctx, e.ns.EpochRecord(epoch), "broken take-over"); err != nil {
				e.t.Fatal(err)
			}
		}
		for _, res := range resources {
			if _, err := e.cli.Delete(e.ctx, e.ns.RestoredPrefix(res), clientv3.WithPrefix()); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	st := testenv.Get(e.t).Store(e.t)
	col, err := gc.New(gc.Config{
		Env: fencepub.Env{Namespace: fencepub.Namespace(e.ns), Etcd: e.cli, Store: st}, Authority: e.auth,
		Policy: gc.Policy{Retain: 2, Grace: time.Hour, ClockSkew: 100 * time.Millisecond, AbandonAfter: 2 * time.Second},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := col.Run(e.ctx, gc.RunOptions{All: true}); err != nil {
		e.t.Fatal(err)
	}
	if err := checkObjects(e.ctx, e.rec, e.ns, st); err != nil {
		e.t.Fatal(err)
	}
}

// TestCheckerCatchesBrokenTakeOver: after etcd is replaced by an empty one
// and Recover takes the bucket over, GC must keep every object published
// before (quarantined); a take-over that lets GC treat the older epochs as
// issued deletes them, and the checker reports object_kept.
func TestCheckerCatchesBrokenTakeOver(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("treat older epochs as issued=%t", broken), func(t *testing.T) {
			e := newBrokenEnv(t)
			b := e.worker("b")
			gb := e.acquire(b, "r")
			for seq, key := range []string{"k1", "k2", "k3", "k4"} {
				e.publish(b, gb, uint64(seq+1), key, "body of "+key, Applied)
			}
			e.readNow("r")
			e.takeOver(broken, "r")
			got := e.verify()
			switch {
			case !broken && len(got) > 0:
				t.Errorf("violations %v after a correct take-over", got)
			case broken && !slices.Equal(got, []string{InvObjectKept}):
				t.Errorf("violations %v after a take-over that lets GC delete older epochs, want %s", got, InvObjectKept)
			}
			if h := e.rec.History(); broken != (len(h.Missing) > 0) {
				t.Errorf("missing objects %v", h.Missing)
			}
		})
	}
}

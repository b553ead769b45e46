//go:build !unit

package gc

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/faultstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
)

// newMemEnv is newEnv on the shared etcd with an in-memory bucket behind a
// fault injector instead of MinIO.
func newMemEnv(t *testing.T) (*env, *faultstore.Store, *memstore.Store) {
	t.Helper()
	mem := memstore.New("fencepub", nil)
	fs := faultstore.New(mem)
	return initEnv(&env{Domain: testenv.NewDomain(t), t: t, st: fs}), fs, mem
}

// A failed batch delete fails each of its objects in the report, deletes
// nothing, and the next pass deletes them; an upload the store says is gone
// when GC aborts it counts as aborted.
func TestStoreFaultsRecordedPerObject(t *testing.T) {
	e, fs, mem := newMemEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "logs"
	a, pa := e.worker(res, "worker-a")
	e.publish(pa, "a1", publisher.Applied)
	e.release(a)
	_, pb := e.worker(res, "worker-b")
	e.publish(pb, "b1", publisher.Applied)
	e.publish(pb, "b2", publisher.Applied)
	stale := e.publish(pa, "a2", publisher.Stale).Attempt.Object.Key
	// An incomplete upload of A's released grant, below the pointer.
	upKey := e.NS.ObjectKey(res, layout.Version{Epoch: 1, Fence: a.Generation, Seq: 9}, layout.NewNonce())
	if _, err := mem.CreateUpload(ctx, upKey, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	fs.Inject(faultstore.Delete, 1, faultstore.Fault{Before: fmt.Errorf("%w: injected", objstore.ErrUnavailable)})
	fs.Inject(faultstore.AbortUpload, 1, faultstore.Fault{After: fmt.Errorf("%w: NoSuchUpload (injected)", objstore.ErrNotFound)})
	rep, err := e.collector(nil).runPass(ctx, RunOptions{Resources: []string{res}}, true)
	if err == nil && len(rep.Errors) == 0 {
		t.Fatal("a pass whose delete failed reports no error")
	}
	d := decisionOf(t, rep, stale)
	if d.Kind != string(kindUnpublishable) || d.Action != "failed" || rep.Deleted != 0 {
		t.Fatalf("stale object: %+v, deleted %d; want unpublishable/failed, none deleted", d, rep.Deleted)
	}
	if _, err := mem.Stat(ctx, stale); err != nil {
		t.Fatalf("the object of a failed delete is gone: %v", err)
	}
	for _, d := range rep.Decisions {
		if d.Key == upKey && d.Action != "aborted" {
			t.Fatalf("upload %+v: want the upload the store says is gone aborted", d)
		}
	}
	if rep.Uploads.Aborted != 1 {
		t.Fatalf("uploads %+v: want 1 aborted", rep.Uploads)
	}
	for u, err := range mem.ListUploads(ctx, "") {
		t.Fatalf("upload left: %+v %v", u, err)
	}

	rep = e.run(e.collector(nil), res)
	mustDecide(t, rep, stale, kindUnpublishable, "deleted", "<= pointer")
	if _, err := mem.Stat(ctx, stale); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("second pass left the stale object: %v", err)
	}
}

// A pass that cannot list the incomplete uploads raises no abandon seal
// (it could cover a young upload the pass did not see and would keep) and
// keeps the abandoned objects; the next pass seals and deletes them.
func TestUploadListingFailureRaisesNoSeal(t *testing.T) {
	e, fs, mem := newMemEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "logs"
	g, p := e.worker(res, "worker")
	e.publish(p, "p1", publisher.Applied)
	orphan := e.NS.ObjectKey(res, layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: 2}, layout.NewNonce())
	if _, err := objstore.PutSmallCreateOnly(ctx, mem, orphan, []byte("orphan"), ""); err != nil {
		t.Fatal(err)
	}
	e.expire(g)
	aged := e.collector(later(3 * time.Hour))
	fs.Inject(faultstore.ListUploads, 1, faultstore.Fault{Before: fmt.Errorf("%w: injected", objstore.ErrUnavailable)})
	rep, err := aged.runPass(ctx, RunOptions{Resources: []string{res}}, true)
	if !errors.Is(err, ErrIncomplete) {
		t.Fatalf("pass whose upload listing failed: %v; want ErrIncomplete", err)
	}
	mustDecide(t, rep, orphan, kindAbandoned, "skipped", "could not list the incomplete uploads")
	if rep.SealRaises != 0 || !e.seal(res).Version.IsZero() {
		t.Fatalf("seal %+v raised (%d raises) without the upload listing", e.seal(res), rep.SealRaises)
	}
	rep = e.run(aged, res)
	mustDecide(t, rep, orphan, kindAbandoned, "deleted", "not live")
	if _, err := mem.Stat(ctx, orphan); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the abandoned object is still there: %v", err)
	}
}

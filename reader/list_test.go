//go:build !unit

package reader

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
)

// History lists every retained version oldest first, and OpenVersion reads
// any of them verified against its own entry (If-Match on its ETag, sha256
// and size), without moving what Current and Open return.
func TestHistoryAndOpenVersion(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	r := e.reader(e.Etcd)
	if h, err := r.History(ctx); err != nil || len(h) != 0 {
		t.Fatalf("history of a bound resource with nothing published: %v, %v; want none", h, err)
	}
	bodies := []string{"first", "second", "third"}
	var pub []layout.Pointer
	for i, b := range bodies {
		pub = append(pub, e.publish(fmt.Sprintf("k%d", i), b))
	}
	hist, err := r.History(ctx)
	if err != nil || len(hist) != len(pub) {
		t.Fatalf("history: %d entries, %v; want %d", len(hist), err, len(pub))
	}
	for i, p := range hist {
		if p.Version != pub[i].Version || p.Object != pub[i].Object || p.IdempotencyKey != pub[i].IdempotencyKey || p.Digest != pub[i].Digest || p.Owner != "w" {
			t.Fatalf("history entry %d: %+v; want the pointer publish returned, %+v", i, p, pub[i])
		}
	}
	for i, p := range pub {
		b, err := r.OpenVersion(ctx, p.Version)
		if err != nil {
			t.Fatalf("open %s: %v", p.Version, err)
		}
		if b.Pointer.Version != p.Version {
			t.Fatalf("open %s: body of %s", p.Version, b.Pointer.Version)
		}
		if got, err := drain(b, nil); err != nil || got != bodies[i] {
			t.Fatalf("read %s: %q, %v; want %q", p.Version, got, err, bodies[i])
		}
	}
	// An old version read does not move the reader's current state.
	if got, err := readAll(t, r); err != nil || got != "third" {
		t.Fatalf("open after reading old versions: %q, %v", got, err)
	}

	never := layout.Version{Epoch: 1, Fence: 99, Seq: 1}
	if _, err := r.OpenVersion(ctx, never); !errors.Is(err, ErrNotRetained) || errors.Is(err, ErrUnknownResource) {
		t.Fatalf("a version never published: %v, want ErrNotRetained", err)
	}
	if _, err := r.OpenVersion(ctx, layout.Version{}); !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("the zero version: %v, want ErrInvalid", err)
	}

	// The entry's sha256 is what the bytes are checked against.
	bad := pub[0]
	bad.Object.SHA256 = strings.Repeat("0", 64)
	putHistory(t, e, bad)
	if got, err := drain(r.OpenVersion(ctx, bad.Version)); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("an entry whose sha256 the bytes do not match: %q, %v; want ErrDigestMismatch", got, err)
	}
	// The GET is conditioned on the entry's ETag: other bytes under the
	// key are refused.
	if _, err := e.Store.Client.PutObject(ctx, e.Store.Bucket, pub[1].Object.Key, strings.NewReader("SECOND"), 6, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.OpenVersion(ctx, pub[1].Version); !errors.Is(err, ErrObjectChanged) {
		t.Fatalf("an overwritten object: %v, want ErrObjectChanged", err)
	}
	// An entry whose object is gone is data loss while the entry stays,
	// and "not retained" once GC pruned the entry too.
	if err := e.Store.Client.RemoveObject(ctx, e.Store.Bucket, pub[1].Object.Key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.OpenVersion(ctx, pub[1].Version); !errors.Is(err, ErrObjectMissing) {
		t.Fatalf("an entry whose object is gone: %v, want ErrObjectMissing", err)
	}
	if _, err := e.Etcd.Delete(ctx, e.NS.HistoryKey(res, pub[1].Version)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.OpenVersion(ctx, pub[1].Version); !errors.Is(err, ErrNotRetained) {
		t.Fatalf("a pruned version: %v, want ErrNotRetained", err)
	}
	if hist, err := r.History(ctx); err != nil || len(hist) != 2 || hist[0].Version != pub[0].Version || hist[1].Version != pub[2].Version {
		t.Fatalf("history after pruning %s: %v, %v", pub[1].Version, hist, err)
	}
}

// putHistory writes p as its version's history entry straight to etcd.
func putHistory(t *testing.T, e *env, p layout.Pointer) {
	t.Helper()
	v, err := layout.EncodePointer(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Etcd.Put(ctxT(t, 10*time.Second), e.NS.HistoryKey(res, p.Version), v); err != nil {
		t.Fatal(err)
	}
}

// A resource never granted (a misspelt name) is ErrUnknownResource, which
// is also ErrNotPublished; one granted and not yet published, bound or
// not, or one a recover recorded, is ErrNotPublished alone.
func TestUnknownResource(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	for _, ser := range []bool{false, true} {
		typo := mustNew(t, e, "nothing-here", ser)
		if _, err := typo.Current(ctx); !errors.Is(err, ErrUnknownResource) || !errors.Is(err, ErrNotPublished) {
			t.Fatalf("serializable=%v: current of a resource never granted: %v; want ErrUnknownResource and ErrNotPublished", ser, err)
		}
		if _, err := typo.Open(ctx); !errors.Is(err, ErrUnknownResource) {
			t.Fatalf("open of a resource never granted: %v", err)
		}
	}
	typo := mustNew(t, e, "nothing-here", false)
	if _, err := typo.History(ctx); !errors.Is(err, ErrUnknownResource) {
		t.Fatalf("history of a resource never granted: %v", err)
	}
	if _, err := typo.state(ctx); !errors.Is(err, ErrUnknownResource) {
		t.Fatalf("state of a resource never granted: %v", err)
	}
	if _, err := typo.OpenVersion(ctx, layout.Version{Epoch: 1, Fence: 1, Seq: 1}); !errors.Is(err, ErrUnknownResource) {
		t.Fatalf("a version of a resource never granted: %v", err)
	}

	// Granted, no publisher bound yet: no pointer key, a generation.
	a, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Acquire(ctx, authority.AcquireRequest{Resource: "acquired", Owner: "w", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Known to etcd only by the restore record `authority recover` wrote
	// for it (a resource of the bucket's history whose grants etcd lost).
	if _, err := e.Etcd.Put(ctx, e.NS.RestoredKey("restored", 1), "x"); err != nil {
		t.Fatal(err)
	}
	for name, rd := range map[string]*Reader{"acquired": mustNew(t, e, "acquired", false), "restored": mustNew(t, e, "restored", false), res: e.reader(e.Etcd)} {
		if _, err := rd.Current(ctx); !errors.Is(err, ErrNotPublished) || errors.Is(err, ErrUnknownResource) {
			t.Fatalf("current of %s, granted and not published: %v; want ErrNotPublished alone", name, err)
		}
		if h, err := rd.History(ctx); err != nil || len(h) != 0 {
			t.Fatalf("history of %s: %v, %v", name, h, err)
		}
		if st, err := rd.state(ctx); err != nil || st.Name != name || !st.Pointer.Version.IsZero() {
			t.Fatalf("state of %s: %+v, %v", name, st, err)
		}
	}
}

// mustNew returns a Reader of resource in e's domain.
func mustNew(t *testing.T, e *env, resource string, serializable bool) *Reader {
	t.Helper()
	r, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}, Serializable: serializable}, resource)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Resources lists every resource with a pointer, sorted, with its pointer
// and seal, across pages of listPage keys read at one revision; a corrupt
// pointer is an error, never skipped.
func TestResources(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	cfg := Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}}
	if l, err := resources(ctx, cfg); err != nil || len(l) != 1 || l[0].Name != res || !l[0].Pointer.Version.IsZero() {
		t.Fatalf("a domain with one bound resource: %+v, %v", l, err)
	}
	p := e.publish("k1", "body")

	// More resources than one page holds, written as a publisher's
	// resource init writes them (a zero pointer and a zero seal); one
	// retired by a decommission seal.
	zeroPtr, _ := layout.EncodePointer(layout.Pointer{})
	zeroSeal, _ := layout.EncodeSeal(layout.Seal{})
	want := []string{res}
	var ops []clientv3.Op
	for i := range listPage + listPage/2 {
		name := fmt.Sprintf("bulk-%05d", i)
		want = append(want, name)
		ops = append(ops, clientv3.OpPut(e.NS.PointerKey(name), zeroPtr), clientv3.OpPut(e.NS.SealKey(name), zeroSeal))
	}
	for c := range slices.Chunk(ops, 100) {
		if _, err := e.Etcd.Txn(ctx).Then(c...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	retired := layout.Seal{Version: layout.Version{Epoch: 1, Fence: 7, Seq: layout.MaxNumber}, Reason: layout.SealReasonDecommissioned, At: time.Now().UTC()}
	sv, _ := layout.EncodeSeal(retired)
	if _, err := e.Etcd.Put(ctx, e.NS.SealKey("bulk-00003"), sv); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)

	l, err := resources(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(l))
	for i, s := range l {
		names[i] = s.Name
		switch s.Name {
		case res:
			if s.Pointer.Version != p.Version || s.Pointer.Object != p.Object {
				t.Errorf("%s: pointer %+v, want %+v", s.Name, s.Pointer, p)
			}
		case "bulk-00003":
			if !s.Seal.Retires(s.Pointer.Version) {
				t.Errorf("%s: seal %+v does not retire it", s.Name, s.Seal)
			}
		default:
			if s.Seal.Retires(s.Pointer.Version) {
				t.Errorf("%s: retired by seal %+v", s.Name, s.Seal)
			}
		}
	}
	if !slices.Equal(names, want) {
		t.Fatalf("listed %d resources, want %d in order (first %v, want %v)", len(names), len(want), names[:min(3, len(names))], want[:3])
	}

	if _, err := e.Etcd.Put(ctx, e.NS.PointerKey("bulk-00002"), "garbage"); err != nil {
		t.Fatal(err)
	}
	if _, err := resources(ctx, cfg); !errors.Is(err, fencepub.ErrCorruptRecord) || !strings.Contains(err.Error(), e.NS.PointerKey("bulk-00002")) {
		t.Fatalf("a corrupt pointer: %v; want ErrCorruptRecord naming its key", err)
	}
	if _, err := resources(ctx, Config{}); !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("an empty Config: %v", err)
	}
}

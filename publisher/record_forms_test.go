//go:build !unit

package publisher

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
)

// TestRecordsInTheFormsBefore: a resource whose pointer, history entries
// and op records are in the JSON forms written before the compact encoding
// keeps publishing correctly: the version compares order the old pointer,
// a re-run of an old key is a duplicate (same digest; naming the object in
// full when it is the pointer's) or a conflict (another digest), a new key
// applies and writes the compact forms, and the pointer
// still reads.
func TestRecordsInTheFormsBefore(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "old-forms"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	p := e.bind(g, false)
	var first, second Result
	for i, key := range []string{"k1", "k2"} {
		r, err := p.Publish(ctx, op(key, "body of "+key))
		mustOutcome(t, "publish "+key, r, err, Applied, reasonNone)
		if i == 0 {
			first = r
		} else {
			second = r
		}
	}
	// Rewrite every record in the JSON forms before.
	for _, r := range []Result{first, second} {
		ptr := layout.Pointer{Version: r.Version, Object: r.Object, IdempotencyKey: r.IdempotencyKey, Digest: r.Digest,
			ContentType: "text/plain", Owner: "w", CommittedAt: time.Now().UTC()}
		old, err := layout.EncodeVersioned(ptr.Version, ptr)
		if err != nil {
			t.Fatal(err)
		}
		opVal, err := json.Marshal(map[string]any{"digest": r.Digest, "version": r.Version, "object": r.Object, "owner": "w", "committed_at": ptr.CommittedAt})
		if err != nil {
			t.Fatal(err)
		}
		puts := map[string]string{e.NS.HistoryKey(res, r.Version): old, e.NS.OpKey(res, r.IdempotencyKey): string(opVal)}
		if r.Version == second.Version {
			puts[e.NS.PointerKey(res)] = old
		}
		for k, v := range puts {
			if _, err := e.Etcd.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ptr := e.Pointer(res); ptr.Version != second.Version || ptr.Object != second.Object {
		t.Fatalf("old-form pointer reads as %+v; want %s %+v", ptr, second.Version, second.Object)
	}
	r, err := p.Publish(ctx, op("k1", "body of k1"))
	mustOutcome(t, "re-run of k1", r, err, Duplicate, reasonNone)
	if r.Version != first.Version || r.Object.Key != first.Object.Key {
		t.Errorf("duplicate names %s %s; want %s %s", r.Version, r.Object.Key, first.Version, first.Object.Key)
	}
	r, err = p.Publish(ctx, op("k2", "body of k2"))
	mustOutcome(t, "re-run of k2", r, err, Duplicate, reasonNone)
	if r.Version != second.Version || r.Object != second.Object {
		t.Errorf("duplicate of the pointer's version names %s %+v; want %s and the pointer's object in full %+v", r.Version, r.Object, second.Version, second.Object)
	}
	r, err = p.Publish(ctx, op("k2", "another body"))
	mustOutcome(t, "k2 with another body", r, err, Conflict, reasonNone)
	r, err = p.Publish(ctx, op("k3", "body of k3"))
	mustOutcome(t, "publish k3", r, err, Applied, reasonNone)
	if second.Version.Compare(r.Version) >= 0 {
		t.Fatalf("k3 applied at %s; want above the old-form pointer %s", r.Version, second.Version)
	}
	resp, err := e.Etcd.Get(ctx, e.NS.OpKey(res, "k3"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Value[0] == '{' {
		t.Fatalf("op record of k3: %v, %v; want the compact form", resp, err)
	}
	if ptr := e.Pointer(res); ptr.Version != r.Version || ptr.Object != r.Object {
		t.Fatalf("pointer %+v after k3; want %+v", ptr, r.Object)
	}
}

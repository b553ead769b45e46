//go:build !unit

package publisher

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
)

// TestCorruptValues writes corrupt values under every key the
// publish transaction reads and checks that publishing, binding and
// resolving refuse with a typed error — never a panic, never a publish over
// the corrupt value, never a change of it.
//
// The transaction orders versions by comparing the stored value's bytes, so
// it can only notice corruption that sorts at or above the incoming version;
// a value that sorts below it (empty, truncated) passes the compare and is
// replaced by the new, valid pointer. The test pins both behaviours.
func TestCorruptValues(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	v111 := layout.EncodeVersion(layout.Version{Epoch: 1, Fence: 1, Seq: 1})
	sortsHigh := []string{"not a pointer", "\xff", v111 + "|{bad json", layout.EncodeVersion(layout.Version{Epoch: 2}),
		v111 + `|{"version":{"epoch":1,"fence":1,"seq":2}}`}
	sortsLow := []string{"", "0", layout.EncodeVersion(layout.Version{}), layout.EncodeVersion(layout.Version{}) + "|{bad json"}
	for i, bad := range append(sortsHigh, sortsLow...) {
		high := i < len(sortsHigh)
		for _, which := range []string{"pointer", "seal"} {
			res := fmt.Sprintf("%s-%d", which, i)
			g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
			if layout.EncodeVersion(g.Version(1)) != v111 {
				t.Fatalf("grant %s: want version 1.1.1 first", g.Version(1))
			}
			p := e.bind(g, false) // creates pointer and seal
			key := e.NS.PointerKey(res)
			if which == "seal" {
				key = e.NS.SealKey(res)
			}
			if _, err := e.Etcd.Put(ctx, key, bad); err != nil {
				t.Fatal(err)
			}
			if _, err := e.pub.Bind(ctx, GrantTerm(g, false)); !errors.Is(err, layout.ErrCorruptRecord) {
				t.Errorf("bind with %s %q: %v; want ErrCorruptRecord", which, bad, err)
			}
			r, err := p.Publish(ctx, op("k", "over a corrupt "+which))
			if !high {
				// Sorts below: the compare passes and a valid value replaces it.
				mustOutcome(t, fmt.Sprintf("publish over %s %q", which, bad), r, err, Applied, reasonNone)
				if ptr := e.Pointer(res); ptr.Version != r.Version {
					t.Errorf("pointer %s after repairing %s %q", ptr.Version, which, bad)
				}
				continue
			}
			if !errors.Is(err, layout.ErrCorruptRecord) || r.Outcome != "" {
				t.Errorf("publish over %s %q: %+v, %v; want ErrCorruptRecord and no outcome", which, bad, r, err)
			}
			r, err = e.pub.Resolve(ctx, res, "k2", g.Version(1), unsent)
			switch which {
			case "seal":
				if !errors.Is(err, layout.ErrCorruptRecord) || r.Outcome != "" {
					t.Errorf("resolve with seal %q: %+v, %v; want ErrCorruptRecord", bad, r, err)
				}
			case "pointer": // informative only: the answer still comes
				mustOutcome(t, fmt.Sprintf("resolve with pointer %q", bad), r, err, Stale, ReasonSeal)
			}
			resp, err := e.Etcd.Get(ctx, key)
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != bad {
				t.Errorf("%s %q was overwritten: %v %v", which, bad, resp, err)
			}
		}
	}

	// A corrupt op record: the same key is refused with a typed error;
	// another key still publishes.
	g := e.acquire(authority.AcquireRequest{Resource: "ops", Owner: "w"})
	p := e.bind(g, false)
	if _, err := e.Etcd.Put(ctx, e.NS.OpKey("ops", "k"), "{not json"); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Publish(ctx, op("k", "x")); !errors.Is(err, layout.ErrCorruptRecord) || r.Outcome != "" {
		t.Errorf("publish with a corrupt op record: %+v, %v", r, err)
	}
	if r, err := e.pub.Resolve(ctx, "ops", "k", g.Version(9), unsent); !errors.Is(err, layout.ErrCorruptRecord) || r.Outcome != "" {
		t.Errorf("resolve with a corrupt op record: %+v, %v", r, err)
	}
	r, err := p.Publish(ctx, op("k-other", "y"))
	mustOutcome(t, "another key", r, err, Applied, reasonNone)

	// A corrupt grant record or epoch: stale by grant or epoch, pointer
	// unchanged.
	for _, c := range []struct {
		key, value string
		reason     Reason
	}{
		{e.NS.GrantKey("ops", g.Generation), "garbage", ReasonGrant},
		{e.NS.GrantKey("ops", g.Generation), layout.GrantRecordValue(g.Epoch, "w") + " ", ReasonGrant},
		{e.NS.EpochKey(), "x", ReasonEpoch},
		{e.NS.EpochKey(), layout.EncodeNumber(g.Epoch) + "\x00", ReasonEpoch},
	} {
		old, err := e.Etcd.Get(ctx, c.key)
		if err != nil || len(old.Kvs) != 1 {
			t.Fatal(old, err)
		}
		if _, err := e.Etcd.Put(ctx, c.key, c.value); err != nil {
			t.Fatal(err)
		}
		r, err := p.Publish(ctx, op("k-"+string(c.reason)+fmt.Sprint(len(c.value)), "z"))
		mustOutcome(t, fmt.Sprintf("publish with %s = %q", c.key, c.value), r, err, Stale, c.reason)
		if _, err := e.Etcd.Put(ctx, c.key, string(old.Kvs[0].Value)); err != nil {
			t.Fatal(err)
		}
	}
	if ptr := e.Pointer("ops"); ptr.IdempotencyKey != "k-other" {
		t.Fatalf("pointer moved to %q", ptr.IdempotencyKey)
	}
}

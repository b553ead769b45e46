package gc

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
)

var (
	tns = layout.Namespace{Prefix: "p", Domain: "d"}
	t0  = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
)

const nonce = "0123456789abcdef"

func ver(e, f, s uint64) layout.Version { return layout.Version{Epoch: e, Fence: f, Seq: s} }

func okey(res string, v layout.Version) string { return tns.ObjectKey(res, v, nonce) }

// baseState: epoch 3, pointer (3,5,3), seal (3,6,2), generation 7 held live
// by grant 7, history retains (3,5,2), recover recorded (2,9,4) for epoch 2,
// this etcd issued epochs 1 and 3 (epoch records).
func baseState() *state {
	return &state{
		NS: tns, Resource: "logs", Revision: 100, Epoch: 3, Generation: 7,
		Holder:     &authority.Grant{Resource: "logs", Epoch: 3, Generation: 7},
		Pointer:    layout.Pointer{Version: ver(3, 5, 3), Object: layout.Object{Key: okey("logs", ver(3, 5, 3))}},
		HasPointer: true,
		Seal:       layout.Seal{Version: ver(3, 6, 2)},
		HasSeal:    true,
		Restored:   map[uint64]layout.Version{2: ver(2, 9, 4)},
		Issued:     map[uint64]bool{1: true, 3: true},
		Retained:   map[string]string{okey("logs", ver(3, 5, 2)): "kept by history"},
		Policy:     Policy{Retain: 2, Grace: 10 * time.Minute, ClockSkew: time.Minute, AbandonAfter: time.Hour},
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name   string
		mod    func(*state)
		key    string
		upload bool
		age    time.Duration
		want   kind
		reason string // substring of the reason
	}{
		{name: "foreign name", key: "p/d/logs/readme.txt", want: kindForeign, reason: "not an object key"},
		{name: "foreign nested", key: "p/d/logs/sub/" + layout.EncodeVersion(ver(3, 9, 1)) + "-" + nonce, want: kindForeign},
		{name: "foreign upper-case nonce", key: "p/d/logs/" + layout.EncodeVersion(ver(3, 9, 1)) + "-0123456789ABCDEF", want: kindForeign},
		{name: "foreign short nonce", key: "p/d/logs/" + layout.EncodeVersion(ver(3, 9, 1)) + "-0123", want: kindForeign},
		{name: "another resource's key (logs2)", key: okey("logs2", ver(3, 1, 1)), want: kindForeign},
		{name: "another domain's key", key: "p/e/logs/" + layout.EncodeVersion(ver(3, 1, 1)) + "-" + nonce, want: kindForeign},
		{name: "foreign even when old", key: "p/d/logs/x", age: 100 * time.Hour, want: kindForeign},
		{name: "published", key: okey("logs", ver(3, 5, 3)), age: 100 * time.Hour, want: kindPublished},
		{name: "published: a rollback may name an older object", key: okey("logs", ver(3, 1, 1)),
			mod: func(s *state) { s.Pointer.Object.Key = okey("logs", ver(3, 1, 1)) }, want: kindPublished},
		{name: "upload at the published key is unpublishable", key: okey("logs", ver(3, 5, 3)), upload: true, want: kindUnpublishable, reason: "pointer"},
		{name: "retained", key: okey("logs", ver(3, 5, 2)), age: 100 * time.Hour, want: kindRetained, reason: "kept by history"},
		{name: "retained wins over old epoch", key: okey("logs", ver(1, 1, 1)),
			mod: func(s *state) { s.Retained[okey("logs", ver(1, 1, 1))] = "history" }, want: kindRetained},
		{name: "below pointer", key: okey("logs", ver(3, 5, 1)), want: kindUnpublishable, reason: "<= pointer"},
		// Dataset versions: every key under a version's key carries its version.
		{name: "dataset file of the pointer", key: layout.FileKey(okey("logs", ver(3, 5, 3)), "a/b.csv"), age: 100 * time.Hour,
			want: kindPublished, reason: "pointer's dataset version"},
		{name: "dataset page of the pointer", key: layout.PageKey(okey("logs", ver(3, 5, 3)), 0), want: kindPublished},
		{name: "dataset file of a retained version", key: layout.FileKey(okey("logs", ver(3, 5, 2)), "x"), want: kindRetained, reason: "kept by history"},
		{name: "dataset file a retained manifest reuses", key: layout.FileKey(okey("logs", ver(3, 1, 1)), "x"), age: 100 * time.Hour,
			mod: func(s *state) {
				s.Named = newNamedSet()
				s.Named.add(layout.FileKey(okey("logs", ver(3, 1, 1)), "x"), 1)
				s.Named.seal()
				s.NamedBy = []datasetRef{{s.Pointer, "the pointer"}, {layout.Pointer{Version: ver(3, 5, 2)}, "retained"}}
			},
			want: kindRetained, reason: `file "x" of the manifest of version 3.5.2 (retained)`},
		{name: "dataset file of an old version no manifest names", key: layout.FileKey(okey("logs", ver(3, 1, 1)), "x"),
			want: kindUnpublishable, reason: "<= pointer"},
		{name: "dataset file in flight", key: layout.FileKey(okey("logs", ver(3, 7, 1)), "x"), want: kindInFlight, reason: "grant 7 is live"},
		{name: "a '/' after a version's key is foreign", key: okey("logs", ver(3, 1, 1)) + "/x", want: kindForeign},
		{name: "an unknown suffix is foreign", key: okey("logs", ver(3, 1, 1)) + ".tmp", want: kindForeign},
		{name: "below pointer, young", key: okey("logs", ver(3, 4, 9)), age: time.Second, want: kindUnpublishable},
		{name: "equal to pointer, other nonce", key: tns.ObjectKey("logs", ver(3, 5, 3), "ffffffffffffffff"), want: kindUnpublishable, reason: "<= pointer"},
		{name: "between pointer and seal", key: okey("logs", ver(3, 6, 1)), want: kindUnpublishable, reason: "<= seal"},
		{name: "equal to seal", key: okey("logs", ver(3, 6, 2)), want: kindUnpublishable, reason: "<= seal"},
		{name: "old epoch, no restored record", key: okey("logs", ver(1, 99, 99)), want: kindUnpublishable, reason: "older than the current epoch"},
		{name: "old epoch never issued, no restored record", key: okey("logs", ver(1, 99, 99)), age: 100 * time.Hour,
			mod: func(s *state) { s.Issued = nil }, want: kindQuarantined, reason: "never issued by this etcd"},
		{name: "old epoch never issued, below restored pointer", key: okey("logs", ver(2, 9, 3)),
			mod: func(s *state) { s.Issued = nil }, want: kindUnpublishable},
		{name: "old epoch never issued, above restored pointer", key: okey("logs", ver(2, 9, 5)),
			mod: func(s *state) { s.Issued = nil }, want: kindQuarantined, reason: "recover"},
		{name: "old epoch issued elsewhere: another epoch's record does not count", key: okey("logs", ver(1, 1, 1)),
			mod: func(s *state) { s.Issued = map[uint64]bool{3: true} }, want: kindQuarantined, reason: "another history"},
		{name: "current epoch is not judged by records", key: okey("logs", ver(3, 5, 1)),
			mod: func(s *state) { s.Issued = nil }, want: kindUnpublishable, reason: "<= pointer"},
		{name: "old epoch, at restored pointer", key: okey("logs", ver(2, 9, 4)), want: kindUnpublishable},
		{name: "old epoch, below restored pointer", key: okey("logs", ver(2, 9, 3)), want: kindUnpublishable},
		{name: "old epoch, above restored pointer", key: okey("logs", ver(2, 9, 5)), age: 100 * time.Hour, want: kindQuarantined, reason: "recover"},
		{name: "old epoch, fence above restored", key: okey("logs", ver(2, 10, 1)), want: kindQuarantined},
		{name: "old epoch, unreadable record", key: okey("logs", ver(2, 1, 1)),
			mod: func(s *state) { s.RestoredBad = map[uint64]bool{2: true} }, want: kindQuarantined, reason: "unreadable"},
		{name: "old epoch, unreadable record keys", key: okey("logs", ver(1, 1, 1)),
			mod: func(s *state) { s.RestoredUnreadable = true }, want: kindQuarantined},
		{name: "upload of old epoch above restored is quarantined", key: okey("logs", ver(2, 9, 5)), upload: true, want: kindQuarantined},
		{name: "newer epoch than snapshot", key: okey("logs", ver(4, 1, 1)), age: 100 * time.Hour, want: kindInFlight, reason: "newer than the snapshot"},
		{name: "live grant, old", key: okey("logs", ver(3, 7, 1)), age: 100 * time.Hour, want: kindInFlight, reason: "grant 7 is live"},
		{name: "live grant upload, old", key: okey("logs", ver(3, 7, 4)), upload: true, age: 100 * time.Hour, want: kindInFlight, reason: "live"},
		{name: "fence newer than snapshot generation", key: okey("logs", ver(3, 8, 1)), age: 100 * time.Hour, want: kindInFlight, reason: "newer than the snapshot's generation"},
		{name: "dead grant, young", key: okey("logs", ver(3, 6, 3)), age: 10 * time.Minute, want: kindInFlight, reason: "younger than the abandon period"},
		{name: "dead grant, just under abandon+skew", key: okey("logs", ver(3, 6, 3)), age: 61*time.Minute - time.Nanosecond, want: kindInFlight},
		{name: "dead grant, at abandon+skew", key: okey("logs", ver(3, 6, 3)), age: 61 * time.Minute, want: kindAbandoned},
		{name: "dead grant, old", key: okey("logs", ver(3, 6, 3)), age: 2 * time.Hour, want: kindAbandoned, reason: "not live"},
		{name: "dead grant upload, old", key: okey("logs", ver(3, 6, 3)), upload: true, age: 2 * time.Hour, want: kindAbandoned},
		{name: "no holder, old", key: okey("logs", ver(3, 7, 1)), age: 2 * time.Hour, mod: func(s *state) { s.Holder = nil }, want: kindAbandoned},
		{name: "holder of another epoch does not keep", key: okey("logs", ver(3, 7, 1)), age: 2 * time.Hour,
			mod: func(s *state) { s.Holder.Epoch = 2 }, want: kindAbandoned},
		{name: "holder undecodable keeps", key: okey("logs", ver(3, 6, 3)), age: 100 * time.Hour,
			mod: func(s *state) { s.Holder, s.HolderUnknown = nil, true }, want: kindInFlight, reason: "does not decode"},
		{name: "pointer without seal cannot be sealed", key: okey("logs", ver(3, 6, 3)), age: 100 * time.Hour,
			mod: func(s *state) { s.HasSeal, s.Seal = false, layout.Seal{} }, want: kindInFlight, reason: "not both"},
		{name: "uninitialised resource, old object", key: okey("logs", ver(3, 1, 1)), age: 100 * time.Hour,
			mod: func(s *state) {
				s.HasSeal, s.Seal, s.HasPointer, s.Pointer, s.Holder = false, layout.Seal{}, false, layout.Pointer{}, nil
			}, want: kindAbandoned},
		{name: "decommissioned: published no longer kept", key: okey("logs", ver(3, 5, 3)),
			mod: decommission, want: kindUnpublishable, reason: "pointer"},
		{name: "decommissioned: retained no longer kept", key: okey("logs", ver(3, 5, 2)),
			mod: decommission, want: kindUnpublishable},
		{name: "decommissioned: a new grant's object is in flight", key: okey("logs", ver(3, 8, 1)),
			mod: decommission, want: kindInFlight},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := baseState()
			if c.mod != nil {
				c.mod(s)
			}
			e := entry{Key: c.key, Time: t0.Add(-c.age), Size: 5}
			if c.upload {
				e.UploadID = "up1"
			}
			d := classify(s, e, t0)
			if d.Kind != c.want || !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("Classify(%s) = %s (%s); want %s with reason containing %q", c.key, d.Kind, d.Reason, c.want, c.reason)
			}
			if d.Key != c.key || d.Size != 5 || (d.UploadID != "") != c.upload {
				t.Fatalf("decision does not describe the entry: %+v", d)
			}
			if (d.Version == nil) != (d.Kind == kindForeign) {
				t.Fatalf("version %v for kind %s", d.Version, d.Kind)
			}
			if d.Reason == "" {
				t.Fatal("empty reason")
			}
		})
	}
}

func decommission(s *state) {
	s.Seal = layout.Seal{Version: ver(3, 7, layout.MaxNumber), Reason: sealReasonDecommissioned}
	s.Decommissioned = true
	s.Holder = nil
}

// TestClassifyNeverDeletesPublishable checks invariant 7 on a random fake
// listing over random states: a deleting decision is only made for a key
// that parses, is not named by the pointer or retained, and either can
// never be published (old epoch not quarantined, or <= max(pointer, seal))
// or is in flight of a dead grant, not newer than the snapshot's
// generation and older than the abandon period.
func TestClassifyNeverDeletesPublishable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := func(k int) uint64 { return uint64(rng.IntN(k)) }
	counts := map[kind]int{}
	for i := 0; i < 20000; i++ {
		s := baseState()
		s.Epoch = 1 + n(3)
		s.Generation = n(6)
		s.Pointer.Version = ver(n(4), n(6), n(4))
		s.Pointer.Object.Key = okey("logs", s.Pointer.Version)
		s.Seal.Version = ver(n(4), n(6), n(4))
		s.Holder = nil
		if rng.IntN(2) == 0 {
			s.Holder = &authority.Grant{Epoch: s.Epoch, Generation: s.Generation}
		}
		s.HasSeal = rng.IntN(10) > 0
		s.Restored = map[uint64]layout.Version{n(4): ver(n(4), n(6), n(4))}
		s.Retained = map[string]string{okey("logs", ver(n(4), n(6), n(4))): "r"}
		v := ver(n(5), n(7), n(5))
		key := okey("logs", v)
		if rng.IntN(20) == 0 {
			key = fmt.Sprintf("p/d/logs/junk-%d", i)
		}
		e := entry{Key: key, Time: t0.Add(-time.Duration(rng.IntN(3*3600)) * time.Second)}
		if rng.IntN(5) == 0 {
			e.UploadID = "u"
		}
		d := classify(s, e, t0)
		counts[d.Kind]++
		if !deletes(d.Kind) {
			continue
		}
		if d.Version == nil || *d.Version != v {
			t.Fatalf("delete of a foreign key: %+v", d)
		}
		if e.UploadID == "" && (key == s.Pointer.Object.Key || s.Retained[key] != "") {
			t.Fatalf("delete of a published or retained object: %+v state %+v", d, s)
		}
		top := s.Top()
		switch d.Kind {
		case kindUnpublishable:
			if !(v.Epoch < s.Epoch || v.Compare(top) <= 0) {
				t.Fatalf("unpublishable but publishable: %s top %s epoch %d", v, top, s.Epoch)
			}
			if r, ok := s.Restored[v.Epoch]; ok && v.Epoch < s.Epoch && r.Compare(v) < 0 {
				t.Fatalf("deleted a quarantined object %s (restored %s)", v, r)
			}
		case kindAbandoned:
			live := s.Holder != nil && s.Holder.Generation == v.Fence && s.Holder.Epoch == v.Epoch
			if v.Epoch != s.Epoch || top.Compare(v) >= 0 || live || v.Fence > s.Generation ||
				t0.Sub(e.Time) < s.Policy.AbandonAfter+s.Policy.ClockSkew || !s.HasSeal {
				t.Fatalf("abandoned wrongly: %s top %s state %+v entry %+v", v, top, s, e)
			}
		}
	}
	for _, k := range allKinds() {
		if counts[k] == 0 {
			t.Errorf("the random listing never produced %s: %v", k, counts)
		}
	}
}

// hist is a history entry of v written at etcd revision mod, whose
// publisher's clock said at.
func hist(v layout.Version, mod int64, at time.Time) *historyEntry {
	return &historyEntry{key: "h/" + layout.EncodeVersion(v), mod: mod, pointer: layout.Pointer{Version: v, Object: layout.Object{Key: okey("logs", v)}, CommittedAt: at}}
}

// Retention judges supersession by the successor's revision against the
// clock's grace cutoff, never by the publishers' commit times.
func TestRetention(t *testing.T) {
	p := Policy{Retain: 2, Grace: 10 * time.Minute, ClockSkew: time.Minute, AbandonAfter: time.Hour}
	const cutoff = 100
	cases := []struct {
		name   string
		p      Policy
		cutoff int64
		mods   []int64 // revisions of versions (1,1,1), (1,1,2), ...
		keep   []uint64
		reason map[uint64]string
	}{
		{name: "empty history", p: p, cutoff: cutoff},
		{name: "last N and grace", p: p, cutoff: cutoff, mods: []int64{10, 20, 30, 150, 160},
			keep: []uint64{3, 4, 5}, reason: map[uint64]string{3: "within the reader grace", 4: "last 2", 5: "last 2"}},
		{name: "grace boundary: superseded at the cutoff revision keeps", p: p, cutoff: cutoff, mods: []int64{10, 100, 110},
			keep: []uint64{1, 2, 3}},
		{name: "grace boundary: just before expires", p: p, cutoff: cutoff, mods: []int64{10, 99, 110},
			keep: []uint64{2, 3}},
		{name: "no cutoff yet keeps everything", p: p, cutoff: 0, mods: []int64{10, 20, 30, 40},
			keep: []uint64{1, 2, 3, 4}},
		{name: "retain 1 keeps only the newest", p: Policy{Retain: 1, Grace: time.Second, ClockSkew: time.Second}, cutoff: cutoff,
			mods: []int64{10, 20, 30}, keep: []uint64{3}, reason: map[uint64]string{3: "last 1"}},
		{name: "retain more than history", p: Policy{Retain: 5, Grace: time.Second, ClockSkew: time.Second}, cutoff: cutoff,
			mods: []int64{10, 20}, keep: []uint64{1, 2}},
	}
	// A publisher's clock days behind or ahead changes nothing.
	skews := []time.Duration{0, -10 * 24 * time.Hour, 10 * 24 * time.Hour}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRetention(c.p, c.cutoff)
			for i, mod := range c.mods {
				r.add(hist(ver(1, 1, uint64(i+1)), mod, t0.Add(skews[i%len(skews)])))
				if len(r.queue) > c.p.Retain+1 {
					t.Fatalf("retention holds %d undecided entries; Retain is %d", len(r.queue), c.p.Retain)
				}
			}
			r.finish()
			want := map[string]bool{}
			for _, s := range c.keep {
				want[okey("logs", ver(1, 1, s))] = true
				if !r.keys["h/"+layout.EncodeVersion(ver(1, 1, s))] {
					t.Errorf("history entry of seq %d not kept", s)
				}
				if why := c.reason[s]; why != "" && !strings.Contains(r.objects[okey("logs", ver(1, 1, s))], why) {
					t.Errorf("seq %d kept because %q; want %q", s, r.objects[okey("logs", ver(1, 1, s))], why)
				}
			}
			if len(r.objects) != len(want) || len(r.keys) != len(want) || r.expired != len(c.mods)-len(want) {
				t.Fatalf("retained objects %v (%d keys, %d expired); want seqs %v", r.objects, len(r.keys), r.expired, c.keep)
			}
			for k := range want {
				if _, ok := r.objects[k]; !ok {
					t.Errorf("object %s not retained", k)
				}
			}
		})
	}
}

// TestRetentionBoundedMemory feeds a long history and checks that only the
// retained entries are held.
func TestRetentionBoundedMemory(t *testing.T) {
	r := newRetention(Policy{Retain: 2, Grace: time.Minute, ClockSkew: time.Second}, 99940)
	for i := 1; i <= 100000; i++ {
		r.add(hist(ver(1, 1, uint64(i)), int64(i), t0))
		if len(r.queue) > 3 {
			t.Fatalf("queue grew to %d", len(r.queue))
		}
	}
	r.finish()
	if len(r.objects) > 70 || r.expired < 100000-70 {
		t.Fatalf("kept %d, expired %d", len(r.objects), r.expired)
	}
}

func TestPolicy(t *testing.T) {
	if got := (Policy{}).withDefaults(); got != DefaultConfig().Policy {
		t.Fatalf("zero policy = %+v", got)
	}
	if got := (Policy{Retain: 1, Grace: time.Second}).withDefaults(); got.Retain != 1 || got.Grace != time.Second || got.AbandonAfter != defaultAbandonAfter {
		t.Fatalf("partial policy = %+v", got)
	}
	for _, p := range []Policy{{Retain: -1}, {Grace: -1}, {ClockSkew: -1}, {AbandonAfter: -1}} {
		if err := p.validate(); err == nil {
			t.Errorf("%+v validated", p)
		}
	}
}

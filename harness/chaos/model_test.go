package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
)

func v(fence, seq uint64) layout.Version { return layout.Version{Epoch: 1, Fence: fence, Seq: seq} }

func pub(client int, key, digest string, ver layout.Version, outcome string, call, ret int64) Op {
	return Op{Client: client, Input: Input{Kind: KindPublish, Resource: "r", Key: key, Digest: digest, Version: ver, Authorized: true},
		Output: Output{Outcome: outcome}, Call: call, Return: ret}
}

func read(client int, ver layout.Version, call, ret int64) Op {
	return Op{Client: client, Input: Input{Kind: KindRead, Resource: "r"}, Output: Output{Version: ver}, Call: call, Return: ret}
}

func TestCheck(t *testing.T) {
	unauth := pub(0, "x", "d", v(50, 1), Applied, 0, 1)
	unauth.Input.Authorized = false
	otherEpoch := pub(0, "x", "d", layout.Version{Epoch: 2, Fence: 1, Seq: 1}, Applied, 0, 1)
	cases := []struct {
		name    string
		history []Op
		ok      bool
	}{
		{"protocol timeline: B then late A stale", []Op{
			pub(0, "b", "db", v(42, 1), Applied, 10, 11),
			pub(1, "a", "da", v(41, 1), Stale, 20, 21),
			read(2, v(42, 1), 22, 23),
		}, true},
		{"late A accepted after B: revoked generation overwrite", []Op{
			pub(0, "b", "db", v(42, 1), Applied, 10, 11),
			pub(1, "a", "da", v(41, 1), Applied, 20, 21),
		}, false},
		{"A before B is allowed", []Op{
			pub(1, "a", "da", v(41, 1), Applied, 0, 1),
			pub(0, "b", "db", v(42, 1), Applied, 10, 11),
			read(2, v(42, 1), 12, 13),
		}, true},
		{"concurrent A and B both applied: A linearizes first", []Op{
			pub(0, "b", "db", v(42, 1), Applied, 0, 10),
			pub(1, "a", "da", v(41, 1), Applied, 1, 9),
		}, true},
		{"B stale with nothing newer is illegal", []Op{
			pub(1, "a", "da", v(41, 1), Applied, 0, 10),
			pub(0, "b", "db", v(42, 1), Stale, 1, 9),
		}, false},
		{"seq2 then seq1 stale", []Op{
			pub(0, "k2", "d2", v(41, 2), Applied, 0, 1),
			pub(0, "k1", "d1", v(41, 1), Stale, 2, 3),
		}, true},
		{"operations case", []Op{
			pub(0, "k1", "d1", v(41, 1), Applied, 0, 1),
			pub(0, "k2", "d2", v(41, 2), Applied, 2, 3),
			pub(1, "k1", "d1", v(42, 1), Duplicate, 4, 5),
			pub(1, "k1", "other", v(42, 2), Conflict, 6, 7),
			pub(1, "k3", "d3", v(41, 1), Stale, 8, 9),
			read(2, v(41, 2), 10, 11),
		}, true},
		{"same key applied twice", []Op{
			pub(0, "k1", "d1", v(41, 1), Applied, 0, 1),
			pub(1, "k1", "d1", v(42, 1), Applied, 4, 5),
		}, false},
		{"conflict reported as duplicate", []Op{
			pub(0, "k1", "d1", v(41, 1), Applied, 0, 1),
			pub(1, "k1", "d2", v(42, 1), Duplicate, 4, 5),
		}, false},
		{"unauthorized token applied", []Op{unauth}, false},
		{"old epoch applied", []Op{otherEpoch}, false},
		{"read of a version never published", []Op{
			pub(0, "k1", "d1", v(41, 1), Applied, 0, 1),
			read(1, v(41, 2), 2, 3),
		}, false},
		{"read going back", []Op{
			pub(0, "k1", "d1", v(41, 1), Applied, 0, 1),
			pub(0, "k2", "d2", v(41, 2), Applied, 2, 3),
			read(1, v(41, 1), 4, 5),
		}, false},
		{"resolved not applied raises the seal", []Op{
			pub(0, "k1", "d1", v(41, 3), ResolvedNotApplied, 0, 5),
			pub(1, "k2", "d2", v(41, 2), Stale, 6, 7),
			pub(1, "k3", "d3", v(41, 4), Applied, 8, 9),
		}, true},
		{"gc seal makes an in-flight publish stale", []Op{
			{Input: Input{Kind: KindSeal, Resource: "r", Version: v(41, 1)}, Call: 0, Return: 1},
			pub(1, "a", "da", v(41, 1), Stale, 2, 3),
		}, true},
		{"publish at the seal applied", []Op{
			{Input: Input{Kind: KindSeal, Resource: "r", Version: v(41, 1)}, Call: 0, Return: 1},
			pub(1, "a", "da", v(41, 1), Applied, 2, 3),
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Check(1, c.history, 5*time.Second)
			if (err == nil) != c.ok {
				t.Fatalf("Check = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestCheckRefusesUnresolvedUnknown(t *testing.T) {
	err := Check(1, []Op{pub(0, "k", "d", v(1, 1), Unknown, 0, 1)}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "still unknown") {
		t.Fatalf("got %v", err)
	}
}

// TestPartitionsByResource: an illegal history on one resource is found even
// when another resource's history is legal.
func TestPartitionsByResource(t *testing.T) {
	good := pub(0, "k", "d", v(1, 1), Applied, 0, 1)
	good.Input.Resource = "other"
	h := []Op{good,
		pub(0, "b", "db", v(42, 1), Applied, 10, 11),
		pub(1, "a", "da", v(41, 1), Applied, 20, 21),
	}
	if err := Check(1, h, time.Second); err == nil {
		t.Fatal("want a violation on resource r")
	}
}

// TestCheckStrictAndDuplicateVersion: a strict-mode publish may be stale
// where it could have applied (its lease is not modelled), and a duplicate
// must name the version that applied the key.
func TestCheckStrictAndDuplicateVersion(t *testing.T) {
	strict := pub(0, "k", "d", v(41, 1), Stale, 0, 1)
	strict.Input.Strict = true
	nonStrict := pub(0, "k", "d", v(41, 1), Stale, 0, 1)
	dup := func(ver layout.Version) Op {
		o := pub(1, "k1", "d1", v(42, 1), Duplicate, 4, 5)
		o.Output.Version = ver
		return o
	}
	cases := []struct {
		name    string
		history []Op
		ok      bool
	}{
		{"strict publish stale on a free resource (lease gone)", []Op{strict}, true},
		{"non-strict publish stale on a free resource", []Op{nonStrict}, false},
		{"duplicate names the applied version", []Op{pub(0, "k1", "d1", v(41, 1), Applied, 0, 1), dup(v(41, 1))}, true},
		{"duplicate names another version", []Op{pub(0, "k1", "d1", v(41, 1), Applied, 0, 1), dup(v(42, 1))}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Check(1, c.history, 5*time.Second)
			if (err == nil) != c.ok {
				t.Fatalf("Check = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

// TestCheckFromRestoredState: after a restore the history starts from the
// restored pointer, seal and op records, in the new epoch.
func TestCheckFromRestoredState(t *testing.T) {
	init := InitialState{Epoch: 2, Pointer: v(41, 3), Seal: v(41, 5), Ops: map[string]OpState{"k": {Digest: "d", Version: v(41, 3)}}}
	e2 := func(key, digest string, fence, seq uint64, outcome string, call int64) Op {
		o := pub(0, key, digest, layout.Version{Epoch: 2, Fence: fence, Seq: seq}, outcome, call, call+1)
		return o
	}
	ok := []Op{
		pub(1, "old", "x", v(41, 6), Stale, 0, 1), // the old epoch can no longer publish
		e2("k", "d", 1, 1, Duplicate, 2),          // the restored op record still answers
		e2("n", "e", 1, 1, Applied, 4),
		read(2, layout.Version{Epoch: 2, Fence: 1, Seq: 1}, 6, 7),
	}
	if err := CheckFrom(init, ok, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := CheckFrom(init, []Op{read(2, layout.Version{}, 0, 1)}, time.Second); err == nil {
		t.Fatal("a read of nothing after the restore left a pointer was accepted")
	}
	if err := CheckFrom(init, []Op{e2("k", "d", 1, 1, Applied, 0)}, time.Second); err == nil {
		t.Fatal("a restored key applied again was accepted")
	}
}

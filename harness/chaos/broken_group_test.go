//go:build !unit

package chaos

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/pubhook"
	"github.com/fencepub/fencepub/publisher"
)

// acquireGroup gets and logs grants of resources as one group for w
// (waiting for held leases) and binds a Publisher to each, in name order.
func (e *brokenEnv) acquireGroup(w *worker, resources ...string) ([]authority.Grant, []*publisher.Publisher) {
	gs, _, ok := w.acquireGroup(resources)
	if !ok {
		e.t.Fatalf("%s could not acquire %v", w.id, resources)
	}
	ps := make([]*publisher.Publisher, len(gs))
	for i, g := range gs {
		p, err := e.pub.Bind(e.ctx, publisher.GrantTerm(g, false))
		if err != nil {
			e.t.Fatal(err)
		}
		ps[i] = p
	}
	return gs, ps
}

// publishGroup publishes bodies under key as one group publish through the
// real publisher (worker.publishGroup) and requires outcome.
func (e *brokenEnv) publishGroup(w *worker, gs []authority.Grant, ps []*publisher.Publisher, key string, outcome string, bodies ...string) {
	bs := make([][]byte, len(bodies))
	for i, b := range bodies {
		bs[i] = []byte(b)
	}
	if got, _ := w.publishGroup(ps, gs, make([]bool, len(gs)), key, bs); got != outcome {
		h := e.rec.History()
		e.t.Fatalf("%s: group publish %s: %s (%s), want %s", w.id, key, got, h.Publishes[len(h.Publishes)-1].Err, outcome)
	}
}

// cut reads resources at one revision through reader.ReadCut and logs the
// cut, which must succeed.
func (e *brokenEnv) cut(resources ...string) GroupCut {
	l := &groupReadLoop{id: "greader", clock: e.rec.Clock(), cfg: e.read.cfg, wl: e.wl, rec: e.rec}
	before := len(e.rec.History().GroupCuts)
	l.read(resources)
	h := e.rec.History()
	if len(h.GroupCuts) == before {
		e.t.Fatalf("the cut of %v failed: %v", resources, h.Counters)
	}
	return h.GroupCuts[len(h.GroupCuts)-1]
}

// brokenGroupPublish is a group publish path that publishes the members
// one after another, each in a transaction of its own through the
// single-resource publisher (Publish under key), and logs them as one
// group publish that reported outcome. It publishes the first only
// members (all when only is negative) and calls between after each.
func (e *brokenEnv) brokenGroupPublish(w *worker, gs []authority.Grant, ps []*publisher.Publisher, key, outcome string, only int, between func(), bodies ...string) {
	w.n++
	gid := fmt.Sprintf("%s/%d", w.id, w.n)
	resources, digests := make([]string, len(gs)), make([]string, len(gs))
	ops := make([]PublishOp, len(gs))
	for i, g := range gs {
		d, err := pubhook.RequestDigest(e.ctx, publisher.Operation{IdempotencyKey: key, Body: bytes.NewReader([]byte(bodies[i]))})
		if err != nil {
			e.t.Fatal(err)
		}
		resources[i], digests[i] = g.Resource, d
		body := PublishOp{ID: gid + "/" + g.Resource, Client: w.id, Resource: g.Resource, Key: key, Owner: g.Owner, Group: gid,
			Version: layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: pubhook.NextSeq(ps[i])}, Call: e.rec.Clock().Now()}
		sum := sha256.Sum256([]byte(bodies[i]))
		body.Digest, body.Size = hex.EncodeToString(sum[:]), int64(len(bodies[i]))
		ops[i] = body
		e.rec.Invoke(body)
	}
	for i := range ops {
		ops[i].RequestDigest = layout.GroupDigest(resources, digests)
	}
	if only < 0 {
		only = len(gs)
	}
	for i := range only {
		r, err := ps[i].Publish(e.ctx, publisher.Operation{IdempotencyKey: key, Body: bytes.NewReader([]byte(bodies[i]))})
		if err != nil || r.Outcome != publisher.Applied || r.Version != ops[i].Version {
			e.t.Fatalf("broken group publish, member %s: %s at %s, %v", gs[i].Resource, r.Outcome, r.Version, err)
		}
		ops[i].Object, ops[i].Revision = r.Object.Key, r.Revision
		between()
	}
	for i := range ops {
		op := &ops[i]
		op.Reported, op.Outcome, op.Result, op.Return, op.Done = outcome, outcome, op.Version, e.rec.Clock().Now(), true
		if outcome != Applied {
			op.Object = ""
		}
		e.rec.Complete(*op)
	}
}

// TestCheckerCatchesBrokenGroupPublish: group publishes made against real
// etcd and MinIO through the real publisher (applied, duplicate,
// conflict, and a zombie's group refused by one member while the other
// would have taken it) pass, with cuts read between them; a publish path
// that moves the members one after another, in transactions of their
// own, is reported as group_torn (two revisions, and a cut read between
// them showing one member moved); one that stops after the first member
// as group_partial.
func TestCheckerCatchesBrokenGroupPublish(t *testing.T) {
	t.Run("real group publishes", func(t *testing.T) {
		e := newBrokenEnv(t)
		z, b, a := e.worker("z"), e.worker("b"), e.worker("a")
		gz, pz := e.acquireGroup(z, "ga", "gb") // z stalls past its lease
		gb, pb := e.acquireGroup(b, "gb")       // once z's lease expired
		e.publishGroup(b, gb, pb, "kb", Applied, "b on gb")
		b.releaseGroup(gb)
		e.publishGroup(z, gz, pz, "kz", Stale, "late z on ga", "late z on gb")
		h := e.rec.History()
		if i := slices.IndexFunc(h.Publishes, func(p PublishOp) bool { return p.Client == "z" && p.Refused }); i < 0 || h.Publishes[i].Resource != "gb" {
			t.Fatalf("z's stale group: want it refused by gb: %+v", h.Publishes[len(h.Publishes)-2:])
		}
		e.cut("ga", "gb")
		ga, pa := e.acquireGroup(a, "ga", "gb")
		e.publishGroup(a, ga, pa, "k1", Applied, "a1 on ga", "a1 on gb")
		c := e.cut("ga", "gb")
		e.publishGroup(a, ga, pa, "k1", Duplicate, "a1 on ga", "a1 on gb")
		e.publishGroup(a, ga, pa, "k1", Conflict, "a1 on ga", "other a1 on gb")
		e.publishGroup(a, ga, pa, "k2", Applied, "a2 on ga", "a2 on gb")
		e.cut("ga", "gb")
		a.releaseGroup(ga)
		if c.Pointers[0].Version != ga[0].Version(1) || c.Pointers[1].Version != ga[1].Version(1) {
			t.Fatalf("the cut after k1 read %+v, want both at seq 1", c.Pointers)
		}
		if got := e.verify(); len(got) > 0 {
			t.Fatalf("violations %v on a correct history", got)
		}
	})
	t.Run("members moved one after another", func(t *testing.T) {
		e := newBrokenEnv(t)
		a := e.worker("a")
		ga, pa := e.acquireGroup(a, "ga", "gb")
		e.publishGroup(a, ga, pa, "k1", Applied, "a1 on ga", "a1 on gb")
		var between []GroupCut
		e.brokenGroupPublish(a, ga, pa, "k2", Applied, -1, func() { between = append(between, e.cut("ga", "gb")) }, "a2 on ga", "a2 on gb")
		if between[0].Pointers[0].Version != ga[0].Version(2) || between[0].Pointers[1].Version != ga[1].Version(1) {
			t.Fatalf("the cut between the members read %+v, want ga at seq 2 and gb at seq 1", between[0].Pointers)
		}
		got := e.verify()
		if !slices.Contains(got, InvGroupTorn) {
			t.Errorf("violations %v, want %s", got, InvGroupTorn)
		}
		// The cut alone tells: without the watch's revisions (a watch
		// with gaps judges no revision) the cut between is still torn.
		h := e.rec.History()
		h.WatchGaps = 1
		if got := invariants(Verify(h, VerifyOptions{})); !slices.Contains(got, InvGroupTorn) {
			t.Errorf("violations %v without the watch, want %s from the cut", got, InvGroupTorn)
		}
	})
	t.Run("a member left behind", func(t *testing.T) {
		for _, outcome := range []string{Applied, Failed} {
			t.Run("reported "+outcome, func(t *testing.T) {
				e := newBrokenEnv(t)
				a := e.worker("a")
				ga, pa := e.acquireGroup(a, "ga", "gb")
				e.brokenGroupPublish(a, ga, pa, "k1", outcome, 1, func() {}, "a1 on ga", "a1 on gb")
				e.cut("ga", "gb")
				if got := e.verify(); !slices.Contains(got, InvGroupPartial) {
					t.Errorf("violations %v, want %s", got, InvGroupPartial)
				}
			})
		}
	})
}

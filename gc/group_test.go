//go:build !unit

package gc

import (
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/publisher"
)

// A member superseded by a group publish is retained for the reader grace
// period, as a single publish's would be (DESIGN.md "Groups", "GC and
// retention"): a reader holding a cut taken just before the group can open
// every member's object. A pass right after the group keeps it; a pass past
// the grace deletes it and its history entry.
func TestGroupSupersededMemberRetainedForGrace(t *testing.T) {
	e := newEnv(t)
	members := []string{"breakdown", "report"}
	gs, err := e.auth.AcquireGroup(ctxT(t, 30*time.Second), authority.GroupRequest{Resources: members, Owner: "job", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]*publisher.Publisher, len(gs))
	for i, g := range gs {
		ps[i] = e.bind(e.pub, g)
	}
	// Three groups: the first one's members are then neither the pointer
	// nor among the last 2 versions, and were superseded (by the second
	// group) just now.
	var rounds []publisher.GroupResult
	for _, key := range []string{"day-1", "day-2", "day-3"} {
		ms := make([]publisher.GroupMember, len(ps))
		for i := range ps {
			o := op("", key+" of "+members[i])
			ms[i] = publisher.GroupMember{Publisher: ps[i], Operation: &o}
		}
		r, err := e.pub.PublishGroup(ctxT(t, 30*time.Second), key, ms)
		if err != nil || r.Outcome != publisher.Applied {
			t.Fatalf("group %s: %+v, %v", key, r, err)
		}
		rounds = append(rounds, r)
	}
	if err := e.auth.ReleaseGroup(ctxT(t, 10*time.Second), gs); err != nil {
		t.Fatal(err)
	}
	first, last := rounds[0], rounds[2]

	rep := e.run(e.collector(nil), members...)
	for i, m := range first.Members {
		mustDecide(t, rep, m.Object.Key, kindRetained, "kept", "reader grace")
		mustDecide(t, rep, last.Members[i].Object.Key, kindPublished, "kept", "pointer")
		if !e.Exists(m.Object.Key) {
			t.Fatalf("%s: the object superseded by a group was deleted within the reader grace", m.Resource)
		}
	}

	rep = e.run(e.collector(later(12*time.Minute)), members...)
	for _, m := range first.Members {
		mustDecide(t, rep, m.Object.Key, kindUnpublishable, "deleted", "<= pointer")
		if e.Exists(m.Object.Key) || e.get(e.NS.HistoryKey(m.Resource, m.Version)) != nil {
			t.Fatalf("%s: the superseded member's object or history entry outlived the grace", m.Resource)
		}
	}
	for i, m := range rounds[1].Members {
		if !e.Exists(m.Object.Key) || !e.Exists(last.Members[i].Object.Key) {
			t.Fatalf("%s: one of the last 2 versions was deleted", m.Resource)
		}
	}
}

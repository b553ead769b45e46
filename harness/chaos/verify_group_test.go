package chaos

import (
	"cmp"
	"slices"
	"testing"

	"github.com/fencepub/fencepub/internal/layout"
)

// groupTimeline is a clean group history on ga, gb and gc. Z holds {gb,
// gc} at fence 40 and pauses; A acquires {ga, gb} at fence 41 and
// publishes group g1 (key k1) at revision 10, then k1 again with the same
// content (duplicate) and with other content (conflict); Z's late group is
// stale, refused by gb (A moved it) while gc would have taken it; A's next
// group is unknown and resolved as never applied (ResolveGroup raised ga's
// seal), the one after applied at revision 14. A reader cuts {ga, gb, gc}
// before g1, after it and at the end. Times in ms.
func groupTimeline() *History {
	const ms = 1_000_000
	member := func(group, client, res, key, groupDigest, owner string, ver layout.Version, call, ret int64, outcome string) PublishOp {
		p := PublishOp{
			ID: group + "/" + res, Client: client, Resource: res, Key: key, Digest: "d-" + res + ver.String(), RequestDigest: groupDigest,
			Owner: owner, Version: ver, Call: call * ms, Return: ret * ms, Done: true, Reported: outcome, Outcome: outcome,
			Result: ver, Group: group,
		}
		if outcome == Applied {
			p.Object = "o-" + res + ver.String()
		}
		return p
	}
	cut := func(call, ret, rev int64, vs ...layout.Version) GroupCut {
		c := GroupCut{Client: "greader", Call: call * ms, Return: ret * ms, Revision: rev}
		for i, res := range []string{"ga", "gb", "gc"} {
			p := CutPointer{Resource: res, Version: vs[i]}
			if !vs[i].IsZero() {
				p.Object, p.SHA = "o-"+res+vs[i].String(), "d-"+res+vs[i].String()
			}
			c.Pointers = append(c.Pointers, p)
		}
		return c
	}
	var zero layout.Version
	h := &History{
		Epoch:    1,
		Counters: map[string]int{},
		Grants: []GrantEvent{
			{Client: "z", Resource: "gb", Owner: "Z", RequestID: "rz", Epoch: 1, Fence: 40},
			{Client: "z", Resource: "gc", Owner: "Z", RequestID: "rz", Epoch: 1, Fence: 40},
			{Client: "a", Resource: "ga", Owner: "A", RequestID: "ra", Epoch: 1, Fence: 41},
			{Client: "a", Resource: "gb", Owner: "A", RequestID: "ra", Epoch: 1, Fence: 41},
		},
		Publishes: []PublishOp{
			member("a/1", "a", "ga", "k1", "G1", "A", v(41, 1), 10, 11, Applied),
			member("a/1", "a", "gb", "k1", "G1", "A", v(41, 1), 10, 11, Applied),
			member("a/2", "a", "ga", "k1", "G1", "A", v(41, 2), 14, 15, Duplicate),
			member("a/2", "a", "gb", "k1", "G1", "A", v(41, 2), 14, 15, Duplicate),
			member("a/3", "a", "ga", "k1", "G3", "A", v(41, 3), 16, 17, Conflict),
			member("a/3", "a", "gb", "k1", "G3", "A", v(41, 3), 16, 17, Conflict),
			member("z/1", "z", "gb", "kz", "G4", "Z", v(40, 1), 18, 19, Stale),
			member("z/1", "z", "gc", "kz", "G4", "Z", v(40, 1), 18, 19, Stale),
			member("a/4", "a", "ga", "k5", "G5", "A", v(41, 4), 20, 23, ResolvedNotApplied),
			member("a/4", "a", "gb", "k5", "G5", "A", v(41, 4), 20, 23, ResolvedNotApplied),
			member("a/5", "a", "ga", "k6", "G6", "A", v(41, 5), 24, 25, Applied),
			member("a/5", "a", "gb", "k6", "G6", "A", v(41, 5), 24, 25, Applied),
		},
		Changes: []Change{
			{Kind: ChangeGrant, Resource: "gb", Number: 40, Value: layout.GrantRecordValue(1, "Z"), Revision: 2, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "gb", Number: 40, Revision: 2, KVVersion: 1},
			{Kind: ChangeGrant, Resource: "gc", Number: 40, Value: layout.GrantRecordValue(1, "Z"), Revision: 2, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "gc", Number: 40, Revision: 2, KVVersion: 1},
			{Kind: ChangePointer, Resource: "ga", Revision: 3, KVVersion: 1, Seen: 1},
			{Kind: ChangePointer, Resource: "gb", Revision: 3, KVVersion: 1, Seen: 1},
			{Kind: ChangePointer, Resource: "gc", Revision: 3, KVVersion: 1, Seen: 1},
			{Kind: ChangeGrant, Resource: "ga", Number: 41, Value: layout.GrantRecordValue(1, "A"), Revision: 5, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "ga", Number: 41, Revision: 5, KVVersion: 1},
			{Kind: ChangeGrant, Resource: "gb", Number: 41, Value: layout.GrantRecordValue(1, "A"), Revision: 5, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "gb", Number: 41, Revision: 5, KVVersion: 2},
			{Kind: ChangePointer, Resource: "ga", Version: v(41, 1), Object: "o-ga" + v(41, 1).String(), Revision: 10, KVVersion: 2, Seen: 11 * ms},
			{Kind: ChangePointer, Resource: "gb", Version: v(41, 1), Object: "o-gb" + v(41, 1).String(), Revision: 10, KVVersion: 2, Seen: 11 * ms},
			{Kind: ChangeOpRecord, Resource: "ga", Key: "k1", Version: v(41, 1), Value: "G1", Object: "o-ga" + v(41, 1).String(), Owner: "A", Revision: 10, KVVersion: 1, Seen: 11 * ms},
			{Kind: ChangeSeal, Resource: "ga", Version: v(41, 4), Value: "resolve k5", Revision: 13, KVVersion: 1, Seen: 22 * ms},
			{Kind: ChangePointer, Resource: "ga", Version: v(41, 5), Object: "o-ga" + v(41, 5).String(), Revision: 14, KVVersion: 3, Seen: 25 * ms},
			{Kind: ChangePointer, Resource: "gb", Version: v(41, 5), Object: "o-gb" + v(41, 5).String(), Revision: 14, KVVersion: 3, Seen: 25 * ms},
			{Kind: ChangeOpRecord, Resource: "ga", Key: "k6", Version: v(41, 5), Value: "G6", Object: "o-ga" + v(41, 5).String(), Owner: "A", Revision: 14, KVVersion: 1, Seen: 25 * ms},
		},
		GroupCuts: []GroupCut{
			cut(8, 9, 9, zero, zero, zero),
			cut(12, 13, 11, v(41, 1), v(41, 1), zero),
			cut(26, 27, 15, v(41, 5), v(41, 5), zero),
		},
	}
	// The duplicate's first member carries the version that applied k1.
	h.Publishes[2].Result, h.Publishes[2].Object = v(41, 1), "o-ga"+v(41, 1).String()
	h.Publishes[6].Refused = true
	for i := 8; i < 10; i++ {
		h.Publishes[i].Reported, h.Publishes[i].ResolvedBy = Unknown, "worker"
	}
	return h
}

// TestVerifyGroups: the clean group timeline passes; each mutation, what
// a broken group publish or reader would have produced, is reported
// under the invariants it breaks. Cuts that overlap the group publish
// they tear pass the per-resource linearizability check (each resource is
// judged alone): only the group rules catch them.
func TestVerifyGroups(t *testing.T) {
	const ms = 1_000_000
	during := func(rev int64, ga, gb layout.Version) func(h *History) {
		return func(h *History) {
			c := GroupCut{Client: "greader", Call: 10*ms + 200_000, Return: 10*ms + 800_000, Revision: rev}
			for res, ver := range map[string]layout.Version{"ga": ga, "gb": gb} {
				p := CutPointer{Resource: res, Version: ver}
				if !ver.IsZero() {
					p.Object, p.SHA = "o-"+res+ver.String(), "d-"+res+ver.String()
				}
				c.Pointers = append(c.Pointers, p)
			}
			slices.SortFunc(c.Pointers, func(a, b CutPointer) int { return cmp.Compare(a.Resource, b.Resource) })
			h.GroupCuts = append(h.GroupCuts, c)
		}
	}
	var zero layout.Version
	change := func(res string, ver layout.Version, rev int64) Change {
		return Change{Kind: ChangePointer, Resource: res, Version: ver, Object: "o-" + res + ver.String(), Revision: rev, KVVersion: 9, Seen: 30 * ms}
	}
	verifyMutations(t, groupTimeline, []mutation{
		{"a cut while the group applied shows one member moved", during(10, v(41, 1), zero), []string{InvGroupTorn}},
		{"a cut after the group's revision shows none of it", during(12, zero, zero), []string{InvGroupTorn}},
		{"a cut before the group's revision shows it", during(9, v(41, 1), v(41, 1)), []string{InvGroupTorn}},
		{"a cut while the group applied shows it whole", during(10, v(41, 1), v(41, 1)), nil},
		{"a cut while the group applied shows none of it, before its revision", during(9, zero, zero), nil},
		{"the members moved in two transactions", func(h *History) {
			i := slices.IndexFunc(h.Changes, func(c Change) bool { return c.Resource == "gb" && c.Version == v(41, 1) })
			h.Changes[i].Revision = 11
		}, []string{InvGroupTorn}},
		{"an applied group moved one member", func(h *History) {
			h.Changes = slices.DeleteFunc(h.Changes, func(c Change) bool { return c.Resource == "gb" && c.Version == v(41, 1) })
		}, []string{InvGroupPartial, InvNoPhantom}},
		{"a stale group moved the member that would have taken it", func(h *History) {
			h.Changes = append(h.Changes, change("gc", v(40, 1), 12))
		}, []string{InvGroupPartial, InvNoPhantom}},
		{"a conflicting group moved a member other than the first", func(h *History) {
			h.Changes = append(h.Changes, change("gb", v(41, 3), 12))
		}, []string{InvGroupPartial, InvNoPhantom}},
		{"a group resolved as never applied moved a member", func(h *History) {
			h.Changes = append(h.Changes, change("gb", v(41, 4), 13))
		}, []string{InvGroupPartial, InvNoPhantom}},
		{"a group that sent nothing, its versions taken by the next", func(h *History) {
			for _, m := range h.Publishes[:2] {
				m.ID, m.Group, m.Key, m.RequestDigest, m.Call, m.Return = "a/0/"+m.Resource, "a/0", "k0", "", 9*ms, 10*ms
				m.Reported, m.Outcome, m.Object, m.Err = Failed, Failed, "", "store unavailable"
				h.Publishes = append(h.Publishes, m)
			}
		}, nil},
		{"a group that sent nothing moved a member", func(h *History) {
			for _, m := range h.Publishes[:2] {
				m.ID, m.Group, m.Key, m.RequestDigest, m.Version = "a/9/"+m.Resource, "a/9", "k9", "", v(41, 9)
				m.Reported, m.Outcome, m.Object = Failed, Failed, ""
				h.Publishes = append(h.Publishes, m)
			}
			h.Changes = append(h.Changes, change("gb", v(41, 9), 16))
		}, []string{InvGroupPartial, InvNoPhantom}},
		{"a stale group blamed on the member that would have taken it", func(h *History) {
			h.Publishes[6].Refused, h.Publishes[7].Refused = false, true
		}, []string{InvLinearizable}},
		{"an applied group's other member seen moved by a later cut at another version", func(h *History) {
			h.GroupCuts[2].Pointers[1].Version = v(41, 1)
			h.GroupCuts[2].Pointers[1].Object, h.GroupCuts[2].Pointers[1].SHA = "o-gb"+v(41, 1).String(), "d-gb"+v(41, 1).String()
		}, []string{InvGroupTorn, InvLinearizable}},
	})
}

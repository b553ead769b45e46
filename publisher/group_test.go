//go:build !unit

package publisher

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/recovery"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
)

// Group publish (DESIGN.md "Groups").

// bindGroup acquires resources as one group for owner (10 s TTL) and binds
// each grant on c (e.pub when nil), in name order.
func (e *env) bindGroup(c *Client, owner string, strict bool, resources ...string) ([]authority.Grant, []*Publisher) {
	e.t.Helper()
	if c == nil {
		c = e.pub
	}
	gs, err := e.auth.AcquireGroup(ctxT(e.t, 30*time.Second), authority.GroupRequest{Resources: resources, Owner: owner, TTL: 10 * time.Second})
	if err != nil {
		e.t.Fatalf("acquire group %q: %v", resources, err)
	}
	ps := make([]*Publisher, len(gs))
	for i, g := range gs {
		if ps[i], err = c.Bind(ctxT(e.t, 10*time.Second), GrantTerm(g, strict)); err != nil {
			e.t.Fatal(err)
		}
	}
	return gs, ps
}

// objects returns one single-object member per publisher, body "<body>/<resource>".
func objects(body string, ps ...*Publisher) []GroupMember {
	ms := make([]GroupMember, len(ps))
	for i, p := range ps {
		o := op("", body+"/"+p.term.resource)
		ms[i] = GroupMember{Publisher: p, Operation: &o}
	}
	return ms
}

// mustGroup fails t unless (r, err) is outcome want with reason and member.
func mustGroup(t testing.TB, what string, r GroupResult, err error, want Outcome, reason Reason, member string) {
	t.Helper()
	if r.Outcome != want || r.Reason != reason || r.Member != member {
		t.Fatalf("%s: outcome %q reason %q member %q (err %v); want %q %q %q", what, r.Outcome, r.Reason, r.Member, err, want, reason, member)
	}
	wantErr := map[Outcome]error{Stale: ErrStale, Conflict: ErrConflict, Unknown: ErrUnknown}[want]
	if wantErr == nil && err != nil || wantErr != nil && !errors.Is(err, wantErr) {
		t.Fatalf("%s: err %v; want %v", what, err, wantErr)
	}
}

// A group of a single object and a dataset applies in one transaction:
// both pointers move at one revision under the group's key, one op record
// (under the first member) with the group digest over the members'
// digests; the same group again is duplicate, another content conflict.
func TestPublishGroupApplies(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	_, ps := e.bindGroup(nil, "w", false, "report", "breakdown")
	breakdown, report := ps[0], ps[1]
	members := func(body string) []GroupMember {
		o := op("", body)
		ds := Dataset{Files: FileList([]File{BytesFile("de.csv", []byte(body+" de"), "text/csv"), BytesFile("fr.csv", []byte(body+" fr"), "text/csv")})}
		return []GroupMember{{Publisher: report, Operation: &o}, {Publisher: breakdown, Dataset: &ds}}
	}
	r, err := e.pub.PublishGroup(ctx, "day-1", members("v1"))
	mustGroup(t, "group publish", r, err, Applied, "", "")
	if len(r.Members) != 2 || r.Members[0].Resource != "breakdown" || r.Members[1].Resource != "report" {
		t.Fatalf("members %+v; want breakdown, report", r.Members)
	}
	if want := layout.GroupDigest([]string{"report", "breakdown"}, []string{r.Members[1].Digest, r.Members[0].Digest}); r.Digest != want {
		t.Fatalf("group digest %s; want %s over the members' digests in name order", r.Digest, want)
	}
	for _, m := range r.Members {
		ptr := e.Pointer(m.Resource)
		if ptr.Version != m.Version || ptr.IdempotencyKey != "day-1" || m.Revision != r.Revision {
			t.Fatalf("%s: pointer %+v; want %s under key day-1 at revision %d", m.Resource, ptr, m.Version, r.Revision)
		}
	}
	if !e.Pointer("breakdown").IsDataset() || e.Pointer("report").IsDataset() {
		t.Fatal("member kinds not kept")
	}
	if n, m := e.Count(e.NS.OpKey("breakdown", "day-1")), e.Count(e.NS.OpKey("report", "day-1")); n != 1 || m != 0 {
		t.Fatalf("op records %d under the first member, %d under the second; want 1 and 0", n, m)
	}
	again, err := e.pub.PublishGroup(ctx, "day-1", members("v1"))
	mustGroup(t, "same group again", again, err, Duplicate, "", "")
	if again.Members[0].Version != r.Members[0].Version || e.Pointer("report").Version != r.Members[1].Version {
		t.Fatalf("duplicate: %+v; want the original version and no move", again.Members[0])
	}
	other, err := e.pub.PublishGroup(ctx, "day-1", members("v2"))
	mustGroup(t, "other content, same key", other, err, Conflict, "", "")
	r2, err := e.pub.PublishGroup(ctx, "day-2", members("v2"))
	mustGroup(t, "next group", r2, err, Applied, "", "")
}

// A group holder paused past its TTL while a new group holder publishes:
// the old holder's group is stale, naming its first member and why, and
// moves no pointer — in strict mode by its lost lease, otherwise by the
// pointer the new holder moved.
func TestPublishGroupPausedHolderIsStale(t *testing.T) {
	for _, strict := range []bool{true, false} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, time.Minute)
			old, oldPs := e.bindGroup(nil, "old", strict, "a", "b")
			e.expire(old[0]) // one lease: every member's holder goes
			_, newPs := e.bindGroup(nil, "new", strict, "b", "a")
			won, err := e.pub.PublishGroup(ctx, "new-1", objects("new", newPs...))
			mustGroup(t, "new holder", won, err, Applied, "", "")
			before := map[string]int{"a": len(e.history("a")), "b": len(e.history("b"))}
			reason := ReasonPointer
			if strict {
				reason = ReasonLease
			}
			r, err := e.pub.PublishGroup(ctx, "old-1", objects("old", oldPs...))
			mustGroup(t, "paused holder", r, err, Stale, reason, "a")
			if strict && !errors.Is(err, authority.ErrLeaseLost) {
				t.Fatalf("strict stale %v does not wrap ErrLeaseLost", err)
			}
			for i, m := range won.Members {
				if e.Pointer(m.Resource).Version != m.Version || len(e.history(m.Resource)) != before[m.Resource] {
					t.Fatalf("member %d %s moved after a stale group", i, m.Resource)
				}
			}
		})
	}
}

// A group publish whose response is lost until the deadline is unknown;
// ResolveGroup (from the result's JSON) settles the whole group: applied
// with both pointers moved when the transaction had applied, stale with
// nothing moved (and never to move) when it never reached etcd.
func TestPublishGroupLostResponseResolve(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	px, c := e.proxied(nil)
	_, ps := e.bindGroup(c, "w", false, "a", "b")

	fired := px.DropResponse(1, 3*time.Second)
	r, err := c.PublishGroup(ctxT(t, 2*time.Second), "lost", objects("lost", ps...))
	mustGroup(t, "lost response", r, err, Unknown, "", "")
	<-fired
	var decoded GroupResult
	if b, err := json.Marshal(r); err != nil || json.Unmarshal(b, &decoded) != nil {
		t.Fatalf("group result JSON: %v", err)
	}
	settled, err := e.pub.ResolveGroup(ctx, decoded)
	mustGroup(t, "resolve an applied group", settled, err, Applied, "", "")
	for _, m := range r.Members {
		if e.Pointer(m.Resource).Version != m.Attempt.Version {
			t.Fatalf("%s: pointer %s; want the resolved group's %s", m.Resource, e.Pointer(m.Resource).Version, m.Attempt.Version)
		}
	}

	px.Set(faultproxy.Faults{DropUpstream: true})
	r, err = c.PublishGroup(ctxT(t, 2*time.Second), "never", objects("never", ps...))
	mustGroup(t, "request lost", r, err, Unknown, "", "")
	px.Set(faultproxy.Faults{})
	px.ResetAll()
	settled, err = e.pub.ResolveGroup(ctx, r)
	mustGroup(t, "resolve a group never applied", settled, err, Stale, ReasonSeal, "a")
	for _, m := range r.Members {
		if e.Pointer(m.Resource).Version == m.Attempt.Version {
			t.Fatalf("%s moved by a group resolved stale", m.Resource)
		}
	}
	if s := e.seal("a"); s.Version.Compare(r.Members[0].Attempt.Version) < 0 {
		t.Fatalf("seal of the first member %s is below the settled attempt %s", s.Version, r.Members[0].Attempt.Version)
	}
}

// A member whose object cannot be written fails the group before anything
// is sent, and every member's seq is given back.
func TestPublishGroupGivesSeqsBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	_, ps := e.bindGroup(nil, "w", false, "a", "b")
	bad := Operation{Body: strings.NewReader("short"), Size: 99}
	ms := []GroupMember{objects("ok", ps[0])[0], {Publisher: ps[1], Operation: &bad}}
	if _, err := e.pub.PublishGroup(ctx, "k", ms); !errors.Is(err, ErrBody) {
		t.Fatalf("group with a short body: %v, want ErrBody", err)
	}
	for _, p := range ps {
		if p.nextSeq() != 1 {
			t.Fatalf("%s: next seq %d after a group that sent nothing; want 1", p.term.resource, p.nextSeq())
		}
	}
	r, err := e.pub.PublishGroup(ctx, "k", objects("ok", ps...))
	mustGroup(t, "group after the failure", r, err, Applied, "", "")
	if r.Members[0].Version.Seq != 1 || r.Members[1].Version.Seq != 1 {
		t.Fatalf("versions %s %s; want seq 1 each", r.Members[0].Version, r.Members[1].Version)
	}
}

// The largest group that fits etcd's default --max-txn-ops (128) applies on
// real etcd, in strict mode (31 members, acquired as one group) and
// non-strict (42, acquired one by one); one member more is refused before
// anything is written, naming how many fit and the key; and etcd itself
// refuses that larger group when the configured limit is above the
// server's, which shows the count is exact.
func TestPublishGroupLimit(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	for _, tc := range []struct {
		strict bool
		fit    int
	}{{true, 31}, {false, 42}} {
		var ps []*Publisher
		for i := range tc.fit + 1 {
			g := e.acquire(authority.AcquireRequest{Resource: fmt.Sprintf("s%v-%03d", tc.strict, i), Owner: "w"})
			ps = append(ps, e.bind(g, tc.strict))
		}
		r, err := e.pub.PublishGroup(ctx, "fit", objects("fit", ps[:tc.fit]...))
		mustGroup(t, fmt.Sprintf("strict=%v group of %d", tc.strict, tc.fit), r, err, Applied, "", "")
		_, err = e.pub.PublishGroup(ctx, "over", objects("over", ps...))
		if !errors.Is(err, ErrGroupTooLarge) || !errors.Is(err, fencepub.ErrInvalid) ||
			!strings.Contains(err.Error(), fmt.Sprintf("at most %d members", tc.fit)) || !strings.Contains(err.Error(), "etcd.max_txn_ops") {
			t.Fatalf("strict=%v group of %d: %v; want ErrGroupTooLarge naming %d and etcd.max_txn_ops", tc.strict, tc.fit+1, err, tc.fit)
		}
		if ps[tc.fit].nextSeq() != 1 {
			t.Fatal("a refused group took a seq")
		}
		wrong := e.client(e.Etcd, func(c *Config) { c.MaxTxnOps = 1000 })
		for i := range ps {
			if ps[i], err = wrong.Bind(ctx, ps[i].term); err != nil {
				t.Fatal(err)
			}
		}
		r, err = wrong.PublishGroup(ctx, "over", objects("over", ps...))
		if err == nil || r.Outcome != "" || !strings.Contains(err.Error(), "too many operations") {
			t.Fatalf("strict=%v group of %d sent to etcd: %+v, %v; want etcd's refusal", tc.strict, tc.fit+1, r, err)
		}
		if ps[0].nextSeq() != 2 {
			t.Fatalf("a group etcd refused kept its seqs: next %d", ps[0].nextSeq())
		}
	}
}

// A group resolved stale is settled for every member, not only the first:
// each member's attempt gets its settled marker in the bucket, so a
// RestoreLost after an etcd restore (which loses the seals) never
// republishes any member of a group that was never applied.
func TestResolveGroupSettlesEveryMember(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	px, c := e.proxied(nil)
	_, ps := e.bindGroup(c, "w", false, "a", "b", "c")
	px.Set(faultproxy.Faults{DropUpstream: true})
	r, err := c.PublishGroup(ctxT(t, 2*time.Second), "never", objects("never", ps...))
	mustGroup(t, "request lost", r, err, Unknown, "", "")
	px.Set(faultproxy.Faults{})
	px.ResetAll()
	settled, err := e.pub.ResolveGroup(ctx, r)
	mustGroup(t, "resolve a group never applied", settled, err, Stale, ReasonSeal, "a")
	for _, m := range r.Members {
		if !e.Exists(m.Attempt.Object.Key) {
			t.Fatalf("%s: the attempt's object is gone; the test needs it", m.Resource)
		}
		lost := recovery.LostObject{Key: m.Attempt.Object.Key, Version: m.Attempt.Version, LastModified: time.Now()}
		if o, ok, err := e.pub.newestPublishable(ctx, m.Resource, []recovery.LostObject{lost}); err != nil || ok {
			t.Errorf("%s: a restore would republish the settled group's attempt %s: %+v, %v", m.Resource, m.Attempt.Version, o, err)
		}
	}
	// Settling again (the same JSON) answers the same and writes nothing new.
	again, err := e.pub.ResolveGroup(ctx, r)
	mustGroup(t, "resolve again", again, err, Stale, ReasonSeal, "a")
}

//go:build !unit

package reader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/publisher"
)

// groupPublishers acquires "a" and "b" as one group and binds both.
func (e *env) groupPublishers() (*publisher.Client, []*publisher.Publisher) {
	e.t.Helper()
	ctx := ctxT(e.t, 30*time.Second)
	env := fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}
	a, err := authority.New(authority.Config{Env: env})
	if err != nil {
		e.t.Fatal(err)
	}
	gs, err := a.AcquireGroup(ctx, authority.GroupRequest{Resources: []string{"a", "b"}, Owner: "w", TTL: 30 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := publisher.New(publisher.Config{Env: env})
	if err != nil {
		e.t.Fatal(err)
	}
	ps := make([]*publisher.Publisher, len(gs))
	for i, g := range gs {
		if ps[i], err = c.Bind(ctx, publisher.GrantTerm(g, false)); err != nil {
			e.t.Fatal(err)
		}
	}
	return c, ps
}

// torn reports why cut mixes the members of different publishes: every
// pointer of a group publish carries the group's key.
func torn(cut Cut) error {
	a, b := cut.Pointers["a"], cut.Pointers["b"]
	if a.IdempotencyKey != b.IdempotencyKey {
		return fmt.Errorf("torn cut at revision %d: a at %s (key %q), b at %s (key %q)", cut.Revision, a.Version, a.IdempotencyKey, b.Version, b.IdempotencyKey)
	}
	return nil
}

// ReadCut and WatchCut never show a group publish torn: while groups of
// "a" and "b" are published, every cut read holds both members of one
// group publish, and the watch delivers each group as one Cut. Members
// published one by one show up torn in the same checks, which shows they
// can fail.
func TestGroupCutIsNeverTorn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	c, ps := e.groupPublishers()
	cfg := Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd}}
	if _, err := ReadCut(ctx, cfg, "a", "never"); !errors.Is(err, ErrUnknownResource) {
		t.Fatalf("cut with a resource never granted: %v, want ErrUnknownResource", err)
	}
	if _, err := ReadCut(ctx, cfg, "a", "a"); !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("cut naming a twice: %v, want ErrInvalid", err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	updates := WatchCut(wctx, cfg, "a", "b")
	first := <-updates
	if first.Err != nil || !first.Pointers["a"].Version.IsZero() || !first.Pointers["b"].Version.IsZero() {
		t.Fatalf("first cut %+v: want both unpublished", first)
	}
	const groups = 20
	done := make(chan error, 1)
	go func() {
		for i := range groups {
			members := make([]publisher.GroupMember, len(ps))
			for j, p := range ps {
				o := publisher.Operation{Body: strings.NewReader(fmt.Sprint(i, j))}
				members[j] = publisher.GroupMember{Publisher: p, Operation: &o}
			}
			if r, err := c.PublishGroup(ctx, fmt.Sprint("g", i), members); err != nil || r.Outcome != publisher.Applied {
				done <- fmt.Errorf("group %d: %+v, %v", i, r, err)
				return
			}
		}
		done <- nil
	}()
	reads := 0
	for running := true; running; reads++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
		}
		cut, err := ReadCut(ctx, cfg, "a", "b")
		if err != nil {
			t.Fatal(err)
		}
		if err := torn(cut); err != nil {
			t.Fatal(err)
		}
	}
	for i := range groups {
		u := <-updates
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		if err := torn(u.Cut); err != nil || u.Pointers["a"].IdempotencyKey != fmt.Sprint("g", i) {
			t.Fatalf("watch update %d: %+v, %v; want group g%d whole", i, u.Cut, err, i)
		}
	}

	// Published one by one, the members are seen torn.
	for j, p := range ps {
		if _, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: "single-" + fmt.Sprint(j), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if u := <-updates; torn(u.Cut) == nil {
		t.Fatalf("a lone member publish was not seen torn: %+v", u.Cut)
	}
	t.Logf("%d cuts read while %d groups were published", reads, groups)
}

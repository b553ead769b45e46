//go:build !unit

package authority

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
)

// A group grant is all or nothing: a held member fails the whole group and
// leaves the others ungranted; once free, one transaction grants every
// member its own next generation on one lease; a retried request id gets
// the same grants; ReleaseGroup seals every member's term and frees all.
func TestAcquireGroupAllOrNothing(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, time.Minute)
	for _, r := range []string{"a", "b", "c"} {
		initResource(t, a, r)
	}
	single := mustAcquire(t, a, AcquireRequest{Resource: "b", Owner: "single"})
	_, err := a.AcquireGroup(ctx, GroupRequest{Resources: []string{"c", "b", "a"}, Owner: "grp", TTL: 10 * time.Second})
	if !errors.Is(err, ErrHeld) {
		t.Fatalf("group over a held member: %v, want ErrHeld", err)
	}
	for _, r := range []string{"a", "c"} {
		if st, err := a.inspect(ctx, r); err != nil || st.Generation != 0 || st.Holder != nil {
			t.Fatalf("%s after a refused group: %+v, %v; want untouched", r, st, err)
		}
	}
	if err := a.Release(ctx, single); err != nil {
		t.Fatal(err)
	}
	req := GroupRequest{Resources: []string{"c", "b", "a"}, Owner: "grp", RequestID: "group-req", TTL: 10 * time.Second}
	gs, err := a.AcquireGroup(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"a": 1, "b": 2, "c": 1}
	for i, g := range gs {
		if g.Resource != []string{"a", "b", "c"}[i] || g.Generation != want[g.Resource] {
			t.Fatalf("grant %d: %s generation %d, want sorted members with generations %v", i, g.Resource, g.Generation, want)
		}
		if g.LeaseID != gs[0].LeaseID || g.HolderRevision != gs[0].HolderRevision {
			t.Fatalf("grants not on one lease and revision: %+v", gs)
		}
		if !cmpHolds(t, a, g.holderCmp(a.ns), g.grantCmp(a.ns)) {
			t.Fatalf("%s: holder or grant record missing", g.Resource)
		}
	}
	again, err := a.AcquireGroup(ctx, req)
	if err != nil || len(again) != 3 || again[1].Generation != gs[1].Generation || again[1].HolderRevision != gs[1].HolderRevision {
		t.Fatalf("retried request id: %+v, %v; want the original grants", again, err)
	}
	if _, err := a.AcquireGroup(ctx, GroupRequest{Resources: []string{"a", "d"}, Owner: "grp", RequestID: "group-req", TTL: 10 * time.Second}); !errors.Is(err, ErrRequestConflict) {
		t.Fatalf("request id reused for another set: %v, want ErrRequestConflict", err)
	}
	if err := a.ReleaseGroup(ctx, gs); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if s, _ := sealOf(t, a, g.Resource); s.Version != g.Version(layout.MaxNumber) {
			t.Fatalf("%s: seal %s after ReleaseGroup, want %s", g.Resource, s.Version, g.Version(layout.MaxNumber))
		}
		if h, ok, err := a.Holder(ctx, g.Resource); err != nil || ok {
			t.Fatalf("%s still held after ReleaseGroup: %+v, %v", g.Resource, h, err)
		}
	}
	if err := a.ReleaseGroup(ctx, gs); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("second ReleaseGroup: %v, want ErrLeaseLost", err)
	}
	for _, bad := range [][]string{nil, {"a", "a"}} {
		if _, err := a.AcquireGroup(ctx, GroupRequest{Resources: bad, Owner: "grp", TTL: 10 * time.Second}); !errors.Is(err, fencepub.ErrInvalid) {
			t.Fatalf("group %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// Two overlapping groups (named in opposite orders) and a single acquire of
// a shared member contend with Wait: every round of each ends (no
// deadlock), no two of them ever hold a resource at once, and each
// resource's generation counts exactly the grants made of it.
func TestAcquireGroupOverlapNoDeadlock(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, 2*time.Minute)
	const rounds = 6
	sets := [][]string{{"a", "b", "c"}, {"c", "d", "b"}, {"b"}}
	var (
		mu     sync.Mutex
		inUse  = map[string]string{}
		grants = map[string]uint64{}
		wg     sync.WaitGroup
		errs   = make(chan error, len(sets))
	)
	for w, set := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("w%d", w)
			for range rounds {
				gs, err := a.AcquireGroup(ctx, GroupRequest{Resources: set, Owner: owner, TTL: 10 * time.Second, Wait: true})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", owner, err)
					return
				}
				mu.Lock()
				for _, g := range gs {
					if o, ok := inUse[g.Resource]; ok {
						mu.Unlock()
						errs <- fmt.Errorf("%s granted %q while %s holds it", owner, g.Resource, o)
						return
					}
					inUse[g.Resource] = owner
					grants[g.Resource]++
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				for _, g := range gs {
					delete(inUse, g.Resource)
				}
				mu.Unlock()
				if err := a.ReleaseGroup(ctx, gs); err != nil {
					errs <- fmt.Errorf("%s: release: %w", owner, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for res, n := range grants {
		if gen := generation(t, a, res); gen != n {
			t.Errorf("%s: generation %d after %d grants", res, gen, n)
		}
	}
	if grants["b"] != 3*rounds {
		t.Errorf("b granted %d times, want %d", grants["b"], 3*rounds)
	}
}

// The largest group that fits etcd's default --max-txn-ops (128) is
// granted on real etcd; one member more is refused before anything is
// written, naming how many fit and the configuration key; and etcd itself
// refuses that larger group when the configured limit is wrong (above the
// server's), which shows the count is exact.
func TestAcquireGroupLimit(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, 2*time.Minute)
	fit := a.maxGroup()
	if groupOps(fit) > defaultMaxTxnOps || groupOps(fit+1) <= defaultMaxTxnOps {
		t.Fatalf("maxGroup %d does not match groupOps under %d", fit, defaultMaxTxnOps)
	}
	names := func(n int, prefix string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%03d", prefix, i)
		}
		return out
	}
	gs, err := a.AcquireGroup(ctx, GroupRequest{Resources: names(fit, "fit"), Owner: "grp", TTL: 10 * time.Second})
	if err != nil || len(gs) != fit {
		t.Fatalf("group of %d: %d grants, %v", fit, len(gs), err)
	}
	if err := a.ReleaseGroup(ctx, gs); err != nil {
		t.Fatal(err)
	}
	_, err = a.AcquireGroup(ctx, GroupRequest{Resources: names(fit+1, "over"), Owner: "grp", TTL: 10 * time.Second})
	if !errors.Is(err, ErrGroupTooLarge) || !errors.Is(err, fencepub.ErrInvalid) ||
		!strings.Contains(err.Error(), fmt.Sprintf("at most %d members", fit)) || !strings.Contains(err.Error(), "etcd.max_txn_ops") {
		t.Fatalf("group of %d: %v; want ErrGroupTooLarge naming %d and etcd.max_txn_ops", fit+1, err, fit)
	}
	if n := countKeys(t, a.cli, a.ns.GenerationKey("over000")); n != 0 {
		t.Fatalf("a refused group wrote %d keys", n)
	}
	wrong := newAuthority(t, a.cli, a.st, a.ns, func(c *Config) { c.MaxTxnOps = groupOps(fit + 1) })
	_, err = wrong.AcquireGroup(ctx, GroupRequest{Resources: names(fit+1, "over"), Owner: "grp", TTL: 10 * time.Second})
	if err == nil || errors.Is(err, ErrGroupTooLarge) || !strings.Contains(err.Error(), "too many operations") {
		t.Fatalf("group of %d sent to etcd: %v; want etcd's refusal", fit+1, err)
	}
	if _, ok, err := a.Holder(ctx, "over000"); err != nil || ok {
		t.Fatalf("etcd's refusal left a holder: %v, %v", ok, err)
	}
}

// A single grant and an overlapping group contend: with b held by a single
// grant, the group {a, b} fails at once without Wait and after MaxWait with
// it, leaving a ungranted (no hold-and-wait); a waiting group is granted
// once the single grant is released. Then the reverse: while the group
// holds {a, b} a single acquire of b fails the same way and a waiting one
// is granted once the group is released.
func TestAcquireGroupContendsWithSingle(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, time.Minute)
	for _, r := range []string{"a", "b"} {
		initResource(t, a, r)
	}
	// granted runs acquire in the background and returns the channel of
	// its error, with the time it took.
	type done struct {
		err  error
		took time.Duration
	}
	granted := func(acquire func() error) <-chan done {
		ch := make(chan done, 1)
		start := time.Now()
		go func() { err := acquire(); ch <- done{err, time.Since(start)} }()
		return ch
	}
	const wait = 500 * time.Millisecond

	single := mustAcquire(t, a, AcquireRequest{Resource: "b", Owner: "single"})
	group := GroupRequest{Resources: []string{"b", "a"}, Owner: "grp", TTL: 10 * time.Second}
	if _, err := a.AcquireGroup(ctx, group); !errors.Is(err, ErrHeld) {
		t.Fatalf("group over a held member: %v, want ErrHeld", err)
	}
	waited := group
	waited.Wait, waited.MaxWait = true, wait
	start := time.Now()
	if _, err := a.AcquireGroup(ctx, waited); !errors.Is(err, ErrHeld) || time.Since(start) < wait {
		t.Fatalf("group waiting %s over a held member: %v after %s, want ErrHeld after the wait", wait, err, time.Since(start))
	}
	if st, err := a.inspect(ctx, "a"); err != nil || st.Holder != nil || st.Generation != 0 {
		t.Fatalf("a while the group waited: %+v, %v; want never granted", st, err)
	}
	var gs []Grant
	waiter := granted(func() (err error) {
		gs, err = a.AcquireGroup(ctx, GroupRequest{Resources: []string{"b", "a"}, Owner: "grp", TTL: 10 * time.Second, Wait: true})
		return err
	})
	select {
	case d := <-waiter:
		t.Fatalf("group granted while b is held: %v", d.err)
	case <-time.After(wait):
	}
	released := time.Now()
	if err := a.Release(ctx, single); err != nil {
		t.Fatal(err)
	}
	if d := <-waiter; d.err != nil || len(gs) != 2 || gs[0].Generation != 1 || gs[1].Generation != 2 {
		t.Fatalf("waiting group after the release: %+v, %v; want a at 1, b at 2", gs, d.err)
	}
	t.Logf("the waiting group was granted %s after the single grant's release", time.Since(released))

	if _, err := a.Acquire(ctx, AcquireRequest{Resource: "b", Owner: "single", TTL: 10 * time.Second}); !errors.Is(err, ErrHeld) {
		t.Fatalf("single acquire of a group member: %v, want ErrHeld", err)
	}
	start = time.Now()
	if _, err := a.Acquire(ctx, AcquireRequest{Resource: "b", Owner: "single", TTL: 10 * time.Second, Wait: true, MaxWait: wait}); !errors.Is(err, ErrHeld) || time.Since(start) < wait {
		t.Fatalf("single acquire waiting %s on a group member: %v after %s, want ErrHeld after the wait", wait, err, time.Since(start))
	}
	var g Grant
	waiter = granted(func() (err error) {
		g, err = a.Acquire(ctx, AcquireRequest{Resource: "b", Owner: "single", TTL: 10 * time.Second, Wait: true})
		return err
	})
	select {
	case d := <-waiter:
		t.Fatalf("single grant while the group holds b: %v", d.err)
	case <-time.After(wait):
	}
	if err := a.ReleaseGroup(ctx, gs); err != nil {
		t.Fatal(err)
	}
	if d := <-waiter; d.err != nil || g.Generation != 3 {
		t.Fatalf("waiting single acquire after the group's release: %+v, %v; want b at 3", g, d.err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}

// Closing the Session of one member of a group ends the whole group: every
// member's term is sealed (as ReleaseGroup seals it) before the shared
// lease is revoked, so no member is left with an open term.
func TestSessionCloseReleasesGroup(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, time.Minute)
	for _, r := range []string{"a", "b", "c", "d"} {
		initResource(t, a, r)
	}
	gs, err := a.AcquireGroup(ctx, GroupRequest{Resources: []string{"a", "b", "c"}, Owner: "grp", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	other := mustAcquire(t, a, AcquireRequest{Resource: "d", Owner: "other"}) // another lease: untouched
	s, err := a.NewSession(ctx, gs[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if seal, _ := sealOf(t, a, g.Resource); seal.Version != g.Version(layout.MaxNumber) {
			t.Errorf("%s: seal %s after Session.Close of member b, want %s", g.Resource, seal.Version, g.Version(layout.MaxNumber))
		}
		if h, ok, err := a.Holder(ctx, g.Resource); err != nil || ok {
			t.Errorf("%s still held after Session.Close: %+v, %v", g.Resource, h, err)
		}
	}
	if h, ok, err := a.Holder(ctx, "d"); err != nil || !ok || h.Generation != other.Generation {
		t.Fatalf("d, on another lease, after the group's release: %+v, %v, %v", h, ok, err)
	}
	if err := a.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
}

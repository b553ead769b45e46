//go:build !unit

package authority

import (
	"context"
	"errors"
	"github.com/fencepub/fencepub/internal/recovery"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/ownership"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestAcquireRenewRelease(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, 30*time.Second)
	own := owner("w")
	g := mustAcquire(t, a, AcquireRequest{Resource: "res", Owner: own, TTL: 5 * time.Second})
	if g.Epoch == 0 || g.Generation != 1 || g.LeaseID == 0 || g.HolderRevision == 0 || g.RequestID == "" {
		t.Fatalf("first grant = %+v", g)
	}
	if g.TTL != 5*time.Second || time.Until(g.expiresAt()) > 5*time.Second || time.Until(g.expiresAt()) < 3*time.Second {
		t.Fatalf("TTL %s, expires in %s", g.TTL, time.Until(g.expiresAt()))
	}
	if v := g.Version(3); v != (layout.Version{Epoch: g.Epoch, Fence: 1, Seq: 3}) {
		t.Fatalf("Version(3) = %v", v)
	}
	// The grant transaction wrote the durable grant record the publisher
	// compares, and the holder the strict mode compares.
	if !cmpHolds(t, a, g.grantCmp(a.ns), g.holderCmp(a.ns), g.epochCmp(a.ns)) {
		t.Fatal("grant, holder or epoch compare fails right after acquire")
	}
	h, ok, err := a.Holder(ctx, "res")
	if err != nil || !ok || h.Owner != own || h.Generation != 1 || h.HolderRevision != g.HolderRevision || h.Remaining <= 0 {
		t.Fatalf("Holder = %+v, %v, %v", h, ok, err)
	}
	if err := a.Renew(ctx, g); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, ok, _ := a.Holder(ctx, "res"); ok {
		t.Fatal("holder still present after release")
	}
	if err := a.Renew(ctx, g); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew after release: %v; want ErrLeaseLost", err)
	}
	if err := a.Release(ctx, g); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("second release: %v; want ErrLeaseLost", err)
	}
	// The grant record stays (durable); a new grant gets the next fence.
	if !cmpHolds(t, a, g.grantCmp(a.ns)) {
		t.Fatal("grant record deleted by release")
	}
	g2 := mustAcquire(t, a, AcquireRequest{Resource: "res", Owner: owner("w2")})
	if g2.Generation != 2 || g2.Epoch != g.Epoch {
		t.Fatalf("second grant = %+v", g2)
	}
	// A different owner's record does not satisfy g2's compare.
	forged := g2
	forged.Owner = own
	if cmpHolds(t, a, forged.grantCmp(a.ns)) {
		t.Fatal("grant record compare accepts another owner")
	}
	// The uncontended warm path: a fresh Authority and a warmed one agree.
	if err := a.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	g3 := mustAcquire(t, a, AcquireRequest{Resource: "res", Owner: owner("w3")})
	if g3.Generation != 3 {
		t.Fatalf("third grant generation %d", g3.Generation)
	}
}

// TestInitConcurrent: many processes of one etcd initialise a domain on an
// empty bucket at once; they all get the same domain, epoch 1, whose marker,
// etcd epoch record and ownership marker name its deployment.
func TestInitConcurrent(t *testing.T) {
	env := testenv.Get(t)
	ns := testenv.Namespace(t)
	st := env.Store(t)
	ctx := ctxT(t, time.Minute)
	a0 := newAuthority(t, env.EtcdClient(t), st, ns)
	var wg sync.WaitGroup
	doms := make([]domain, 8)
	errs := make([]error, 8)
	for i := range doms {
		wg.Go(func() {
			a := newAuthority(t, env.EtcdClient(t), st, ns)
			doms[i], errs[i] = a.initDomain(ctx)
		})
	}
	wg.Wait()
	for i := range doms {
		if errs[i] != nil || doms[i] != doms[0] {
			t.Fatalf("init %d = %+v, %v; init 0 = %+v", i, doms[i], errs[i], doms[0])
		}
	}
	if doms[0].Epoch != 1 || doms[0].DeploymentID == "" {
		t.Fatalf("domain = %+v; want epoch 1 of a fresh deployment", doms[0])
	}
	if m, err := a0.readEpochMarker(ctx, doms[0].Epoch); err != nil || m.Deployment != doms[0].DeploymentID || m.Reason != "init" {
		t.Fatalf("marker of epoch %d = %+v, %v; want the init marker of deployment %s", doms[0].Epoch, m, err, doms[0].DeploymentID)
	}
	if n := countKeys(t, a0.cli, ns.EpochRecord(doms[0].Epoch)); n != 1 {
		t.Fatalf("%d epoch records of epoch %d in etcd; want 1", n, doms[0].Epoch)
	}
	m, err := ownership.Read(ctx, st, ns)
	if err != nil || m.DeploymentID != doms[0].DeploymentID {
		t.Fatalf("ownership marker = %+v, %v", m, err)
	}
	mustAcquire(t, a0, AcquireRequest{Resource: "r", Owner: owner("o")})
	if e, err := a0.currentEpoch(ctx); err != nil || e != doms[0].Epoch {
		t.Fatalf("Epoch = %d, %v; want %d", e, err, doms[0].Epoch)
	}
}

func TestDuplicateRequestID(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, 30*time.Second)
	own := owner("w")
	req := AcquireRequest{Resource: "dup", Owner: own, RequestID: "job-42/attempt-1", TTL: 3 * time.Second}
	if _, err := a.Acquire(ctx, req); !errors.Is(err, layout.ErrInvalidName) {
		t.Fatalf("request id with '/': %v", err)
	}
	req.RequestID = "job-42.attempt-1"
	g := mustAcquire(t, a, req)
	// A retry (lost response) gets the same grant, from a cold Authority too.
	again := mustAcquire(t, a, req)
	cold := newAuthority(t, a.cli, a.st, a.ns)
	again2 := mustAcquire(t, cold, req)
	if !sameGrant(again, g) || !sameGrant(again2, g) {
		t.Fatalf("retry got %+v / %+v; want the original %+v", again, again2, g)
	}
	if gen := generation(t, a, "dup"); gen != 1 {
		t.Fatalf("generation after retries = %d; want 1", gen)
	}
	// Another owner with the same request id is refused.
	other := req
	other.Owner = owner("x")
	if _, err := a.Acquire(ctx, other); !errors.Is(err, ErrRequestConflict) {
		t.Fatalf("same request id, other owner: %v; want ErrRequestConflict", err)
	}
	// After the grant expired, the retry still gets the original grant,
	// and learns that it expired; nothing new is minted.
	awaitHolderGone(t, a, "dup", g.HolderRevision, 15*time.Second)
	late, err := a.Acquire(ctx, req)
	if !errors.Is(err, ErrExpired) || !sameGrant(late, g) {
		t.Fatalf("retry after expiry = %+v, %v; want the original grant and ErrExpired", late, err)
	}
	if gen := generation(t, a, "dup"); gen != 1 {
		t.Fatalf("generation after a late retry = %d; want 1", gen)
	}
	// A new request id mints the next generation.
	g2 := mustAcquire(t, a, AcquireRequest{Resource: "dup", Owner: own, TTL: 3 * time.Second})
	if g2.Generation != 2 {
		t.Fatalf("new request got generation %d", g2.Generation)
	}
}

func TestHeldAndWait(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, 60*time.Second)
	ga := mustAcquire(t, a, AcquireRequest{Resource: "held", Owner: owner("A"), TTL: 30 * time.Second})
	_, err := a.Acquire(ctx, AcquireRequest{Resource: "held", Owner: owner("B"), TTL: 5 * time.Second})
	var he *heldError
	if !errors.Is(err, ErrHeld) || !errors.As(err, &he) || he.Holder.Owner != ga.Owner || he.Holder.Generation != ga.Generation {
		t.Fatalf("contended acquire: %v; want *heldError naming A", err)
	}
	if until := time.Until(he.Until); until < 20*time.Second || until > 31*time.Second {
		t.Fatalf("held until %s from now; want about 30 s", until)
	}
	if !strings.Contains(err.Error(), ga.Owner) {
		t.Fatalf("message %q does not name the holder", err)
	}
	// The failed attempt left no lease behind.
	leases, err := a.cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases {
		if l.ID != ga.LeaseID {
			if ttl, err := a.cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys()); err == nil && ttl.TTL > 0 && len(ttl.Keys) == 0 && ttl.GrantedTTL == 5 {
				t.Fatalf("a 5 s lease without keys survived the refused acquire: %x", l.ID)
			}
		}
	}

	// A waiting acquirer blocks until A releases, then wins the next fence.
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = a.Acquire(wctx, AcquireRequest{Resource: "held", Owner: owner("C"), TTL: 5 * time.Second, Wait: true})
	cancel()
	var held *heldError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &held) || held.Holder.Owner != ga.Owner {
		t.Fatalf("wait with a short ctx: %v; want DeadlineExceeded and a heldError naming A", err)
	}
	// MaxWait ends the waiting alike, under a context that would wait on.
	start := time.Now()
	_, err = a.Acquire(ctx, AcquireRequest{Resource: "held", Owner: owner("C"), TTL: 5 * time.Second, Wait: true, MaxWait: 300 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &held) || held.Holder.Owner != ga.Owner || ctx.Err() != nil {
		t.Fatalf("wait with MaxWait: %v; want DeadlineExceeded and a heldError naming A", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("MaxWait 300ms waited %s", took)
	}
	got := make(chan Grant, 1)
	go func() {
		g, err := a.Acquire(ctx, AcquireRequest{Resource: "held", Owner: owner("B"), TTL: 5 * time.Second, Wait: true})
		if err != nil {
			t.Errorf("waiting acquire: %v", err)
		}
		got <- g
	}()
	select {
	case g := <-got:
		t.Fatalf("waiting acquire returned %+v while A holds", g)
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	gb := <-got
	if gb.Generation != ga.Generation+1 {
		t.Fatalf("waiter got generation %d; want %d", gb.Generation, ga.Generation+1)
	}
	t.Logf("waiter won %s after the release", time.Since(released).Round(time.Millisecond))
}

func TestBadInputWritesNothing(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, 30*time.Second)
	long := strings.Repeat("r", layout.MaxResourceLen+1)
	for _, c := range []struct {
		name string
		req  AcquireRequest
		want error
	}{
		{"empty resource", AcquireRequest{Owner: "o", TTL: 5 * time.Second}, layout.ErrInvalidName},
		{"oversized resource", AcquireRequest{Resource: long, Owner: "o", TTL: 5 * time.Second}, layout.ErrInvalidName},
		{"slash in resource", AcquireRequest{Resource: "a/b", Owner: "o", TTL: 5 * time.Second}, layout.ErrInvalidName},
		{"reserved resource", AcquireRequest{Resource: "_gc", Owner: "o", TTL: 5 * time.Second}, layout.ErrInvalidName},
		{"empty owner", AcquireRequest{Resource: "r", TTL: 5 * time.Second}, layout.ErrInvalidName},
		{"oversized owner", AcquireRequest{Resource: "r", Owner: strings.Repeat("o", layout.MaxOwnerLen+1), TTL: 5 * time.Second}, layout.ErrInvalidName},
		{"owner with space", AcquireRequest{Resource: "r", Owner: "a b", TTL: 5 * time.Second}, layout.ErrInvalidName},
		{"oversized request id", AcquireRequest{Resource: "r", Owner: "o", RequestID: strings.Repeat("q", layout.MaxKeyLen+1), TTL: 5 * time.Second}, layout.ErrInvalidName},
		{"zero TTL", AcquireRequest{Resource: "r", Owner: "o"}, ErrBadTTL},
		{"TTL below etcd's minimum", AcquireRequest{Resource: "r", Owner: "o", TTL: 1999 * time.Millisecond}, ErrBadTTL},
		{"fractional TTL", AcquireRequest{Resource: "r", Owner: "o", TTL: 2500 * time.Millisecond}, ErrBadTTL},
		{"TTL above etcd's maximum", AcquireRequest{Resource: "r", Owner: "o", TTL: maxTTL + time.Second}, ErrBadTTL},
	} {
		if _, err := a.Acquire(ctx, c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: %v; want %v", c.name, err, c.want)
		}
	}
	if _, err := a.Acquire(ctx, AcquireRequest{Resource: "r", Owner: "o", TTL: time.Second}); err == nil || !strings.Contains(err.Error(), "minimum lease TTL of 2s") {
		t.Errorf("TTL 1s message: %v", err)
	}
	if n := countKeys(t, a.cli, a.ns.Root()); n != 0 {
		t.Fatalf("bad input wrote %d etcd keys", n)
	}
	if keys := listObjects(t, a.st, a.ns.Root()); len(keys) != 0 {
		t.Fatalf("bad input wrote objects %v", keys)
	}
	for _, g := range []Grant{{}, {Resource: "r", Owner: "o"}, {Resource: "r", Owner: "o", LeaseID: 1, Epoch: 1, Generation: 1}} {
		if err := a.Renew(ctx, g); !errors.Is(err, ErrInvalidGrant) && !errors.Is(err, layout.ErrInvalidName) {
			t.Errorf("Renew(%+v): %v", g, err)
		}
	}
	// The GC's reserved lease works under layout.WithReservedNames.
	g, err := a.Acquire(layout.WithReservedNames(ctxT(t, 10*time.Second)), AcquireRequest{Resource: "_gc", Owner: "gc-1", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachableEtcd(t *testing.T) {
	env := testenv.Get(t)
	port, err := devstack.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	cli, err := devstack.NewEtcdClient([]string{"http://127.0.0.1:" + strconv.Itoa(port)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ns := testenv.Namespace(t)
	// Requests are retried until the caller's deadline, or RetryTimeout
	// when it has none (DESIGN.md invariant 12); then fencepub.ErrUnavailable.
	a := newAuthority(t, cli, env.Store(t), ns, func(c *Config) { c.RequestTimeout, c.RetryTimeout = 500*time.Millisecond, 2*time.Second })
	start := time.Now()
	_, err = a.Acquire(context.Background(), AcquireRequest{Resource: "r", Owner: "o", TTL: 5 * time.Second})
	if !errors.Is(err, fencepub.ErrUnavailable) {
		t.Fatalf("acquire against a dead etcd: %v; want fencepub.ErrUnavailable", err)
	}
	if d := time.Since(start); d < 2*time.Second || d > 5*time.Second {
		t.Fatalf("took %s; want about RetryTimeout (2 s)", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = a.Acquire(ctx, AcquireRequest{Resource: "r", Owner: "o", TTL: 5 * time.Second})
	if !errors.Is(err, fencepub.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire with a deadline against a dead etcd: %v; want fencepub.ErrUnavailable and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %s; want about the caller's 1.5 s deadline", d)
	}
	ctx = context.Background()
	for name, f := range map[string]func() error{
		"init":  func() error { _, err := a.initDomain(ctx); return err },
		"epoch": func() error { _, err := a.currentEpoch(ctx); return err },
		"renew": func() error {
			return a.Renew(ctx, Grant{Resource: "r", Owner: "o", LeaseID: 1, HolderRevision: 1, Epoch: 1, Generation: 1, TTL: 5 * time.Second})
		},
		"recover": func() error { _, err := a.recoverDomain(ctx, recovery.Options{}); return err },
	} {
		if err := f(); !errors.Is(err, fencepub.ErrUnavailable) {
			t.Errorf("%s against a dead etcd: %v; want fencepub.ErrUnavailable", name, err)
		}
	}
	if keys := listObjects(t, a.st, ns.Root()); len(keys) != 0 {
		t.Fatalf("objects written although etcd was unreachable: %v", keys)
	}
}

func TestConcurrentAcquirers(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, 3*time.Minute)
	const n = 50
	// The server's view: every change of the holder key, from the start.
	start, err := a.cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch := a.cli.Watch(wctx, a.ns.HolderKey("hot"), clientv3.WithRev(start.Header.Revision+1))
	var (
		mu      sync.Mutex
		holding *Grant
		gens    []uint64
		wg      sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			// Each acquirer has its own Authority (own cache), like 50
			// separate processes sharing one etcd client.
			b := newAuthority(t, a.cli, a.st, a.ns)
			g, err := b.Acquire(ctx, AcquireRequest{Resource: "hot", Owner: owner("w" + strconv.Itoa(i)), TTL: 10 * time.Second, Wait: true})
			if err != nil {
				t.Errorf("acquirer %d: %v", i, err)
				return
			}
			mu.Lock()
			if holding != nil {
				t.Errorf("two live holders: generation %d and %d", holding.Generation, g.Generation)
			}
			holding = &g
			gens = append(gens, g.Generation)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			holding = nil
			mu.Unlock()
			if err := b.Release(ctx, g); err != nil {
				t.Errorf("release %d: %v", g.Generation, err)
			}
		})
	}
	wg.Wait()
	if len(gens) != n {
		t.Fatalf("%d grants; want %d", len(gens), n)
	}
	for i, g := range gens {
		if g != uint64(i+1) {
			t.Fatalf("grant order %v; want 1..%d, one winner per generation, contiguous", gens, n)
		}
	}
	// In etcd's history the holder key alternates: created by generation
	// k, deleted, created by generation k+1, ... — never two live holders.
	var want uint64 = 1
	present := false
	for want <= n || present {
		wr := <-watch
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			switch {
			case ev.Type == clientv3.EventTypePut && !present && ev.IsCreate():
				g, err := decodeHolder(ev.Kv)
				if err != nil || g.Generation != want {
					t.Fatalf("holder created with %+v, %v; want generation %d", g, err, want)
				}
				present, want = true, want+1
			case ev.Type == clientv3.EventTypeDelete && present:
				present = false
			default:
				t.Fatalf("holder event %v (create %v) while present=%v: two live holders or an overwrite", ev.Type, ev.IsCreate(), present)
			}
		}
	}
}

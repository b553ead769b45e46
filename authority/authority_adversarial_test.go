package authority

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/harness/faultproxy"
	"github.com/fencepub/fencepub/internal/harness/localstack"
	"github.com/fencepub/fencepub/internal/harness/testenv"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Adversarial tests: lost answers, racing retries and corrupt values under
// every authority key (DESIGN.md invariants 2 and 3).

// isGrantTxn reports whether req is a grant transaction: its success branch
// puts a key attached to a lease (the holder).
func isGrantTxn(req any) bool {
	tr, ok := req.(*pb.TxnRequest)
	if !ok {
		return false
	}
	for _, op := range tr.Success {
		if put := op.GetRequestPut(); put != nil && put.Lease != 0 {
			return true
		}
	}
	return false
}

// TestAdversarialGrantResponseLost delivers the grant transaction to etcd
// and loses its response (faultproxy: forward the request, drop the answer,
// reset the connection). The grant was made; Acquire must learn that from
// the request record and return that very grant — one generation minted,
// one grant record, the holder on the returned lease — never mint again.
func TestAdversarialGrantResponseLost(t *testing.T) {
	target := strings.TrimPrefix(testenv.Get(t).Etcd.Members[0].ClientURL, "http://")
	px, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	var (
		armed atomic.Bool
		mu    sync.Mutex
		fired <-chan struct{}
	)
	armed.Store(true)
	// Arm the proxy right before the grant transaction leaves: the next
	// request bytes are that transaction's.
	arm := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if isGrantTxn(req) && armed.CompareAndSwap(true, false) {
			mu.Lock()
			fired = px.DropResponse(1, time.Second) // long enough for etcd to apply it under load
			mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{px.URL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(arm)}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	a := newAuthority(t, cli, testenv.Get(t).Store(t), testenv.Namespace(t), func(c *Config) { c.RequestTimeout = 2 * time.Second })
	ctx := ctxT(t, time.Minute)
	if _, err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}

	g, err := a.Acquire(ctx, AcquireRequest{Resource: "r", Owner: "w", RequestID: "req-1", TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire with a lost grant response: %v", err)
	}
	mu.Lock()
	f := fired
	mu.Unlock()
	if f == nil {
		t.Fatal("the grant transaction was never sent through the armed proxy")
	}
	<-f
	if st := px.Stats(); st.DroppedDown == 0 || st.Resets == 0 {
		t.Fatalf("proxy %+v: the grant's response was not lost", st)
	}
	if g.Generation != 1 || generation(t, a, "r") != 1 {
		t.Fatalf("grant generation %d, counter %d; want exactly one mint", g.Generation, generation(t, a, "r"))
	}
	if n := countKeys(t, cli, a.ns.GrantsPrefix("r")); n != 1 {
		t.Fatalf("%d grant records; want 1", n)
	}
	h, ok, err := a.Holder(ctx, "r")
	if err != nil || !ok || !sameGrant(h.Grant, g) {
		t.Fatalf("holder %+v, %v, %v; want the returned grant %+v", h.Grant, ok, err, g)
	}
	if err := a.Renew(ctx, g); err != nil {
		t.Fatalf("renew of the recovered grant: %v", err)
	}
}

// TestAdversarialRetriedAcquireRacesOriginal runs an acquire and its retries
// (same request id, separate Authority instances: separate processes)
// concurrently, round after round. Each round mints exactly one generation;
// every caller that succeeds gets that one grant; the losing attempts'
// leases are revoked, so one lease per grant is left. A caller with another
// owner and the same request id never gets a second grant.
func TestAdversarialRetriedAcquireRacesOriginal(t *testing.T) {
	e := testenv.StartEtcd(t, localstack.EtcdOptions{})
	cli := testenv.EtcdClient(t, e)
	st := testenv.Get(t).Store(t)
	ns := testenv.Namespace(t)
	ctx := ctxT(t, 2*time.Minute)
	const racers = 4
	as := make([]*Authority, racers)
	for i := range as {
		as[i] = newAuthority(t, cli, st, ns)
	}
	if _, err := as[0].Init(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 8 {
		reqID := "req-" + NewID()[:8]
		grants := make([]Grant, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i := range racers {
			who := "w"
			if round%2 == 1 && i == racers-1 {
				who = "intruder" // same request id, another owner
			}
			wg.Go(func() {
				grants[i], errs[i] = as[i].Acquire(ctx, AcquireRequest{Resource: "race", Owner: who, RequestID: reqID, TTL: 30 * time.Second})
			})
		}
		wg.Wait()
		var won *Grant
		for i := range racers {
			switch {
			case errs[i] == nil:
				if won != nil && !sameGrant(*won, grants[i]) {
					t.Fatalf("round %d: two grants for one request id: %+v and %+v", round, *won, grants[i])
				}
				won = &grants[i]
			case errors.Is(errs[i], ErrRequestConflict), errors.Is(errs[i], ErrHeld):
			default:
				t.Fatalf("round %d: racer %d: %v", round, i, errs[i])
			}
		}
		if won == nil {
			t.Fatalf("round %d: nobody got the grant: %v", round, errs)
		}
		if won.Generation != uint64(round+1) || generation(t, as[0], "race") != uint64(round+1) {
			t.Fatalf("round %d: generation %d, counter %d; want %d", round, won.Generation, generation(t, as[0], "race"), round+1)
		}
		leases, err := cli.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(leases.Leases) != 1 || leases.Leases[0].ID != won.LeaseID {
			t.Fatalf("round %d: leases %v; want only the grant's %x", round, leases.Leases, int64(won.LeaseID))
		}
		if err := as[0].Release(ctx, *won); err != nil {
			t.Fatal(err)
		}
	}
}

// putRaw writes value under key straight to etcd (a corruption, or a bug
// elsewhere), attached to lease when it is not 0.
func putRaw(t *testing.T, cli *clientv3.Client, key, value string, lease clientv3.LeaseID) {
	t.Helper()
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	if _, err := cli.Put(ctxT(t, 10*time.Second), key, value, opts...); err != nil {
		t.Fatal(err)
	}
}

// keyRevisions returns every key under prefix with its mod revision.
func keyRevisions(t *testing.T, cli *clientv3.Client, prefix string) map[string]int64 {
	t.Helper()
	resp, err := cli.Get(ctxT(t, 10*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

// TestAdversarialCorruptAuthorityState writes corrupt values under every key
// a grant reads. Each refusal is typed (ErrCorruptState, ErrRequestConflict,
// ErrRolledBack, ErrLeaseLost), never a panic, and mints nothing: the keys
// of the domain are unchanged afterwards.
func TestAdversarialCorruptAuthorityState(t *testing.T) {
	env := testenv.Get(t)
	cli := env.EtcdClient(t)
	ctx := ctxT(t, time.Minute)
	unchanged := func(a *Authority, what string, f func() error, want error) {
		t.Helper()
		before := keyRevisions(t, cli, a.ns.Root())
		if err := f(); !errors.Is(err, want) {
			t.Errorf("%s: %v; want %v", what, err, want)
		}
		after := keyRevisions(t, cli, a.ns.Root())
		for k, rev := range after {
			if before[k] != rev {
				t.Errorf("%s wrote %s", what, k)
			}
		}
	}
	acquire := func(a *Authority, res, reqID string) func() error {
		return func() error {
			_, err := a.Acquire(ctx, AcquireRequest{Resource: res, Owner: "w", RequestID: reqID, TTL: 10 * time.Second})
			return err
		}
	}

	a := shared(t)
	base := mustAcquire(t, a, AcquireRequest{Resource: "base", Owner: "w"})

	putRaw(t, cli, a.ns.GenerationKey("gen"), "garbage", 0)
	unchanged(a, "acquire over a corrupt generation", acquire(a, "gen", ""), ErrCorruptState)
	putRaw(t, cli, a.ns.GenerationKey("gen2"), layout.EncodeNumber(7)+" ", 0)
	unchanged(a, "acquire over a padded generation", acquire(a, "gen2", ""), ErrCorruptState)

	// The counter pushed back below a grant record: refused, not re-minted.
	g1 := mustAcquire(t, a, AcquireRequest{Resource: "back", Owner: "w"})
	if err := a.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	g2 := mustAcquire(t, a, AcquireRequest{Resource: "back", Owner: "w"})
	if err := a.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	putRaw(t, cli, a.ns.GenerationKey("back"), layout.EncodeNumber(g1.Generation), 0)
	unchanged(a, "acquire over a counter pushed back", acquire(a, "back", ""), ErrCorruptState)

	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, cli, a.ns.HolderKey("held"), "{not json", lease.ID)
	unchanged(a, "acquire under a corrupt holder", acquire(a, "held", ""), ErrCorruptState)
	unchanged(a, "inspect of a corrupt holder", func() error { _, err := a.Inspect(ctx, "held"); return err }, ErrCorruptState)
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if g := mustAcquire(t, a, AcquireRequest{Resource: "held", Owner: "w"}); g.Generation != 1 {
		t.Fatalf("after the corrupt holder's lease ended: %+v", g)
	}

	putRaw(t, cli, a.ns.RequestKey("req", "r1"), "{", 0)
	unchanged(a, "acquire with a corrupt request record", acquire(a, "req", "r1"), ErrCorruptState)
	putRaw(t, cli, a.ns.RequestKey("req", "r2"), `{"grant":{"resource":"other","owner":"w","generation":3}}`, 0)
	unchanged(a, "acquire with another resource's request record", acquire(a, "req", "r2"), ErrCorruptState)
	putRaw(t, cli, a.ns.RequestKey("req", "r3"), `{"grant":{"resource":"req","owner":"someone","generation":3}}`, 0)
	unchanged(a, "acquire with another owner's request record", acquire(a, "req", "r3"), ErrRequestConflict)

	// A corrupt grant record: the grant can no longer be released by it
	// (the release compares it), nor publish; it is not renewed into more.
	putRaw(t, cli, a.ns.GrantKey("base", base.Generation), "garbage", 0)
	unchanged(a, "release with a corrupt grant record", func() error { return a.Release(ctx, base) }, ErrLeaseLost)
	if st, err := a.Inspect(ctx, "base"); err != nil || st.Generation != base.Generation {
		t.Fatalf("inspect %+v, %v", st, err)
	}

	// Domain-wide corruption: a fresh namespace each.
	ae := shared(t)
	ge := mustAcquire(t, ae, AcquireRequest{Resource: "r", Owner: "w"})
	putRaw(t, cli, ae.ns.EpochKey(), "x", 0)
	unchanged(ae, "acquire under a corrupt epoch", acquire(ae, "r2", ""), ErrCorruptState)
	unchanged(ae, "epoch", func() error { _, err := ae.Epoch(ctx); return err }, ErrCorruptState)
	// Renew is lease liveness only (the holder lives exactly as long as its
	// lease): it still succeeds and writes nothing; the corrupt epoch stops
	// the grant's publishes instead (their epoch compare fails).
	unchanged(ae, "renew under a corrupt epoch", func() error { return ae.Renew(ctx, ge) }, nil)

	af := shared(t)
	mustAcquire(t, af, AcquireRequest{Resource: "r", Owner: "w", TTL: 2 * time.Second})
	putRaw(t, cli, af.ns.RollbackKey(), "", 0)
	unchanged(af, "acquire with an empty rollback flag", acquire(af, "r2", ""), ErrRolledBack)
}

// TestAdversarialCounterBackWithoutGrantRecord pushes a resource's counter
// back AND removes the grant record above it (GC prunes grant records below
// the pointer's fence), so etcd alone cannot see the reuse. The bucket's
// grant marker must: the re-minted token is refused (ErrRolledBack), its
// lease revoked, and the domain refuses grants until recover.
func TestAdversarialCounterBackWithoutGrantRecord(t *testing.T) {
	a := shared(t)
	cli := a.cli
	ctx := ctxT(t, time.Minute)
	var last Grant
	for range 3 {
		last = mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "w"})
		if err := a.Release(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	putRaw(t, cli, a.ns.GenerationKey("r"), layout.EncodeNumber(last.Generation-1), 0)
	if _, err := cli.Delete(ctx, a.ns.GrantKey("r", last.Generation)); err != nil {
		t.Fatal(err)
	}
	b := newAuthority(t, cli, a.st, a.ns) // another process: no cached counter
	g, err := b.Acquire(ctx, AcquireRequest{Resource: "r", Owner: "intruder", TTL: 10 * time.Second})
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("re-minting generation %d: %+v, %v; want ErrRolledBack", last.Generation, g, err)
	}
	if _, ok, err := b.Holder(ctx, "r"); err != nil || ok {
		t.Fatalf("the re-minted grant still holds the resource (%v, %v)", ok, err)
	}
	if _, err := b.Acquire(ctx, AcquireRequest{Resource: "other", Owner: "w", TTL: 10 * time.Second}); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("another resource before recover: %v; want ErrRolledBack", err)
	}
}

// TestAdversarialRecoverCorruptHolder: a holder record that does not decode,
// and one attached to no lease (written out of band: it would never
// expire). Recover switches the epoch first and then ends the restored
// holders; before the fix a corrupt holder made it fail after the switch —
// the lease kept blocking its resource and every re-run burnt another
// epoch. Both holders are now ended and reported.
func TestAdversarialRecoverCorruptHolder(t *testing.T) {
	a := shared(t)
	cli := a.cli
	ctx := ctxT(t, time.Minute)
	mustAcquire(t, a, AcquireRequest{Resource: "good", Owner: "w", TTL: 60 * time.Second})
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, cli, a.ns.HolderKey("corrupt"), "{not json", lease.ID)
	putRaw(t, cli, a.ns.HolderKey("leaseless"), `{"resource":"leaseless","owner":"ghost","epoch":1,"generation":1}`, 0)

	rep, err := a.Recover(ctx, RecoverOptions{})
	if err != nil {
		t.Fatalf("recover with corrupt holders: %v", err)
	}
	got := map[string]bool{}
	for _, h := range rep.Revoked {
		got[h.Resource] = true
	}
	for _, res := range []string{"good", "corrupt", "leaseless"} {
		if !got[res] {
			t.Errorf("recover did not report the holder of %q: %+v", res, rep.Revoked)
		}
		if n := countKeys(t, cli, a.ns.HolderKey(res)); n != 0 {
			t.Errorf("the holder of %q survived recover", res)
		}
	}
	// Every resource is free in the new epoch.
	for _, res := range []string{"good", "corrupt", "leaseless"} {
		if g := mustAcquire(t, a, AcquireRequest{Resource: res, Owner: "w2"}); g.Epoch != rep.NewEpoch {
			t.Errorf("%s: grant in epoch %d; want %d", res, g.Epoch, rep.NewEpoch)
		}
	}
}

// TestAdversarialRecoverCorruptEpoch: an epoch key that does not decode
// stops every grant (ErrCorruptState) and every publish (stale, epoch) of
// the domain. Recover is its repair: before the fix it refused with
// ErrCorruptState and the operator had to pick an epoch by hand. It now
// moves the domain to an epoch above every marker, and grants resume above
// every earlier grant.
func TestAdversarialRecoverCorruptEpoch(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, time.Minute)
	before := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "w", TTL: 2 * time.Second})
	putRaw(t, a.cli, a.ns.EpochKey(), "garbage", 0)
	if _, err := a.Acquire(ctx, AcquireRequest{Resource: "r2", Owner: "w", TTL: 2 * time.Second}); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("acquire under a corrupt epoch: %v", err)
	}
	rep, err := a.Recover(ctx, RecoverOptions{})
	if err != nil {
		t.Fatalf("recover of a corrupt epoch: %v", err)
	}
	if rep.CorruptEpoch != "garbage" || rep.NewEpoch <= before.Epoch || rep.NewEpoch <= rep.Highest.EpochMarker {
		t.Fatalf("report %+v", rep)
	}
	if e, err := a.Epoch(ctx); err != nil || e != rep.NewEpoch {
		t.Fatalf("epoch %d, %v; want %d", e, err, rep.NewEpoch)
	}
	after := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "w2"})
	if after.Epoch != rep.NewEpoch || after.Generation <= before.Generation {
		t.Fatalf("grant after recover %+v; want above %+v", after, before)
	}
	if cmpHolds(t, a, before.EpochCmp(a.ns)) {
		t.Fatal("the old grant's epoch still compares equal")
	}
}

// TestAdversarialAcquireMissingBucket: a domain initialised against one
// bucket, then an Authority configured with a bucket that does not exist.
// The grant transaction succeeds in etcd but its marker cannot be written,
// so nobody can ever be handed the grant. Before the fix its holder kept
// the resource blocked for the whole TTL; now its lease is revoked at once
// and the next acquirer (with the right bucket) gets the resource.
func TestAdversarialAcquireMissingBucket(t *testing.T) {
	a := shared(t)
	ctx := ctxT(t, time.Minute)
	if _, err := a.Init(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := testenv.Get(t).MinIO.Config
	cfg.Bucket = "no-such-bucket"
	st, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wrong := newAuthority(t, a.cli, st, a.ns)
	_, err = wrong.Acquire(ctx, AcquireRequest{Resource: "r", Owner: "w", TTL: 60 * time.Second})
	if err == nil || !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("acquire against a missing bucket: %v; want objstore.ErrNotFound", err)
	}
	if _, ok, err := a.Holder(ctx, "r"); err != nil || ok {
		t.Fatalf("the unconfirmable grant still holds the resource (%v, %v)", ok, err)
	}
	if g := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "w2"}); g.Generation != 2 {
		t.Fatalf("next grant %+v; want generation 2", g)
	}
}

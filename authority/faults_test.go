//go:build !unit

package authority

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestGenerationSurvivesLeaseExpiry is the regression test for the protocol
// source's "generation stored with the lease resets to 0" bug: grants expire
// on the server (nobody releases them) and the next grant still continues the
// count.
func TestGenerationSurvivesLeaseExpiry(t *testing.T) {
	a := shared(t)
	var last uint64
	for i := range 3 {
		g := mustAcquire(t, a, AcquireRequest{Resource: "expiring", Owner: owner("w"), TTL: 2 * time.Second})
		if g.Generation != last+1 {
			t.Fatalf("grant %d after an expiry has generation %d; want %d", i, g.Generation, last+1)
		}
		last = g.Generation
		awaitHolderGone(t, a, "expiring", g.HolderRevision, 10*time.Second)
		if gen := generation(t, a, "expiring"); gen != last {
			t.Fatalf("generation after expiry = %d; want %d", gen, last)
		}
	}
}

// TestGenerationSurvivesEtcdRestart restarts a dedicated etcd, gracefully and
// with SIGKILL, between grants.
func TestGenerationSurvivesEtcdRestart(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{})
	cli := testenv.EtcdClient(t, e)
	a := newAuthority(t, cli, testenv.Get(t).Store(t), testenv.Namespace(t))
	ctx := ctxT(t, 2*time.Minute)
	var last uint64
	for round, stop := range []func(){e.Members[0].Stop, e.Members[0].Kill, nil} {
		for range 3 {
			g := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: owner("w")})
			if g.Generation != last+1 {
				t.Fatalf("round %d: generation %d; want %d", round, g.Generation, last+1)
			}
			last = g.Generation
			if err := a.Release(ctx, g); err != nil {
				t.Fatal(err)
			}
		}
		if stop != nil {
			stop()
			if err := e.Members[0].Restart(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestKillLeaderMidAcquireLoop kills the raft leader of a 3-member cluster
// while workers acquire and release in a loop. Every grant's generation is
// unique and they increase strictly in grant order; the loop continues on
// the two survivors. Unavailable answers are retried with the same request
// id, so a grant whose response was lost is returned, not minted again.
func TestKillLeaderMidAcquireLoop(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{Members: 3})
	cli := testenv.EtcdClient(t, e)
	st := testenv.Get(t).Store(t)
	ns := testenv.Namespace(t)
	ctx := ctxT(t, 3*time.Minute)

	var (
		mu                sync.Mutex
		seen              = map[uint64]string{} // generation -> request id
		order             []uint64              // generations in the order acquires returned them while holding
		killed            = make(chan struct{})
		wg                sync.WaitGroup
		retried, expiredN int // acquires retried after fencepub.ErrUnavailable; grants learned expired
	)
	const workers, perWorker = 3, 25
	for w := range workers {
		wg.Go(func() {
			a := newAuthority(t, cli, st, ns, func(c *Config) { c.RequestTimeout = 2 * time.Second })
			for i := range perWorker {
				if i == perWorker/3 && w == 0 {
					<-killed // make sure part of the loop runs after the kill
				}
				req := AcquireRequest{Resource: "r", Owner: fmt.Sprintf("w%d", w), RequestID: fmt.Sprintf("w%d-%d", w, i), TTL: 5 * time.Second, Wait: true}
				var g Grant
				expired := false
				for {
					var err error
					g, err = a.Acquire(ctx, req)
					if err == nil {
						break
					}
					if errors.Is(err, ErrExpired) {
						expired = true // granted, then lost while the cluster failed over
						mu.Lock()
						expiredN++
						mu.Unlock()
						break
					}
					if !errors.Is(err, fencepub.ErrUnavailable) {
						t.Errorf("worker %d acquire %d: %v", w, i, err)
						return
					}
					mu.Lock()
					retried++
					mu.Unlock()
				}
				mu.Lock()
				if rid, dup := seen[g.Generation]; dup && rid != req.RequestID {
					t.Errorf("generation %d granted twice: requests %s and %s", g.Generation, rid, req.RequestID)
				}
				seen[g.Generation] = req.RequestID
				if !expired {
					order = append(order, g.Generation)
				}
				mu.Unlock()
				if expired {
					continue
				}
				for {
					err := a.Release(ctx, g)
					if err == nil || errors.Is(err, ErrLeaseLost) {
						break
					}
					if !errors.Is(err, fencepub.ErrUnavailable) {
						t.Errorf("release: %v", err)
						return
					}
				}
			}
		})
	}
	// Kill the leader once some grants are done.
	done := 0
	testenv.Eventually(t, "10 grants before the kill", time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		done = len(order)
		return done >= 10
	})
	leader, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killing leader %s after %d grants", leader.Name, done)
	leader.Kill()
	close(killed)
	wg.Wait()
	t.Logf("%d grants, %d acquires retried after fencepub.ErrUnavailable, %d retried grants had expired", len(seen), retried, expiredN)
	if len(seen) != workers*perWorker {
		t.Fatalf("%d distinct generations for %d grants", len(seen), workers*perWorker)
	}
	// Generations returned by live grants increase strictly in the order
	// they were held (a grant is held until released, so order is total).
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("generation %d after %d (order %v)", order[i], order[i-1], order)
		}
	}
	a := newAuthority(t, cli, st, ns)
	if gen := generation(t, a, "r"); gen != uint64(len(seen)) {
		t.Fatalf("durable generation %d after %d grants", gen, len(seen))
	}
}

// TestSessionRenewsAndLoses: a Session keeps a 2 s lease alive for longer
// than its TTL; a revoke from outside closes Lost at its next renewal; a
// paused etcd closes Lost before the local deadline.
func TestSessionRenewsAndLoses(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{})
	cli := testenv.EtcdClient(t, e)
	a := newAuthority(t, cli, testenv.Get(t).Store(t), testenv.Namespace(t), func(c *Config) { c.RequestTimeout = time.Second })
	ctx := ctxT(t, time.Minute)

	g := mustAcquire(t, a, AcquireRequest{Resource: "s", Owner: owner("w"), TTL: 2 * time.Second})
	s, err := a.NewSession(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	select {
	case <-s.Lost():
		t.Fatalf("session lost while renewing: %v", s.Err())
	default:
	}
	if !cmpHolds(t, a, g.holderCmp(a.ns)) {
		t.Fatal("holder gone although the session renews")
	}
	if until := time.Until(s.Deadline()); until <= 0 || until > 2*time.Second {
		t.Fatalf("deadline in %s; want within the 2 s TTL", until)
	}
	if _, err := cli.Revoke(ctx, g.LeaseID); err != nil {
		t.Fatal(err)
	}
	// The next renewal (every TTL/3) notices within its RequestTimeout.
	select {
	case <-s.Lost():
	case <-time.After(g.TTL/3 + time.Second + testenv.Slack):
		t.Fatal("Lost did not close after the lease was revoked")
	}
	if !errors.Is(s.Err(), ErrLeaseLost) {
		t.Fatalf("session error %v; want ErrLeaseLost", s.Err())
	}
	<-s.Done()
	if err := s.Close(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Close of a lost session: %v; want ErrLeaseLost from its release", err)
	}

	// etcd stops answering: the session cannot confirm a renewal and
	// declares the loss before its local deadline, which is no later than
	// the earliest server-side expiry.
	g2 := mustAcquire(t, a, AcquireRequest{Resource: "s", Owner: owner("w"), TTL: 2 * time.Second})
	s2, err := a.NewSession(ctx, g2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	first := s2.Deadline()
	testenv.Eventually(t, "a renewal of the second session", g2.TTL+testenv.Slack, func() bool { return s2.Deadline().After(first) })
	if err := e.Members[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Members[0].Resume() }()
	paused := time.Now()
	select {
	case <-s2.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost did not close while etcd was paused")
	}
	lostAt := time.Now()
	if !errors.Is(s2.Err(), ErrLeaseLost) {
		t.Fatalf("session error %v; want ErrLeaseLost", s2.Err())
	}
	if !lostAt.Before(s2.Deadline()) {
		t.Fatalf("Lost closed %s after the local deadline", lostAt.Sub(s2.Deadline()))
	}
	if lostAt.Sub(paused) > 2*time.Second {
		t.Fatalf("Lost closed %s after etcd paused; the TTL is 2 s", lostAt.Sub(paused))
	}
	t.Logf("etcd paused; Lost closed after %s, %s before the local deadline",
		lostAt.Sub(paused).Round(time.Millisecond), s2.Deadline().Sub(lostAt).Round(time.Millisecond))

	// Close of a live session releases it.
	if err := e.Members[0].Resume(); err != nil {
		t.Fatal(err)
	}
	g3 := mustAcquire(t, a, AcquireRequest{Resource: "s3", Owner: owner("w"), TTL: 2 * time.Second})
	s3, err := a.NewSession(context.Background(), g3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !errors.Is(s3.Err(), ErrSessionClosed) {
		t.Fatalf("Err after Close = %v", s3.Err())
	}
	if cmpHolds(t, a, g3.holderCmp(a.ns)) {
		t.Fatal("Close did not release the grant")
	}
	resp, err := cli.Get(ctx, a.ns.GenerationKey("s3"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != int64(clientv3.NoLease) {
		t.Fatalf("generation key %+v, %v: want it present and not leased", resp, err)
	}
}

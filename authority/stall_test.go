//go:build !unit

package authority

import (
	"context"
	"errors"
	"github.com/fencepub/fencepub/internal/recovery"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/internal/wait"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// keepaliveClient is a client of every member of e with the CLI's default
// keepalive (etcd.dial_keepalive_time 10 s, etcd.dial_keepalive_timeout
// 3 s), closed when t ends.
func keepaliveClient(t *testing.T, e *devstack.Etcd) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// follower returns a member of e that is not the leader.
func follower(t *testing.T, e *devstack.Etcd) *devstack.EtcdMember {
	t.Helper()
	m, err := e.Follower(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRecoverThroughStalledFollower runs Recover three times with a
// follower stopped (SIGSTOP): every etcd request of a recovery has its
// round-robin turn on the stalled member, and each is retried on another
// one, so every Recover succeeds and moves the epoch (DESIGN.md invariant
// 12).
func TestRecoverThroughStalledFollower(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{Members: 3})
	cli := testenv.EtcdClient(t, e)
	a := newAuthority(t, cli, testenv.Get(t).Store(t), testenv.Namespace(t), func(c *Config) { c.RequestTimeout = 500 * time.Millisecond })
	ctx := ctxT(t, 2*time.Minute)
	if _, err := a.initDomain(ctx); err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"r1", "r2"} {
		mustAcquire(t, a, AcquireRequest{Resource: res, Owner: "o", TTL: time.Minute})
	}
	m := testenv.PauseFollower(t, e)
	var epoch uint64
	for i := range 3 {
		start := time.Now()
		rep, err := a.recoverDomain(ctx, recovery.Options{})
		if err != nil {
			t.Fatalf("recover %d with follower %s stalled: %v", i, m.Name, err)
		}
		if rep.NewEpoch <= epoch || rep.NewEpoch <= rep.OldEpoch {
			t.Fatalf("recover %d: epoch %d -> %d after %d", i, rep.OldEpoch, rep.NewEpoch, epoch)
		}
		epoch = rep.NewEpoch
		t.Logf("recover %d with follower %s stalled: epoch %d -> %d, %d holders revoked, in %s",
			i, m.Name, rep.OldEpoch, rep.NewEpoch, len(rep.Revoked), time.Since(start).Round(time.Millisecond))
	}
}

// TestRetryLeavesStalledMember measures what a stalled (SIGSTOP) follower
// costs: single reads without retry through the round-robin balancer fail
// whenever they are sent to it, each authority read (inspect, retried with
// a short RequestTimeout) succeeds, and once keepalive closed the stalled
// member's connection the balancer stops sending it anything.
func TestRetryLeavesStalledMember(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{Members: 3})
	cli := keepaliveClient(t, e)
	a := newAuthority(t, cli, testenv.Get(t).Store(t), testenv.Namespace(t), func(c *Config) { c.RequestTimeout = 500 * time.Millisecond })
	ctx := ctxT(t, 2*time.Minute)
	mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "o", TTL: 10 * time.Second})
	m := follower(t, e)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	defer func() { _ = m.Resume() }()

	bare := func() bool {
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := cli.Get(rctx, "x")
		return err == nil
	}
	failed := 0
	for range 12 {
		if !bare() {
			failed++
		}
	}
	if failed == 0 {
		t.Fatalf("no bare read failed with member %s stalled: the balancer did not send it any", m.Name)
	}
	worst := time.Duration(0)
	for range 12 {
		start := time.Now()
		if _, err := a.inspect(ctx, "r"); err != nil {
			t.Fatalf("Inspect with member %s stalled: %v", m.Name, err)
		}
		worst = max(worst, time.Since(start))
	}
	// Keepalive closes the stalled member's connection after at most
	// DialKeepAliveTime + DialKeepAliveTimeout of silence; from then on
	// the balancer skips it and every bare read succeeds.
	var left time.Duration
	for {
		ok := true
		for range 6 {
			ok = ok && bare()
		}
		if ok {
			left = time.Since(paused)
			break
		}
		if time.Since(paused) > 40*time.Second {
			t.Fatalf("bare reads still reach stalled member %s after %s", m.Name, time.Since(paused))
		}
	}
	t.Logf("member %s stalled: %d of 12 bare reads failed; 12 retried reads all succeeded, the slowest in %s; the balancer left the member %s after the stall began",
		m.Name, failed, worst.Round(time.Millisecond), left.Round(100*time.Millisecond))
}

// TestSessionKeepsLeaseThroughLeaderStall stalls the raft leader for
// 3.8 s, less than a 6 s TTL minus one 2 s renew interval, four times: etcd
// keeps the lease (the new leader extends every lease), and so must the
// Session. A keepalive sent to the stalled leader, or to a follower that
// forwards it there, gets no answer until the stall ends — too late for a
// renewal that waits for it; the Session's give way to ones that reach
// the new leader.
func TestSessionKeepsLeaseThroughLeaderStall(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{Members: 3})
	cli := keepaliveClient(t, e)
	a := newAuthority(t, cli, testenv.Get(t).Store(t), testenv.Namespace(t))
	ctx := ctxT(t, 2*time.Minute)
	g := mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "o", TTL: 6 * time.Second})
	s, err := a.NewSession(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	expired := 0
	for i := range 4 {
		leader, err := e.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.Pause(); err != nil {
			t.Fatal(err)
		}
		wait.Sleep(ctx, 3800*time.Millisecond)
		if err := leader.Resume(); err != nil {
			t.Fatal(err)
		}
		if err := leader.WaitReady(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.Lost():
			// Lost is right if etcd itself let the lease expire. Lost while
			// etcd kept it is safe (the Session gave up early, never late)
			// but unavailable: a starved machine can delay the renewals
			// past the local deadline, so one such stall of four is
			// tolerated along with etcd's own expiries.
			if ttl, err := cli.TimeToLive(ctx, g.LeaseID); err != nil || ttl.TTL > 0 {
				t.Logf("stall %d of leader %s: session lost (%v) although etcd kept the lease (%v, %v)", i, leader.Name, s.Err(), ttl, err)
			} else {
				t.Logf("stall %d of leader %s: etcd expired the lease, and the session lost it: %v", i, leader.Name, s.Err())
			}
			expired++
			g = mustAcquire(t, a, AcquireRequest{Resource: "r", Owner: "o", TTL: 6 * time.Second})
			if s, err = a.NewSession(ctx, g); err != nil {
				t.Fatal(err)
			}
		default:
		}
	}
	if expired > 1 {
		t.Fatalf("the session lost the lease in %d of 4 stalls of 3.8 s under a 6 s TTL (at most 1 allowed)", expired)
	}
	if err := a.Renew(ctx, g); err != nil {
		t.Fatalf("renew after the stalls: %v", err)
	}
	if err := s.Close(); err != nil && !errors.Is(err, ErrLeaseLost) {
		t.Fatal(err)
	}
}

//go:build !unit

package publisher

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestPublishThroughStalledFollower stops (SIGSTOP) an etcd follower of the
// multi-node topology. The clients keep every member in their round-robin
// balancer, so every third etcd request is sent to the stalled one; each
// acquire, bind, publish and release must still succeed within its
// deadline, retrying on another member (DESIGN.md invariant 12).
func TestPublishThroughStalledFollower(t *testing.T) {
	cl := testenv.StartCluster(t, devstack.MultiNode())
	const attempt = time.Second
	e := newDomainEnv(t, testenv.ClusterDomain(t, cl),
		func(c *authority.Config) { c.RequestTimeout = attempt },
		func(c *Config) { c.RequestTimeout = attempt })
	m := testenv.PauseFollower(t, cl.Etcd)
	var worst time.Duration
	for i := range 6 {
		start := time.Now()
		ctx := ctxT(t, 30*time.Second)
		g, err := e.auth.Acquire(ctx, authority.AcquireRequest{Resource: "r", Owner: "w", TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("acquire %d with follower %s stalled: %v", i, m.Name, err)
		}
		p, err := e.pub.Bind(ctx, GrantTerm(g, false))
		if err != nil {
			t.Fatalf("bind %d with follower %s stalled: %v", i, m.Name, err)
		}
		r, err := p.Publish(ctx, op(fmt.Sprintf("k%d", i), "through a stalled follower"))
		mustOutcome(t, fmt.Sprintf("publish %d with follower %s stalled", i, m.Name), r, err, Applied, reasonNone)
		if err := e.auth.Release(ctx, g); err != nil {
			t.Fatalf("release %d with follower %s stalled: %v", i, m.Name, err)
		}
		worst = max(worst, time.Since(start))
	}
	t.Logf("follower %s stalled: 6 acquire-bind-publish-release rounds succeeded, the slowest in %s", m.Name, worst.Round(time.Millisecond))
}

// TestDatasetPublishThroughPausedLeader stops (SIGSTOP) the etcd leader of
// the multi-node topology right before a dataset publish, whose first step
// reads the base pointer: every linearizable read waits until the other
// members elect a leader (an election timeout, 1 to 2 s), longer than
// three attempts of RequestTimeout. The publish must wait the election out
// and apply (DESIGN.md invariant 12).
func TestDatasetPublishThroughPausedLeader(t *testing.T) {
	cl := testenv.StartCluster(t, devstack.MultiNode())
	e := newDomainEnv(t, testenv.ClusterDomain(t, cl), nil, func(c *Config) { c.RequestTimeout = 300 * time.Millisecond })
	ctx := ctxT(t, time.Minute)
	g, err := e.auth.Acquire(ctx, authority.AcquireRequest{Resource: "r", Owner: "w", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.pub.Bind(ctx, GrantTerm(g, false))
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := cl.Etcd.Leader(lctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Resume() })
	start := time.Now()
	r, err := p.PublishDataset(ctx, Dataset{IdempotencyKey: "k", Base: BaseCurrent,
		Files: FileList([]File{BytesFile("a.txt", []byte("through a paused leader"), "text/plain")})})
	mustOutcome(t, fmt.Sprintf("dataset publish with leader %s paused", m.Name), r.Result, err, Applied, reasonNone)
	t.Logf("leader %s paused: the dataset publish applied in %s", m.Name, time.Since(start).Round(time.Millisecond))
}

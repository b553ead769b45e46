//go:build !unit

package gc

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestDecommissionThroughStalledFollower stops (SIGSTOP) an etcd follower of
// the multi-node topology and retires six resources: each Decommission's
// read and seal transaction have their round-robin turn on the stalled
// member, and each is retried on another one, so every seal is raised
// (DESIGN.md invariant 12); a pass over the retired resources then
// succeeds too.
func TestDecommissionThroughStalledFollower(t *testing.T) {
	cl := testenv.StartCluster(t, devstack.MultiNode())
	e := newDomainEnv(t, testenv.ClusterDomain(t, cl))
	c := e.collector(func(c *Config) { c.RequestTimeout = 500 * time.Millisecond })
	const n = 6
	for i := range n {
		e.release(e.acquire(fmt.Sprintf("r%d", i), "w", 0))
	}
	m := testenv.PauseFollower(t, cl.Etcd)
	ctx := ctxT(t, time.Minute)
	for i := range n {
		res := fmt.Sprintf("r%d", i)
		d, err := c.decommission(ctx, res, false)
		// Already is legal: a seal transaction whose answer came too late
		// was re-sent, and the re-send found the seal raised.
		if err != nil || d.Seal.Seq != layout.MaxNumber {
			t.Fatalf("decommission %s with follower %s stalled: %+v, %v", res, m.Name, d, err)
		}
	}
	e.run(c)
}

//go:build !unit

package gc

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
)

// Publishers in child processes whose clocks are 10 days behind and 10 days
// ahead publish with idempotency keys; GC passes with a correct clock run
// while the last publish's first send has applied and its responses are
// lost. Nothing they wrote ages by their clock (DESIGN.md invariant 10):
// the op records survive, the re-sent transaction is applied (not stale),
// Resolve says applied, a retry of a key in a new term is a duplicate, and
// retention keeps the superseded versions inside the reader grace.
func TestSkewedPublishers(t *testing.T) {
	e := newEnv(t)
	type skewed struct {
		res     string
		skew    time.Duration
		px      *faultproxy.Proxy
		child   *testenv.Child
		applied []publisher.Result
	}
	runs := []*skewed{{res: "behind", skew: -10 * 24 * time.Hour}, {res: "ahead", skew: 10 * 24 * time.Hour}}
	keys := []string{"s1", "s2", "s3"}
	for _, r := range runs {
		r.px, _ = testenv.Get(t).EtcdProxy(t)
		cfg := helperConfig{Resource: r.res, Owner: "skewed-" + r.res, TTL: time.Minute, Skew: r.skew, Keys: keys}
		cfg.Servers = testenv.Get(t).Servers(e.NS)
		cfg.Etcd = []string{r.px.URL()}
		r.child = testenv.StartChild(t, "skewed", cfg)
		for _, k := range keys[:len(keys)-1] {
			var res publisher.Result
			r.child.NextJSON(&res, time.Minute)
			if res.Outcome != publisher.Applied {
				t.Fatalf("%s: publish %s: %+v", r.res, k, res)
			}
			r.applied = append(r.applied, res)
		}
		// The last publish's transaction reaches etcd; its answers do not.
		r.px.Set(faultproxy.Faults{DropDownstream: true})
		fmt.Fprintln(r.child.Stdin(), "go")
	}
	last := keys[len(keys)-1]
	for _, r := range runs {
		waitFor(t, r.res+"'s last publish applied", time.Minute, func() bool { return e.get(e.NS.OpKey(r.res, last)) != nil })
	}
	// A pass starts the domain clock; the next is 5 minutes later on it,
	// inside the 10-minute reader grace. Retain 1 leaves the superseded
	// versions to the grace rule alone.
	policy := func(c *Config) { c.Policy = Policy{Retain: 1} }
	e.run(e.collector(policy))
	rep := e.run(e.collector(func(c *Config) { policy(c); later(5 * time.Minute)(c) }))
	ctx := ctxT(t, time.Minute)
	for _, r := range runs {
		if n := e.Count(e.NS.OpsPrefix(r.res)); n != int64(len(keys)) {
			t.Fatalf("%s: %d op records left; want %d", r.res, n, len(keys))
		}
		for _, a := range r.applied {
			mustDecide(t, rep, a.Object.Key, kindRetained, "kept", "within the reader grace")
		}
		r.px.Set(faultproxy.Faults{})
		var resent publisher.Result
		r.child.NextJSON(&resent, time.Minute)
		if resent.Outcome != publisher.Applied || resent.Attempts < 2 {
			t.Fatalf("%s: the re-sent publish of %s: %+v; want applied after re-sends", r.res, last, resent)
		}
		if err := r.child.Wait(); err != nil {
			t.Fatalf("%s: child: %v", r.res, err)
		}
		for _, a := range r.applied {
			res, err := e.pub.Resolve(ctx, r.res, a.IdempotencyKey, a.Version, a.AttemptID())
			if err != nil || res.Outcome != publisher.Applied {
				t.Fatalf("%s: resolve %s: %+v %v; want applied", r.res, a.IdempotencyKey, res, err)
			}
		}
		_, p := e.worker(r.res, "retry-"+r.res)
		dup := e.publish(p, keys[0], publisher.Duplicate)
		if dup.Version != r.applied[0].Version || e.Pointer(r.res).Version != resent.Version {
			t.Fatalf("%s: retry of %s in a new term: %+v; pointer %s", r.res, keys[0], dup, e.Pointer(r.res).Version)
		}
	}
}

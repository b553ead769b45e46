package authority

import (
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/harness/testenv"
	"github.com/fencepub/fencepub/internal/objstore/faultstore"
)

// TestAcquireRetriesStalledListing: the listing an acquire makes to confirm
// its grant (the first grant marker above its own) meets a store that does
// not answer, as a distributed MinIO does while one of its nodes is
// stopped, twice. Each attempt ends after RequestTimeout and the listing
// is sent again within the caller's deadline, so the acquire succeeds
// (DESIGN.md invariant 12); a listing sent once failed the acquire with
// ErrUnavailable after one RequestTimeout.
func TestAcquireRetriesStalledListing(t *testing.T) {
	env := testenv.Get(t)
	st := faultstore.New(env.Store(t))
	a := newAuthority(t, env.EtcdClient(t), st, testenv.Namespace(t), func(c *Config) { c.RequestTimeout = 500 * time.Millisecond })
	if _, err := a.Init(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	before := st.Calls(faultstore.List)
	st.Inject(faultstore.List, 2, faultstore.Fault{Delay: time.Minute})
	g, err := a.Acquire(ctxT(t, 30*time.Second), AcquireRequest{Resource: "r", Owner: owner("w"), TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire through two stalled listings: %v", err)
	}
	if g.Generation != 1 {
		t.Errorf("generation %d, want 1", g.Generation)
	}
	if n := st.Calls(faultstore.List) - before; n < 3 {
		t.Errorf("%d listings, want at least 3 (two stalled, then one answered)", n)
	}
}

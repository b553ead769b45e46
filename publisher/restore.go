package publisher

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/recovery"
	"github.com/fencepub/fencepub/internal/retry"
)

// Timeouts of RestoreLost: the wait for a resource's grant, and the
// release after it.
const (
	restoreAcquireTimeout = time.Minute
	restoreReleaseTimeout = 10 * time.Second
	restoreLeaseTTL       = 15 * time.Second
)

func init() {
	recovery.RestoreLost = func(ctx context.Context, c, a any, rep recovery.Report) []recovery.Restored {
		return c.(*Client).restoreLost(ctx, a.(*authority.Authority), rep)
	}
}

// restoreLost is recovery.RestoreLost: it runs the last step of the restore
// runbook (`fencepub authority recover --republish`, DESIGN.md invariant 3;
// the package doc, "Restoring lost publishes"): for every resource of rep
// (a report of recovery.Recover) with objects above its restored pointer,
// it publishes again the newest of them that could have been published
// under the new epoch, under a grant of its own. It returns one
// recovery.Restored per resource it tried, in rep's order, a failure in its
// Error and a Result of type Result; it blocks until every resource is
// done, and once ctx ends the rest fail with ctx's error.
func (c *Client) restoreLost(ctx context.Context, a *authority.Authority, rep recovery.Report) []recovery.Restored {
	var out []recovery.Restored
	for _, r := range rep.Resources {
		if len(r.Above) == 0 {
			continue
		}
		lost, ok, err := c.newestPublishable(ctx, r.Resource, r.Above)
		if err != nil {
			out = append(out, recovery.Restored{Resource: r.Resource, Result: Result{}, Error: err.Error()})
			continue
		}
		if !ok {
			continue
		}
		res, err := c.restoreOne(ctx, a, r.Resource, lost)
		rr := recovery.Restored{Resource: r.Resource, From: lost.Version, Key: lost.Key, Result: res}
		if err != nil {
			rr.Error = err.Error()
		}
		out = append(out, rr)
	}
	return out
}

// restoreOne republishes lost under a fresh grant of resource.
func (c *Client) restoreOne(ctx context.Context, a *authority.Authority, resource string, lost recovery.LostObject) (Result, error) {
	actx, cancel := context.WithTimeout(ctx, restoreAcquireTimeout)
	defer cancel()
	g, err := a.Acquire(actx, authority.AcquireRequest{Resource: resource, Owner: "recover-" + authority.NewID()[:12], TTL: restoreLeaseTTL, Wait: true})
	if err != nil {
		return Result{}, fmt.Errorf("acquire %s: %w", resource, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreReleaseTimeout)
		defer cancel()
		_ = a.Release(rctx, g)
	}()
	p, err := c.Bind(actx, GrantTerm(g, false))
	if err != nil {
		return Result{}, err
	}
	return p.republishKey(actx, lost.Key, "recover-"+layout.EncodeVersion(lost.Version))
}

// newestPublishable returns the newest of above (sorted by version, newest
// last) written before the next epoch's marker was reserved, at a version
// no Resolve settled as never applied (settledVersions). Errors: the
// store's, when the settled markers cannot be listed.
func (c *Client) newestPublishable(ctx context.Context, resource string, above []recovery.LostObject) (recovery.LostObject, bool, error) {
	settled, err := c.settledVersions(ctx, resource)
	if err != nil {
		return recovery.LostObject{}, false, err
	}
	st := c.cfg.Store
	cutoff := map[uint64]time.Time{}
	for i := len(above) - 1; i >= 0; i-- {
		o := above[i]
		if settled[o.Version] {
			continue
		}
		t, ok := cutoff[o.Version.Epoch]
		if !ok {
			info, err := st.Stat(ctx, c.ns.EpochMarker(o.Version.Epoch+1))
			if err == nil {
				t = info.LastModified
			}
			cutoff[o.Version.Epoch] = t
		}
		if t.IsZero() || !o.LastModified.After(t) {
			return o, true, nil
		}
	}
	return recovery.LostObject{}, false, nil
}

// settledVersions returns the versions of resource whose attempt a Resolve
// settled as never applied, from its settled markers in the bucket
// (layout.SettledMarker). The listing is sent again while the store does
// not answer, within ctx. Errors: the store's, wrapped with the resource's
// name.
func (c *Client) settledVersions(ctx context.Context, resource string) (map[layout.Version]bool, error) {
	prefix := c.ns.SettledMarkersPrefix(resource)
	var settled map[layout.Version]bool
	err := retry.Do(ctx, func(ctx context.Context) error {
		settled = map[layout.Version]bool{}
		for info, err := range c.cfg.Store.List(ctx, prefix, objstore.ListOptions{}) {
			if err != nil {
				return err
			}
			if v, err := layout.DecodeVersion(strings.TrimPrefix(info.Key, prefix)); err == nil {
				settled[v] = true
			}
		}
		return nil
	}, retry.StoreUnavailable)
	if err != nil {
		return nil, fmt.Errorf("list the settled markers of %q: %w", resource, err)
	}
	return settled, nil
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
)

// republished is one resource's `recover --republish` result.
type republished struct {
	Resource string           `json:"resource"`
	From     layout.Version   `json:"from"` // the lost object's old-epoch version
	Key      string           `json:"key"`  // the object republished
	Result   publisher.Result `json:"result"`
	Error    string           `json:"error,omitempty"`
}

// republishLost publishes, for every resource of rep with objects above its
// restored pointer, the newest of them that could have been published under
// the new epoch: it acquires a grant of the resource (waiting up to a
// minute), copies the object to a fresh key of the grant's next version and
// publishes it (publisher Republish), then releases. The idempotency key
// recover-<old version> makes a second run a duplicate.
//
// An object of epoch E written after the marker of epoch E+1 was reserved is
// an attempt rejected by the epoch check (a worker that reached the store
// after recover), never a lost publish, so it is skipped; both times are the
// object store's own clock. Run `recover --dry-run` first: the newest object
// above a restored pointer is normally a publish the restore lost, but it
// may also be an attempt that failed for another reason before the restore.
func republishLost(ctx context.Context, env *cli.Env, a *authority.Authority, rep authority.RecoverReport) ([]republished, error) {
	client, err := publisher.New(env.PublisherConfig())
	if err != nil {
		return nil, err
	}
	var out []republished
	for _, r := range rep.Resources {
		if len(r.Above) == 0 {
			continue
		}
		lost, ok := newestPublishable(ctx, env, r.Above)
		if !ok {
			continue
		}
		res := republished{Resource: r.Resource, From: lost.Version, Key: lost.Key}
		res.Result, err = republishOne(ctx, a, client, r.Resource, lost)
		if err != nil {
			res.Error = err.Error()
		}
		out = append(out, res)
	}
	return out, nil
}

func republishOne(ctx context.Context, a *authority.Authority, client *publisher.Client, resource string, lost authority.LostObject) (publisher.Result, error) {
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	g, err := a.Acquire(actx, authority.AcquireRequest{Resource: resource, Owner: "recover-" + authority.NewID()[:12], TTL: 15 * time.Second, Wait: true})
	if err != nil {
		return publisher.Result{}, fmt.Errorf("acquire %s: %w", resource, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = a.Release(rctx, g)
	}()
	p, err := client.BindGrant(actx, g, false)
	if err != nil {
		return publisher.Result{}, err
	}
	return p.Republish(actx, lost.Key, "recover-"+lost.Version.Encode())
}

// newestPublishable returns the newest of above (sorted by version, newest
// last) written before the next epoch's marker was reserved.
func newestPublishable(ctx context.Context, env *cli.Env, above []authority.LostObject) (authority.LostObject, bool) {
	cutoff := map[uint64]time.Time{}
	for i := len(above) - 1; i >= 0; i-- {
		o := above[i]
		t, ok := cutoff[o.Version.Epoch]
		if !ok {
			info, err := env.Store.Stat(ctx, env.NS.EpochMarker(o.Version.Epoch+1))
			if err == nil {
				t = info.LastModified
			}
			cutoff[o.Version.Epoch] = t
		}
		if t.IsZero() || !o.LastModified.After(t) {
			return o, true
		}
	}
	return authority.LostObject{}, false
}

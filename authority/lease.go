package authority

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// validateResourceName accepts ordinary and reserved ('_') resource names:
// reading, renewing and releasing work on both.
func validateResourceName(res string) error {
	return layout.ValidateResource(res, strings.HasPrefix(res, "_"))
}

// checkGrant reports whether g carries what identifies a grant.
func checkGrant(g Grant) error {
	if err := validateResourceName(g.Resource); err != nil {
		return err
	}
	if err := layout.ValidateOwner(g.Owner); err != nil {
		return err
	}
	if g.LeaseID == 0 || g.HolderRevision <= 0 || g.Epoch == 0 || g.Generation == 0 {
		return fmt.Errorf("%w: grant of %q needs a lease id, holder revision, epoch and generation (got %d, %d, %d, %d)",
			ErrInvalidGrant, g.Resource, g.LeaseID, g.HolderRevision, g.Epoch, g.Generation)
	}
	return nil
}

// Renew extends g's lease by its TTL, only while g is still the live holder
// of its resource. It never mints anything: a renew of an expired, revoked,
// released or superseded grant fails and the caller must acquire again,
// never getting a larger token to make up for it (DESIGN.md invariant 2;
// protocol source, §Mint).
//
// It is one lease keepalive, sent again while etcd cannot serve it
// (Config.RetryTimeout): g's lease is alive exactly while g holds the
// resource (the package doc, "Why a live lease is a live holder").
//
// Errors: ErrLeaseLost, ErrInvalidGrant, fencepub.ErrInvalidName,
// fencepub.ErrUnavailable, ctx's error.
func (a *Authority) Renew(ctx context.Context, g Grant) error {
	_, err := a.renew(ctx, g, 0)
	return err
}

// renew is Renew returning the TTL etcd set on the lease (whole seconds).
// Each keepalive attempt is bounded by attempt (RequestTimeout when 0), so
// an attempt stuck on a stalled member leaves time for another one.
func (a *Authority) renew(ctx context.Context, g Grant, attempt time.Duration) (time.Duration, error) {
	if err := checkGrant(g); err != nil {
		return 0, err
	}
	var ka *clientv3.LeaseKeepAliveResponse
	err := a.call(ctx, "lease keepalive", attempt, func(rctx context.Context) (err error) {
		ka, err = a.lease.KeepAliveOnce(rctx, g.LeaseID)
		return err
	})
	switch {
	case isLeaseNotFound(err):
		return 0, fmt.Errorf("%w: %q generation %d: lease %x expired or was revoked (released, or the domain moved to a new epoch)",
			ErrLeaseLost, g.Resource, g.Generation, int64(g.LeaseID))
	case err != nil:
		return 0, err
	}
	return time.Duration(ka.TTL) * time.Second, nil
}

// describeLoss explains a failed holder check from its Else reads (holder,
// epoch).
func describeLoss(g Grant, resp *clientv3.TxnResponse) string {
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 && string(kvs[0].Value) != layout.EncodeNumber(g.Epoch) {
		return fmt.Sprintf("the domain moved from epoch %d to %s", g.Epoch, strings.TrimLeft(string(kvs[0].Value), "0"))
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return "no holder: expired or released"
	}
	if h, err := decodeHolder(kvs[0]); err == nil {
		return fmt.Sprintf("now held by %q with generation %d", h.Owner, h.Generation)
	}
	return "held by another grant"
}

// Release ends g's term: it checks that g still names the holder, raises the
// resource's seal to (g.Epoch, g.Generation, fencepub.MaxNumber), so GC
// collects what the term left and a later publish of it is stale, seals
// the other members of g's group (one lease) likewise, then revokes the
// lease (the package doc, "How a term ends"). The seal is raised even when
// the lease is gone. Each step is safe to re-send: call it again after an
// unanswered release. Errors: ErrLeaseLost (the term is sealed all the
// same), ErrInvalidGrant, fencepub.ErrUnavailable (the holder stays until
// its lease expires), ctx's error.
func (a *Authority) Release(ctx context.Context, g Grant) error {
	if err := checkGrant(g); err != nil {
		return err
	}
	if err := a.endTerm(ctx, g); err != nil {
		return err
	}
	if err := a.endLeaseMates(ctx, g); err != nil {
		return err
	}
	return a.revokeLease(ctx, g.LeaseID)
}

// endLeaseMates ends the terms of the other resources g's lease holds: the
// other members of g's group (AcquireGroup grants every member on one
// lease), found by the lease's attached holder keys. Revoking the lease
// ends their holds, so their terms are sealed first, as ReleaseGroup seals
// them; one that is no longer held by g's owner on g's lease is left
// alone. Errors: fencepub.ErrUnavailable, ctx's.
func (a *Authority) endLeaseMates(ctx context.Context, g Grant) error {
	var keys [][]byte
	err := a.call(ctx, "release: lease members", 0, func(rctx context.Context) error {
		resp, err := a.lease.TimeToLive(rctx, g.LeaseID, clientv3.WithAttachedKeys())
		if err != nil {
			return err
		}
		keys = resp.Keys
		return nil
	})
	if err != nil {
		if isLeaseNotFound(err) {
			return nil
		}
		return err
	}
	prefix, own := a.ns.AuthorityPrefix(), a.ns.HolderKey(g.Resource)
	for _, k := range keys {
		key := string(k)
		escaped, ok := strings.CutSuffix(strings.TrimPrefix(key, prefix), "/holder")
		if !ok || key == own || !strings.HasPrefix(key, prefix) {
			continue
		}
		res, err := url.PathUnescape(escaped)
		if err != nil || a.ns.HolderKey(res) != key {
			continue
		}
		h, held, err := a.Holder(ctx, res)
		switch {
		case err != nil:
			return err
		case !held || h.LeaseID != g.LeaseID || h.Owner != g.Owner:
			continue
		}
		if err := a.endTerm(ctx, h.Grant); err != nil && !errors.Is(err, ErrLeaseLost) {
			return err
		}
	}
	return nil
}

// endTerm is Release up to the revoke: the holder check and the seal over
// g's term. Errors: as Release; ErrLeaseLost after sealing when g no
// longer holds its resource.
func (a *Authority) endTerm(ctx context.Context, g Grant) error {
	hk := a.ns.HolderKey(g.Resource)
	seals := !strings.HasPrefix(g.Resource, "_")
	reads := a.releaseReads(g, seals)
	var resp *clientv3.TxnResponse
	err := a.call(ctx, "release", 0, func(rctx context.Context) (err error) {
		resp, err = a.kv.Txn(rctx).
			If(g.holderCmp(a.ns), clientv3.Compare(clientv3.LeaseValue(hk), "=", g.LeaseID), g.grantCmp(a.ns)).
			Then(reads...).
			Else(reads...).
			Commit()
		return err
	})
	if err != nil {
		return err
	}
	if seals {
		if err := a.sealTerm(ctx, g, resp); err != nil {
			return err
		}
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q generation %d cannot be released (%s)", ErrLeaseLost, g.Resource, g.Generation, describeLoss(g, resp))
	}
	return nil
}

// revokeLease is Release's last step: a revoke re-sent after a lost answer
// finds the lease gone, which is done.
func (a *Authority) revokeLease(ctx context.Context, lease clientv3.LeaseID) error {
	err := a.call(ctx, "release: revoke", 0, func(rctx context.Context) error {
		_, err := a.lease.Revoke(rctx, lease)
		return err
	})
	if err != nil && !isLeaseNotFound(err) {
		return err
	}
	return nil
}

// Holder is the live holder of a resource.
type Holder struct {
	Grant
	// Remaining is etcd's remaining TTL of the holder's lease when it was
	// read, whole seconds (0 if it expired in between).
	Remaining time.Duration `json:"remaining"`
}

// resourceState is a resource's authority state read at one etcd revision
// (operator.LeaseState, which `fencepub authority show` prints).
type resourceState struct {
	Resource string `json:"resource"`
	// Epoch is the domain's epoch (0: domain not initialised).
	Epoch uint64 `json:"epoch"`
	// Generation is the resource's durable generation: its latest fence.
	Generation uint64  `json:"generation"`
	Holder     *Holder `json:"holder,omitempty"`
	Revision   int64   `json:"revision"`
}

// inspect is operator.Inspect: it reads res's epoch, generation and holder
// in one transaction, plus the holder lease's remaining TTL. Errors:
// fencepub.ErrInvalidName, fencepub.ErrUnavailable, fencepub.ErrCorruptState.
func (a *Authority) inspect(ctx context.Context, res string) (resourceState, error) {
	if err := validateResourceName(res); err != nil {
		return resourceState{}, err
	}
	s, err := a.readState(ctx, res, "-")
	if err != nil {
		return resourceState{}, err
	}
	out := resourceState{Resource: res, Epoch: s.epoch, Generation: s.gen, Revision: s.rev}
	if s.holder != nil {
		h := &Holder{Grant: *s.holder}
		var ttl *clientv3.LeaseTimeToLiveResponse
		err := a.call(ctx, "lease time-to-live", 0, func(rctx context.Context) (err error) {
			ttl, err = a.lease.TimeToLive(rctx, s.holder.LeaseID)
			return err
		})
		if err != nil && !isLeaseNotFound(err) {
			return resourceState{}, err
		}
		if err == nil && ttl.TTL > 0 {
			h.Remaining = time.Duration(ttl.TTL) * time.Second
		}
		out.Holder = h
	}
	return out, nil
}

// Holder returns the live holder of res, read in one etcd transaction with
// res's generation, plus the holder lease's remaining TTL; ok is false when
// none holds it. Errors: fencepub.ErrInvalidName, fencepub.ErrUnavailable,
// fencepub.ErrCorruptState.
func (a *Authority) Holder(ctx context.Context, res string) (h Holder, ok bool, err error) {
	st, err := a.inspect(ctx, res)
	if err != nil || st.Holder == nil {
		return Holder{}, false, err
	}
	return *st.Holder, true, nil
}

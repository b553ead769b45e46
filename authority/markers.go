package authority

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/ownership"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The authority's marker objects live under layout.MetaPrefix, which GC
// never touches. They are small JSON documents written create-only
// (If-None-Match: *), so a number reserved in the bucket can never be
// reserved twice, whatever happens to etcd (DESIGN.md invariant 3).

const (
	markerContentType = "application/json"
	markerMaxBytes    = ownership.MaxBytes
)

// epochMarker is the body of an epoch marker: who reserved the epoch and why
// ("init" or "recover"). Nonce identifies the reserving call, so a retry of a
// lost response recognises its own marker.
type epochMarker struct {
	Epoch      uint64    `json:"epoch"`
	Deployment string    `json:"deployment_id"`
	Reason     string    `json:"reason"`
	Nonce      string    `json:"nonce"`
	CreatedAt  time.Time `json:"created_at"`
}

// grantMarker is the body of a grant high-water marker: which request got
// the grant of (epoch, generation).
type grantMarker struct {
	RequestID string    `json:"request_id"`
	Owner     string    `json:"owner"`
	LeaseID   int64     `json:"lease_id"`
	GrantedAt time.Time `json:"granted_at"`
}

// putCreateOnly writes body under key if no object exists there, retried
// through storeCall: a create-only write is safe to send twice, since a
// re-send after a lost answer finds the object and reports created false,
// and every caller then reads the marker to tell its own from another's.
// created is false when an object already existed.
func (a *Authority) putCreateOnly(ctx context.Context, key string, body any) (created bool, err error) {
	b, err := json.Marshal(body)
	if err != nil {
		return false, err
	}
	err = a.storeCall(ctx, "put "+key, func(ctx context.Context) error {
		_, err := objstore.PutSmallCreateOnly(ctx, a.st, key, b, markerContentType)
		created = err == nil
		if errors.Is(err, objstore.ErrExists) {
			return nil
		}
		return err
	})
	return created, err
}

// getJSON reads the small object key into out (a read, retried through
// storeCall).
func (a *Authority) getJSON(ctx context.Context, key string, out any) error {
	var b []byte
	if err := a.storeCall(ctx, "get "+key, func(ctx context.Context) (err error) {
		b, err = objstore.GetSmall(ctx, a.st, key, markerMaxBytes)
		return err
	}); err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: marker %s: %w", fencepub.ErrCorruptState, key, err)
	}
	return nil
}

// ensureOwnership returns the deployment id of the bucket's ownership
// marker, creating the marker with candidate if there is none.
func (a *Authority) ensureOwnership(ctx context.Context, candidate string) (string, error) {
	created, err := a.putCreateOnly(ctx, a.ns.OwnershipObject(), ownership.Marker{DeploymentID: candidate, CreatedAt: time.Now().UTC()})
	if err != nil {
		return "", err
	}
	if created {
		return candidate, nil
	}
	var m ownership.Marker
	if err := a.getJSON(ctx, a.ns.OwnershipObject(), &m); err != nil {
		return "", err
	}
	if m.DeploymentID == "" {
		return "", fmt.Errorf("%w: ownership marker %s has no deployment id", fencepub.ErrCorruptState, a.ns.OwnershipObject())
	}
	a.log.Info("authority: using the deployment id of the bucket's existing ownership marker",
		"object", a.ns.OwnershipObject(), "deployment", m.DeploymentID)
	return m.DeploymentID, nil
}

// listKeys streams the keys under prefix that sort after startAfter (""
// for all), in key order, calling fn for each until fn returns false. A
// positive pageSize asks the store for at most that many keys per request
// (a lookup of the first key asks for 1, so the store lists no more); 0
// takes the store's default (1000).
//
// A positive timeout bounds each attempt: a listing that gets no answer in
// time, or meets objstore.ErrUnavailable, goes on after the last key fn
// saw, with jittered backoff, within ctx's deadline or RetryTimeout (as
// storeCall retries; DESIGN.md invariant 12), so fn never sees a key twice.
// With timeout 0 the listing is one attempt that ends with ctx.
// Errors: storeErr's (fencepub.ErrUnavailable once the retries end).
func (a *Authority) listKeys(ctx context.Context, prefix, startAfter string, pageSize int, timeout time.Duration, fn func(objstore.ObjectInfo) bool) error {
	after := startAfter
	list := func(ctx context.Context) error {
		for obj, err := range a.st.List(ctx, prefix, objstore.ListOptions{StartAfter: after, PageSize: pageSize}) {
			if err != nil {
				return err
			}
			after = obj.Key
			if !fn(obj) {
				return nil
			}
		}
		return nil
	}
	classify := func(err error) error { return storeErr(ctx, "list "+prefix, err) }
	if timeout <= 0 {
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		return classify(list(lctx))
	}
	return a.retried(ctx, timeout, list, classify, func(err error) bool { return errors.Is(err, fencepub.ErrUnavailable) })
}

// firstAfter returns the first key under prefix that sorts after key.
func (a *Authority) firstAfter(ctx context.Context, prefix, key string) (first string, found bool, err error) {
	err = a.listKeys(ctx, prefix, key, 1, a.cfg.RequestTimeout, func(o objstore.ObjectInfo) bool {
		first, found = o.Key, true
		return false
	})
	return first, found, err
}

// parseEpochMarker returns the epoch of an epoch marker key.
func (a *Authority) parseEpochMarker(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, a.ns.EpochMarkersPrefix())
	if !ok {
		return 0, false
	}
	e, err := layout.DecodeNumber(rest)
	return e, err == nil
}

// parseGrantMarker returns the (epoch, generation) of a grant marker key of
// res.
func (a *Authority) parseGrantMarker(res, key string) (counter, bool) {
	rest, ok := strings.CutPrefix(key, a.ns.GrantMarkersPrefix(res))
	if !ok {
		return counter{}, false
	}
	es, gs, ok := strings.Cut(rest, "-")
	if !ok {
		return counter{}, false
	}
	e, err1 := layout.DecodeNumber(es)
	g, err2 := layout.DecodeNumber(gs)
	if err1 != nil || err2 != nil {
		return counter{}, false
	}
	return counter{epoch: e, gen: g}, true
}

// maxEpochMarker returns the highest epoch reserved in the bucket, 0 if none.
func (a *Authority) maxEpochMarker(ctx context.Context) (uint64, error) {
	var maxEpoch uint64
	err := a.listKeys(ctx, a.ns.EpochMarkersPrefix(), "", 0, a.cfg.RequestTimeout, func(o objstore.ObjectInfo) bool {
		if e, ok := a.parseEpochMarker(o.Key); ok {
			maxEpoch = max(maxEpoch, e)
		}
		return true
	})
	return maxEpoch, err
}

// reserveEpoch writes the epoch marker m create-only. ours is true when the
// marker now holding the epoch is m (written now, or by an earlier attempt
// of the same call whose response was lost).
func (a *Authority) reserveEpoch(ctx context.Context, m epochMarker) (ours bool, err error) {
	m.CreatedAt = time.Now().UTC()
	created, err := a.putCreateOnly(ctx, a.ns.EpochMarker(m.Epoch), m)
	if err != nil || created {
		return created, err
	}
	got, err := a.readEpochMarker(ctx, m.Epoch)
	if err != nil {
		return false, err
	}
	return got.Nonce == m.Nonce, nil
}

func (a *Authority) readEpochMarker(ctx context.Context, epoch uint64) (epochMarker, error) {
	var m epochMarker
	err := a.getJSON(ctx, a.ns.EpochMarker(epoch), &m)
	return m, err
}

// aboveScan is one listing of a resource's grant markers for the first
// marker above one (epoch, generation), running on its own goroutine
// (firstAfter: one LIST of at most one key, retried as listKeys retries).
// stop cancels it and waits for its goroutine; wait returns its result.
type aboveScan struct {
	done   chan struct{}
	cancel context.CancelFunc
	key    string // the first key above, when found
	found  bool
	err    error
}

// scanAbove starts listing the grant markers of res above the marker of c,
// within ctx.
func (a *Authority) scanAbove(ctx context.Context, res string, c counter) *aboveScan {
	sctx, cancel := context.WithCancel(ctx)
	sc := &aboveScan{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(sc.done)
		sc.key, sc.found, sc.err = a.firstAfter(sctx, a.ns.GrantMarkersPrefix(res), a.ns.GrantMarker(res, c.epoch, c.gen))
	}()
	return sc
}

func (sc *aboveScan) wait() (key string, found bool, err error) {
	<-sc.done
	return sc.key, sc.found, sc.err
}

func (sc *aboveScan) stop() {
	sc.cancel()
	<-sc.done
}

// confirmGrant records g create-only under its grant marker and checks the
// bucket for signs that etcd's history went back (DESIGN.md invariant 3):
//   - the marker of (epoch, generation) already names another request: the
//     same token was granted twice;
//   - a grant marker of the resource above (epoch, generation) that etcd's
//     current epoch and generation do not cover (pruning keeps the newest
//     markers, so this also catches a counter that went back further than
//     the retained ones).
//
// Per-resource markers suffice: every publish of a resource needs a grant
// of it, and a grant's token is returned only after its marker exists, so a
// resource whose markers etcd still covers lost no published state.
//
// early, when not nil, is the listing above g's marker that Acquire sent
// before the grant transaction that minted g (DESIGN.md "Rollback
// detection"): a marker it found existed before etcd granted g over
// generation g-1 and epoch g.Epoch, which only a history that went back
// allows, so it is ErrRolledBack at once. With early nil (a retried
// request id confirming an earlier grant) the listing runs now, next to
// the marker write, and a marker above is a rollback only if etcd's
// counter does not cover it.
//
// It returns nil when g is confirmed; ErrRolledBack (wrapped, with the
// evidence); ErrLeaseLost when a later grant or epoch legitimately
// superseded g before it was confirmed (the caller was paused); or
// fencepub.ErrUnavailable.
func (a *Authority) confirmGrant(ctx context.Context, g Grant, early *aboveScan) error {
	sc := early
	if sc == nil {
		sc = a.scanAbove(ctx, g.Resource, counter{epoch: g.Epoch, gen: g.Generation})
	}
	defer sc.stop()
	key := a.ns.GrantMarker(g.Resource, g.Epoch, g.Generation)
	created, putErr := a.putCreateOnly(ctx, key, grantMarker{
		RequestID: g.RequestID, Owner: g.Owner, LeaseID: int64(g.LeaseID), GrantedAt: g.GrantedAt.UTC(),
	})
	aboveKey, aboveFound, aboveErr := sc.wait()
	if err := errors.Join(putErr, aboveErr); err != nil {
		return err
	}
	if !created {
		var m grantMarker
		if err := a.getJSON(ctx, key, &m); err != nil {
			return err
		}
		if m.RequestID != g.RequestID || m.Owner != g.Owner {
			return fmt.Errorf("%w: resource %q: epoch %d generation %d was already granted to request %q (owner %q) at %s, and now again to request %q",
				ErrRolledBack, g.Resource, g.Epoch, g.Generation, m.RequestID, m.Owner, m.GrantedAt.Format(time.RFC3339), g.RequestID)
		}
	}
	if !aboveFound {
		return nil
	}
	above, ok := a.parseGrantMarker(g.Resource, aboveKey)
	if !ok {
		return nil // not a marker of ours
	}
	if early != nil {
		return fmt.Errorf("%w: resource %q: the bucket recorded a grant of epoch %d generation %d before etcd granted epoch %d generation %d",
			ErrRolledBack, g.Resource, above.epoch, above.gen, g.Epoch, g.Generation)
	}
	// A later grant is recorded. It is a rollback only if etcd does not know
	// it now; otherwise g was superseded while we were slow.
	cur, err := a.readCounter(ctx, g.Resource)
	if err != nil {
		return err
	}
	if cur.epoch < above.epoch || cur.epoch == above.epoch && cur.gen < above.gen {
		return fmt.Errorf("%w: resource %q: the bucket records a grant of epoch %d generation %d but etcd is at epoch %d generation %d",
			ErrRolledBack, g.Resource, above.epoch, above.gen, cur.epoch, cur.gen)
	}
	return fmt.Errorf("%w: resource %q generation %d was superseded by generation %d before it was confirmed",
		ErrLeaseLost, g.Resource, g.Generation, above.gen)
}

// readCounter reads the domain epoch and the generation of res at one
// revision (zeros when absent).
func (a *Authority) readCounter(ctx context.Context, res string) (counter, error) {
	rctx, cancel := a.rctx(ctx)
	defer cancel()
	resp, err := a.kv.Txn(rctx).Then(clientv3.OpGet(a.ns.EpochKey()), clientv3.OpGet(a.ns.GenerationKey(res))).Commit()
	if err != nil {
		return counter{}, etcdErr(ctx, "read counter", err)
	}
	var c counter
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if c.epoch, err = layout.DecodeNumber(string(kvs[0].Value)); err != nil {
			return counter{}, fmt.Errorf("%w: epoch key: %w", fencepub.ErrCorruptState, err)
		}
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		if c.gen, err = layout.DecodeNumber(string(kvs[0].Value)); err != nil {
			return counter{}, fmt.Errorf("%w: generation key of %q: %w", fencepub.ErrCorruptState, res, err)
		}
	}
	return c, nil
}

// pruneMarkers keeps the grant markers of res bounded: every MarkerKeep
// generations it deletes the markers below the newest MarkerKeep that sort
// before g's own. Markers above g are never touched, so the newest marker —
// all rollback detection needs — always survives. Failures are logged: a
// leftover marker costs storage, not safety.
func (a *Authority) pruneMarkers(ctx context.Context, g Grant) {
	keep := a.cfg.MarkerKeep
	if g.Generation%uint64(keep) != 0 {
		return
	}
	own := a.ns.GrantMarker(g.Resource, g.Epoch, g.Generation)
	var below []string
	err := a.listKeys(ctx, a.ns.GrantMarkersPrefix(g.Resource), "", 0, a.cfg.RequestTimeout, func(o objstore.ObjectInfo) bool {
		if o.Key >= own {
			return false
		}
		if _, ok := a.parseGrantMarker(g.Resource, o.Key); ok {
			below = append(below, o.Key)
		}
		return true
	})
	if err != nil || len(below) <= keep {
		if err != nil {
			a.log.Warn("authority: listing grant markers to prune failed", "resource", g.Resource, "err", err)
		}
		return
	}
	prune := below[:len(below)-keep]
	rctx, cancel := a.rctx(ctx)
	defer cancel()
	for i, err := range a.st.Delete(rctx, prune) { // one multi-object delete request
		if err != nil {
			a.log.Warn("authority: pruning a grant marker failed", "object", prune[i], "err", err)
		}
	}
}

// probeStore runs objstore.ProbeCreateOnly on the authority's store, each
// write bounded by twice RequestTimeout.
func (a *Authority) probeStore(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 2*a.cfg.RequestTimeout)
	defer cancel()
	err := objstore.ProbeCreateOnly(rctx, a.st, a.ns.CreateOnlyProbeObject())
	if err == nil || errors.Is(err, objstore.ErrCreateOnlyIgnored) {
		return err
	}
	return storeErr(ctx, "create-only probe "+a.ns.CreateOnlyProbeObject(), err)
}

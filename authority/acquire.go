package authority

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TTL limits of a lease, enforced rather than stretched.
const (
	// minTTL is etcd's minimum lease TTL with its default timing: the server
	// rounds 1.5 election timeouts (1.5 × 1 s) up to whole seconds, and
	// silently raises any shorter TTL to it.
	minTTL = 2 * time.Second
	// maxTTL is etcd's maximum lease TTL (9e9 s).
	maxTTL = 9_000_000_000 * time.Second
)

// AcquireRequest asks for a lease on Resource.
type AcquireRequest struct {
	// Resource is the name to lease: 1–200 bytes of letters, digits, '.',
	// '_' and '-'. Names starting with '_' are reserved for fencepub itself
	// (its GC's lease).
	Resource string
	// Owner identifies this lease request (1–128 bytes of letters, digits,
	// '.', '_', '-', ':' and '@'); Release compares it. Use a fresh random
	// id per request.
	Owner string
	// RequestID makes the acquire idempotent: a retry with the same id gets
	// the original grant instead of a new one while its request record
	// lives (gc.Config.RequestRetention, default 24 h). Empty: a random id
	// is generated (and returned in Grant.RequestID).
	RequestID string
	// TTL is the lease's time to live: whole seconds, 2 s (etcd's minimum) to
	// etcd's maximum (9e9 s).
	TTL time.Duration
	// Wait blocks while another grant holds the resource (watching its
	// holder key, not polling) until this request wins or ctx ends. Without
	// it a held resource fails at once with ErrHeld.
	Wait bool
	// MaxWait, with Wait, bounds the time spent waiting for a holder (from
	// the first wait; 0: as long as ctx). When it passes the resource is
	// still held: an ErrHeld error wrapping context.DeadlineExceeded. It bounds
	// only the waiting, never a grant transaction in progress, so a holder
	// that leaves just before it passes does not cut a grant in half.
	MaxWait time.Duration
}

// requestRecord is the value of requests/<request-id>: the grant the request
// got and when the record was written. Its retention is measured from the
// record's ModRevision on GC's domain clock (gc prunes it); CreatedAt, the
// acquirer's clock, is informative only.
type requestRecord struct {
	Grant     Grant     `json:"grant"`
	CreatedAt time.Time `json:"created_at"`
}

// resState is what a grant transaction compares, read at one revision.
type resState struct {
	rev         int64
	epoch       uint64
	hasEpoch    bool
	gen         uint64
	holder      *Grant // nil when no live holder
	request     *requestRecord
	rollback    []byte // the rollback flag's value; nil when absent
	grantExists bool   // grants/<gen+1> exists (only from a failed grant txn)
}

// checkTTL returns ttl in whole seconds, or ErrBadTTL: etcd would stretch a
// TTL below minTTL and round a fractional one, so the authority refuses them
// rather than grant another TTL than asked.
func checkTTL(ttl time.Duration) (int64, error) {
	switch {
	case ttl < minTTL:
		return 0, fmt.Errorf("%w: %s is below etcd's minimum lease TTL of %s (with etcd's default 100 ms heartbeat and 1 s election timeout; etcd would silently stretch it)", ErrBadTTL, ttl, minTTL)
	case ttl > maxTTL:
		return 0, fmt.Errorf("%w: %s is above etcd's maximum lease TTL of %s", ErrBadTTL, ttl, maxTTL)
	case ttl%time.Second != 0:
		return 0, fmt.Errorf("%w: %s is not a whole number of seconds; etcd lease TTLs are whole seconds", ErrBadTTL, ttl)
	}
	return int64(ttl / time.Second), nil
}

// Acquire grants req.Owner a lease on req.Resource and returns the grant with
// its fencing token (DESIGN.md invariant 2; the package doc, "How a grant is
// made"), initialising an uninitialised domain first. A retry with the
// same RequestID returns the original grant, with ErrExpired when it no
// longer holds. It blocks for about one etcd transaction and one store round
// trip, with req.Wait until the resource is free or ctx ends, and re-sends
// etcd requests within ctx's deadline or Config.RetryTimeout. Errors:
// fencepub.ErrInvalidName, ErrBadTTL, ErrHeld, ErrExpired, ErrRequestConflict,
// ErrRolledBack, ErrLeaseLost, fencepub.ErrUnavailable (retry with the same
// request id), ErrExhausted, ctx's error.
func (a *Authority) Acquire(ctx context.Context, req AcquireRequest) (Grant, error) {
	if err := layout.ValidateResource(req.Resource, layout.ReservedNames(ctx)); err != nil {
		return Grant{}, err
	}
	if err := layout.ValidateOwner(req.Owner); err != nil {
		return Grant{}, err
	}
	if req.RequestID == "" {
		req.RequestID = NewID()
	}
	if err := layout.ValidateKey("request id", req.RequestID); err != nil {
		return Grant{}, err
	}
	ttl, err := checkTTL(req.TTL)
	if err != nil {
		return Grant{}, err
	}
	acq := &acquisition{a: a, req: req, ttl: ttl}
	defer acq.dropLease()
	return acq.run(ctx)
}

// acquisition is one Acquire call: the request and the lease it holds while
// it tries to win.
type acquisition struct {
	a   *Authority
	req AcquireRequest
	ttl int64 // seconds

	lease     clientv3.LeaseID // 0: none
	leaseSent time.Time        // when the LeaseGrant request was sent
	// keepLease: the lease may carry a holder (a grant was or may have been
	// made with it), so it must not be revoked when Acquire returns.
	keepLease bool
	// waitUntil is when AcquireRequest.MaxWait ends the waiting (zero:
	// not waited yet, or no MaxWait).
	waitUntil time.Time
}

// attempt bounds one attempt of the lease grant and the grant transaction:
// RequestTimeout, but at most a third of the TTL. The grant's local
// deadline runs from the lease request's send time, so an attempt stuck on
// a stalled member for longer would leave a grant that expires as it is
// made; a shorter one leaves time for a retry on another member.
func (q *acquisition) attempt() time.Duration {
	return min(q.a.cfg.RequestTimeout, time.Duration(q.ttl)*time.Second/3)
}

// waitCtx bounds one wait for the holder by AcquireRequest.MaxWait,
// counted from the first wait.
func (q *acquisition) waitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if q.req.MaxWait <= 0 {
		return ctx, func() {}
	}
	if q.waitUntil.IsZero() {
		q.waitUntil = time.Now().Add(q.req.MaxWait)
	}
	return context.WithDeadline(ctx, q.waitUntil)
}

func (q *acquisition) run(ctx context.Context) (Grant, error) {
	a, res := q.a, q.req.Resource
	var s resState
	fresh := false
	if c, ok := a.recall(res); ok {
		// Warm path: one transaction, assuming the state last seen.
		s, fresh = resState{epoch: c.epoch, hasEpoch: true, gen: c.gen}, true
	}
	for {
		if !fresh {
			var err error
			if s, err = a.readState(ctx, res, q.req.RequestID); err != nil {
				return Grant{}, err
			}
		}
		fresh = false
		switch {
		case s.request != nil:
			return q.duplicate(ctx, s)
		case s.rollback != nil:
			return Grant{}, fmt.Errorf("%w (detected earlier: %s)", ErrRolledBack, s.rollback)
		case !s.hasEpoch:
			if _, err := a.initDomain(ctx); err != nil {
				return Grant{}, err
			}
			continue
		case s.holder != nil:
			a.remember(res, counter{epoch: s.epoch, gen: s.gen})
			if !q.req.Wait {
				return Grant{}, a.heldBy(ctx, res, *s.holder)
			}
			q.dropLease() // it would tick away while we wait
			a.log.Debug("authority: waiting for the holder", "resource", res, "holder", s.holder.Owner)
			wctx, cancel := q.waitCtx(ctx)
			err := a.waitFree(wctx, res, s.rev)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) { // still held when the deadline came
					return Grant{}, fmt.Errorf("%w; stopped waiting: %w", a.heldBy(context.WithoutCancel(ctx), res, *s.holder), err)
				}
				return Grant{}, err
			}
			continue
		case s.gen >= layout.MaxNumber:
			return Grant{}, fmt.Errorf("%w: resource %q is at generation %d", ErrExhausted, res, s.gen)
		}
		g, next, done, err := q.try(ctx, s)
		if done || err != nil {
			return g, err
		}
		s, fresh = next, next.rev != 0
	}
}

// try runs the grant transaction for state s. done is true when the call
// ends with (g, err); otherwise next is the state to retry from (next.rev is
// 0 when it must be re-read).
func (q *acquisition) try(ctx context.Context, s resState) (g Grant, next resState, done bool, err error) {
	a, res := q.a, q.req.Resource
	gen := s.gen + 1
	// The rollback check's listing goes out now, next to the lease grant
	// and the grant transaction, instead of after them (confirmGrant). An
	// acquire that waits expects other acquirers, and most of its grant
	// transactions fail: it lists after winning, as before.
	var early *aboveScan
	if !q.req.Wait {
		early = a.scanAbove(ctx, res, counter{epoch: s.epoch, gen: gen})
		defer early.stop()
	}
	if q.lease == 0 {
		if err := q.grantLease(ctx); err != nil {
			return Grant{}, resState{}, true, err
		}
	}
	g = Grant{
		Resource: res, Owner: q.req.Owner, RequestID: q.req.RequestID, Epoch: s.epoch, Generation: gen,
		LeaseID: q.lease, TTL: time.Duration(q.ttl) * time.Second, GrantedAt: q.leaseSent,
	}
	holderVal, err := json.Marshal(g)
	if err != nil {
		return Grant{}, resState{}, true, err
	}
	reqVal, err := json.Marshal(requestRecord{Grant: g, CreatedAt: time.Now().UTC()})
	if err != nil {
		return Grant{}, resState{}, true, err
	}
	// Re-sending the transaction after a lost answer is safe: once a copy
	// applied, the request record makes every later copy fail its compare
	// and read that record back (Else), and the state machine answers it
	// as the request's own grant (duplicate).
	var resp *clientv3.TxnResponse
	err = a.call(ctx, "grant transaction", q.attempt(), func(rctx context.Context) (err error) {
		resp, err = a.kv.Txn(rctx).
			If(append(a.domainCmps(s.epoch), a.memberCmps(res, s.gen, q.req.RequestID)...)...).
			Then(a.memberOps(res, gen, s.epoch, q.req.Owner, q.req.RequestID, string(holderVal), string(reqVal), q.lease)...).
			Else(a.stateOps(res, q.req.RequestID, gen)...).
			Commit()
		return err
	})
	switch {
	case isLeaseNotFound(err):
		// The lease expired before the transaction ran (we were paused
		// longer than the TTL); nothing was written. Start over.
		q.lease = 0
		return Grant{}, s, false, nil
	case errors.Is(err, fencepub.ErrUnavailable):
		// Unanswered until the deadline: the grant may exist with our
		// lease, which therefore stays.
		q.keepLease = true
		return Grant{}, resState{}, true, fmt.Errorf("%w; the grant transaction's outcome is unknown: retry with request id %q", err, q.req.RequestID)
	case err != nil:
		return Grant{}, resState{}, true, err
	case !resp.Succeeded:
		q.keepLease = false
		next, err := a.parseState(resp.Header.Revision, resp.Responses)
		if err != nil {
			return Grant{}, resState{}, true, err
		}
		if err := grantGap(res, s, next); err != nil {
			return Grant{}, resState{}, true, err
		}
		a.remember(res, counter{epoch: next.epoch, gen: next.gen})
		return Grant{}, next, false, nil
	}
	q.keepLease = true
	g.HolderRevision = resp.Header.Revision
	a.remember(res, counter{epoch: s.epoch, gen: gen})
	if err := q.confirm(ctx, g, early, true); err != nil {
		// Unless a retry with the request id may still confirm it
		// (fencepub.ErrUnavailable), nobody will get this grant: end its
		// lease now rather than let it block the resource for its TTL (a
		// missing bucket, a corrupt marker).
		q.keepLease = errors.Is(err, fencepub.ErrUnavailable)
		return Grant{}, resState{}, true, err
	}
	a.pruneMarkers(ctx, g)
	return g, resState{}, true, nil
}

// confirm runs confirmGrant for g (early: the listing sent before g's grant
// transaction, or nil). On a rollback it sets the domain's rollback flag
// and revokes g's lease (when live says g holds it).
func (q *acquisition) confirm(ctx context.Context, g Grant, early *aboveScan, live bool) error {
	err := q.a.confirmGrant(ctx, g, early)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrRolledBack):
		q.a.markRolledBack(ctx, g, err)
		if live {
			q.a.revoke(ctx, g.LeaseID)
		}
	case errors.Is(err, fencepub.ErrUnavailable):
		err = fmt.Errorf("%w; generation %d of %q was granted but not yet confirmed: retry with request id %q", err, g.Generation, g.Resource, g.RequestID)
	}
	return err
}

// duplicate answers a retried request id from its request record s.request.
func (q *acquisition) duplicate(ctx context.Context, s resState) (Grant, error) {
	g := s.request.Grant
	if g.Resource != q.req.Resource {
		return Grant{}, fmt.Errorf("%w: request record of %q names resource %q", fencepub.ErrCorruptState, q.req.Resource, g.Resource)
	}
	if g.Owner != q.req.Owner {
		return Grant{}, fmt.Errorf("%w: request id %q of resource %q got generation %d for owner %q, not %q",
			ErrRequestConflict, g.RequestID, g.Resource, g.Generation, g.Owner, q.req.Owner)
	}
	if g.LeaseID == q.lease {
		q.keepLease = true // our own earlier attempt made the grant
	}
	if s.rollback != nil {
		return Grant{}, fmt.Errorf("%w (detected earlier: %s)", ErrRolledBack, s.rollback)
	}
	live := s.holder != nil && s.holder.HolderRevision == g.HolderRevision
	if err := q.confirm(ctx, g, nil, live); err != nil {
		if !errors.Is(err, ErrLeaseLost) {
			return Grant{}, err
		}
		live = false
	}
	if !live {
		return g, fmt.Errorf("%w: request id %q got generation %d of %q (epoch %d) at %s; it no longer holds the resource",
			ErrExpired, g.RequestID, g.Generation, g.Resource, g.Epoch, g.GrantedAt.Format(time.RFC3339))
	}
	return g, nil
}

// grantLease creates the lease a grant will be attached to, refusing a TTL
// etcd did not grant exactly.
func (q *acquisition) grantLease(ctx context.Context) error {
	// A lease granted by an attempt whose answer was lost is never used
	// and expires by its TTL.
	var (
		resp *clientv3.LeaseGrantResponse
		sent time.Time
	)
	err := q.a.call(ctx, "lease grant", q.attempt(), func(rctx context.Context) (err error) {
		sent = time.Now()
		resp, err = q.a.lease.Grant(rctx, q.ttl)
		return err
	})
	if err != nil {
		return err
	}
	q.lease, q.leaseSent, q.keepLease = resp.ID, sent, false
	if resp.TTL != q.ttl {
		q.dropLease()
		return fmt.Errorf("%w: etcd granted a %d s lease for a requested %d s; this cluster's minimum lease TTL is higher than %s (non-default heartbeat or election timeout)",
			ErrBadTTL, resp.TTL, q.ttl, minTTL)
	}
	return nil
}

// dropLease revokes the acquisition's lease unless it may carry a grant.
// It uses a fresh bounded context: it also runs after ctx was cancelled.
func (q *acquisition) dropLease() {
	if q.lease != 0 && !q.keepLease {
		q.a.revoke(context.Background(), q.lease)
	}
	q.lease, q.keepLease = 0, false
}

// revoke revokes lease, best effort, with a context bounded by
// RequestTimeout and detached from ctx's cancellation.
func (a *Authority) revoke(ctx context.Context, lease clientv3.LeaseID) {
	rctx, cancel := a.rctx(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := a.lease.Revoke(rctx, lease); err != nil && !isLeaseNotFound(err) {
		a.log.Warn("authority: lease revoke failed; it expires by its TTL", "lease", int64(lease), "err", err)
	}
}

// markRolledBack sets the domain's rollback flag (first detection wins), so
// no grant is made until recover clears it.
func (a *Authority) markRolledBack(ctx context.Context, g Grant, cause error) {
	val, _ := json.Marshal(map[string]any{
		"resource": g.Resource, "epoch": g.Epoch, "generation": g.Generation,
		"request_id": g.RequestID, "detected_at": time.Now().UTC(), "evidence": cause.Error(),
	})
	rctx, cancel := a.rctx(context.WithoutCancel(ctx))
	defer cancel()
	_, err := a.kv.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.ns.RollbackKey()), "=", 0)).
		Then(clientv3.OpPut(a.ns.RollbackKey(), string(val))).
		Commit()
	a.log.Error("authority: rollback detected; refusing grants until `fencepub authority recover`",
		"resource", g.Resource, "epoch", g.Epoch, "generation", g.Generation, "evidence", cause, "flag_err", err)
}

// Grant transaction building blocks, shared by Acquire and AcquireGroup
// so both compare and write exactly the same keys per resource.

// domainCmps are the grant transaction's domain-wide compares: the epoch
// read and no rollback flag.
func (a *Authority) domainCmps(epoch uint64) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(a.ns.EpochKey()), "=", layout.EncodeNumber(epoch)),
		clientv3.Compare(clientv3.CreateRevision(a.ns.RollbackKey()), "=", 0),
	}
}

// memberCmps are the grant transaction's compares for one resource read
// at generation gen: no live holder, the generation unchanged, no grant
// record for gen+1 and the request id unused.
func (a *Authority) memberCmps(res string, gen uint64, requestID string) []clientv3.Cmp {
	genCmp := clientv3.Compare(clientv3.Value(a.ns.GenerationKey(res)), "=", layout.EncodeNumber(gen))
	if gen == 0 {
		genCmp = clientv3.Compare(clientv3.CreateRevision(a.ns.GenerationKey(res)), "=", 0)
	}
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(a.ns.HolderKey(res)), "=", 0),
		genCmp,
		clientv3.Compare(clientv3.CreateRevision(a.ns.GrantKey(res, gen+1)), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(a.ns.RequestKey(res, requestID)), "=", 0),
	}
}

// memberOps are the grant transaction's writes for one resource granted
// generation gen: the generation (never leased, never deleted), the
// holder attached to lease, the durable grant record and the request
// record.
func (a *Authority) memberOps(res string, gen, epoch uint64, owner, requestID, holderVal, reqVal string, lease clientv3.LeaseID) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpPut(a.ns.GenerationKey(res), layout.EncodeNumber(gen)),
		clientv3.OpPut(a.ns.HolderKey(res), holderVal, clientv3.WithLease(lease)),
		clientv3.OpPut(a.ns.GrantKey(res, gen), layout.GrantRecordValue(epoch, owner)),
		clientv3.OpPut(a.ns.RequestKey(res, requestID), reqVal),
	}
}

// memberReads are the reads of one resource's grant state (generation,
// holder, request record) and, when next > 0, whether the grant record of
// generation next exists (count only).
func (a *Authority) memberReads(res, requestID string, next uint64) []clientv3.Op {
	ops := []clientv3.Op{
		clientv3.OpGet(a.ns.GenerationKey(res)),
		clientv3.OpGet(a.ns.HolderKey(res)),
		clientv3.OpGet(a.ns.RequestKey(res, requestID)),
	}
	if next > 0 {
		ops = append(ops, clientv3.OpGet(a.ns.GrantKey(res, next), clientv3.WithCountOnly()))
	}
	return ops
}

// stateOps are the reads of a resource's grant state, in parseState's
// order: epoch, memberReads, rollback flag. next as memberReads.
func (a *Authority) stateOps(res, requestID string, next uint64) []clientv3.Op {
	ops := append([]clientv3.Op{clientv3.OpGet(a.ns.EpochKey())}, a.memberReads(res, requestID, next)...)
	return append(ops, clientv3.OpGet(a.ns.RollbackKey()))
}

// grantGap reports the corrupt state a failed grant transaction from s can
// reveal in next: a grant record for generation s.gen+1 while nothing
// else changed.
func grantGap(res string, s, next resState) error {
	if next.grantExists && next.request == nil && next.rollback == nil && next.holder == nil &&
		next.hasEpoch && next.epoch == s.epoch && next.gen == s.gen {
		return fmt.Errorf("%w: resource %q: a grant record for generation %d exists but the generation counter is %d",
			fencepub.ErrCorruptState, res, s.gen+1, s.gen)
	}
	return nil
}

// readState reads a resource's grant state at one revision (one request,
// retried while etcd cannot serve it: Authority.call).
func (a *Authority) readState(ctx context.Context, res, requestID string) (resState, error) {
	var resp *clientv3.TxnResponse
	err := a.call(ctx, "read state", 0, func(rctx context.Context) (err error) {
		resp, err = a.kv.Txn(rctx).Then(a.stateOps(res, requestID, 0)...).Commit()
		return err
	})
	if err != nil {
		return resState{}, err
	}
	return a.parseState(resp.Header.Revision, resp.Responses)
}

// parseState decodes the responses of stateOps.
func (a *Authority) parseState(rev int64, rs []*responseOp) (resState, error) {
	return a.parseMember(rev, rs[0], rs[len(rs)-1], rs[1:len(rs)-1])
}

// parseMember decodes one resource's grant state from the responses of the
// epoch read, the rollback flag read and its memberReads.
func (a *Authority) parseMember(rev int64, epoch, rollback *responseOp, member []*responseOp) (resState, error) {
	s := resState{rev: rev}
	rs := []*responseOp{epoch, member[0], member[1], member[2], rollback}
	if len(member) > 3 {
		s.grantExists = member[3].GetResponseRange().Count > 0
	}
	kv := func(i int) *mvccKV {
		if kvs := rs[i].GetResponseRange().Kvs; len(kvs) > 0 {
			return kvs[0]
		}
		return nil
	}
	var err error
	if e := kv(0); e != nil {
		if s.epoch, err = layout.DecodeNumber(string(e.Value)); err != nil {
			return resState{}, fmt.Errorf("%w: epoch key: %w", fencepub.ErrCorruptState, err)
		}
		s.hasEpoch = true
	}
	if g := kv(1); g != nil {
		if s.gen, err = layout.DecodeNumber(string(g.Value)); err != nil {
			return resState{}, fmt.Errorf("%w: generation key: %w", fencepub.ErrCorruptState, err)
		}
	}
	if h := kv(2); h != nil {
		g, err := decodeHolder(h)
		if err != nil {
			return resState{}, err
		}
		s.holder = &g
	}
	if r := kv(3); r != nil {
		var rec requestRecord
		if err := json.Unmarshal(r.Value, &rec); err != nil {
			return resState{}, fmt.Errorf("%w: request record %s: %w", fencepub.ErrCorruptState, r.Key, err)
		}
		rec.Grant.HolderRevision = r.CreateRevision // written in the grant txn
		s.request = &rec
	}
	if f := kv(4); f != nil {
		// Non-nil even for an empty value: the flag is its presence (the
		// grant transaction compares CreateRevision), and reading an empty
		// value as "absent" made Acquire retry its failing grant for ever.
		s.rollback = append([]byte{}, f.Value...)
	}
	return s, nil
}

// decodeHolder decodes a holder key into its Grant; HolderRevision is the
// key's CreateRevision.
func decodeHolder(kv *mvccKV) (Grant, error) {
	var g Grant
	if err := json.Unmarshal(kv.Value, &g); err != nil {
		return Grant{}, fmt.Errorf("%w: holder %s: %w", fencepub.ErrCorruptState, kv.Key, err)
	}
	g.HolderRevision = kv.CreateRevision
	return g, nil
}

// heldBy builds the ErrHeld error for holder, estimating its expiry from
// the lease's remaining TTL (zero Until when that read fails).
func (a *Authority) heldBy(ctx context.Context, res string, holder Grant) error {
	e := &heldError{Resource: res, Holder: holder}
	rctx, cancel := a.rctx(ctx)
	defer cancel()
	if ttl, err := a.lease.TimeToLive(rctx, holder.LeaseID); err == nil && ttl.TTL >= 0 {
		e.Until = time.Now().Add(time.Duration(ttl.TTL) * time.Second).Truncate(time.Second)
	}
	return e
}

// waitFree blocks until the holder key of res seen at revision rev is
// deleted (lease expiry, revoke or release), watching from rev+1 so no
// deletion is missed. It returns nil also when the watch ends for another
// reason (compaction, leader loss): the caller re-reads the state.
func (a *Authority) waitFree(ctx context.Context, res string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range a.cli.Watch(wctx, a.ns.HolderKey(res), clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if wr.Err() != nil || wr.Canceled || len(wr.Events) > 0 {
			return nil
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("authority: waiting for %q: %w", res, context.Cause(ctx))
	}
	return nil
}

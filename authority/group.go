package authority

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrGroupTooLarge: a group whose grant transaction would carry more
// operations than etcd accepts in one transaction (Config.MaxTxnOps, CLI
// key etcd.max_txn_ops). It wraps fencepub.ErrInvalid; the message names
// how many members fit. Nothing was acquired.
var ErrGroupTooLarge = fmt.Errorf("authority: group too large for one etcd transaction: %w", fencepub.ErrInvalid)

// Operations of a group's grant transaction (DESIGN.md "Groups"): its
// compares and its Else reads are the largest lists, each groupShared
// domain-wide ones plus groupPerMember per member.
const (
	groupShared    = 2 // epoch, rollback flag
	groupPerMember = 4 // holder, generation, next grant record, request record
)

// groupOps returns how many operations the grant transaction of a group
// of n resources carries in its largest list (etcd compares the longest of
// compares, Then and Else with --max-txn-ops): 4n + 2.
func groupOps(n int) int { return groupShared + groupPerMember*n }

// maxGroup is the largest group AcquireGroup accepts under
// Config.MaxTxnOps (31 with etcd's default 128).
func (a *Authority) maxGroup() int { return max(0, (a.cfg.MaxTxnOps-groupShared)/groupPerMember) }

// GroupRequest asks for one lease over every resource of Resources.
// Owner, RequestID, TTL, Wait and MaxWait mean what they mean in
// AcquireRequest; the request id is recorded for every member.
type GroupRequest struct {
	// Resources are the names to lease, 1 to 31 of them under etcd's
	// default --max-txn-ops (DESIGN.md "Groups"), each named
	// as AcquireRequest.Resource, no name twice.
	Resources []string
	Owner     string
	RequestID string
	TTL       time.Duration
	Wait      bool
	MaxWait   time.Duration
}

// AcquireGroup grants req.Owner every resource of req.Resources or none, in
// one etcd transaction that mints each member its own generation, all on
// one lease; it returns the grants sorted by resource. A waiter holds
// nothing and waits on the first held member in name order, so groups
// never deadlock. Keep the lease with a Session on any member; end with
// ReleaseGroup (or Session.Close of any member). Retries and blocking
// as Acquire (DESIGN.md "Groups"). Errors: ErrGroupTooLarge (nothing
// sent), fencepub.ErrInvalid, and Acquire's.
func (a *Authority) AcquireGroup(ctx context.Context, req GroupRequest) ([]Grant, error) {
	members := slices.Sorted(slices.Values(req.Resources))
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: authority: a group needs at least one resource", fencepub.ErrInvalid)
	}
	if n := len(members); n > a.maxGroup() {
		return nil, fmt.Errorf("%w: %d members need %d operations; at most %d members fit etcd.max_txn_ops = %d (which must match etcd's --max-txn-ops)",
			ErrGroupTooLarge, n, groupOps(n), a.maxGroup(), a.cfg.MaxTxnOps)
	}
	reserved := layout.ReservedNames(ctx)
	for i, res := range members {
		if err := layout.ValidateResource(res, reserved); err != nil {
			return nil, err
		}
		if i > 0 && members[i-1] == res {
			return nil, fmt.Errorf("%w: authority: resource %q is named twice in the group", fencepub.ErrInvalid, res)
		}
	}
	q := &acquisition{a: a, req: AcquireRequest{
		Resource: members[0], Owner: req.Owner, RequestID: req.RequestID, TTL: req.TTL, Wait: req.Wait, MaxWait: req.MaxWait,
	}}
	if err := layout.ValidateOwner(q.req.Owner); err != nil {
		return nil, err
	}
	if q.req.RequestID == "" {
		q.req.RequestID = NewID()
	}
	if err := layout.ValidateKey("request id", q.req.RequestID); err != nil {
		return nil, err
	}
	ttl, err := checkTTL(req.TTL)
	if err != nil {
		return nil, err
	}
	q.ttl = ttl
	defer q.dropLease()
	return q.runGroup(ctx, members)
}

// groupReads read the grant state of every member at one revision: epoch,
// rollback flag, then memberReads per member; with states, also the grant
// record count of each member's next generation (a failed group grant
// transaction's Else).
func (q *acquisition) groupReads(members []string, states []resState) []clientv3.Op {
	a := q.a
	ops := []clientv3.Op{clientv3.OpGet(a.ns.EpochKey()), clientv3.OpGet(a.ns.RollbackKey())}
	for i, res := range members {
		var next uint64
		if states != nil {
			next = states[i].gen + 1
		}
		ops = append(ops, a.memberReads(res, q.req.RequestID, next)...)
	}
	return ops
}

// parseGroup decodes the responses of groupReads into one state per member.
func (q *acquisition) parseGroup(rev int64, rs []*responseOp, n int) ([]resState, error) {
	per := (len(rs) - groupShared) / n
	states := make([]resState, n)
	for i := range n {
		off := groupShared + i*per
		s, err := q.a.parseMember(rev, rs[0], rs[1], rs[off:off+per])
		if err != nil {
			return nil, err
		}
		states[i] = s
	}
	return states, nil
}

func (q *acquisition) runGroup(ctx context.Context, members []string) ([]Grant, error) {
	a := q.a
	var states []resState
	for {
		if states == nil {
			var resp *clientv3.TxnResponse
			err := a.call(ctx, "read group state", 0, func(rctx context.Context) (err error) {
				resp, err = a.kv.Txn(rctx).Then(q.groupReads(members, nil)...).Commit()
				return err
			})
			if err != nil {
				return nil, err
			}
			if states, err = q.parseGroup(resp.Header.Revision, resp.Responses, len(members)); err != nil {
				return nil, err
			}
		}
		s0 := states[0] // epoch and rollback flag are the same in every state
		held := slices.IndexFunc(states, func(s resState) bool { return s.holder != nil })
		switch {
		case slices.ContainsFunc(states, func(s resState) bool { return s.request != nil }):
			return q.groupDuplicate(ctx, members, states)
		case s0.rollback != nil:
			return nil, fmt.Errorf("%w (detected earlier: %s)", ErrRolledBack, s0.rollback)
		case !s0.hasEpoch:
			if _, err := a.initDomain(ctx); err != nil {
				return nil, err
			}
			states = nil
			continue
		case held >= 0:
			res, s := members[held], states[held]
			if !q.req.Wait {
				return nil, a.heldBy(ctx, res, *s.holder)
			}
			q.dropLease()
			a.log.Debug("authority: group waiting for a holder", "resource", res, "holder", s.holder.Owner)
			wctx, cancel := q.waitCtx(ctx)
			err := a.waitFree(wctx, res, s.rev)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return nil, fmt.Errorf("%w; stopped waiting: %w", a.heldBy(context.WithoutCancel(ctx), res, *s.holder), err)
				}
				return nil, err
			}
			states = nil
			continue
		}
		for i, s := range states {
			if s.gen >= layout.MaxNumber {
				return nil, fmt.Errorf("%w: resource %q is at generation %d", ErrExhausted, members[i], s.gen)
			}
		}
		gs, next, err := q.tryGroup(ctx, members, states)
		if gs != nil || err != nil {
			return gs, err
		}
		states = next
	}
}

// tryGroup runs the group's grant transaction from states. It returns the
// grants, or an error, or the states to retry from (nil: re-read).
func (q *acquisition) tryGroup(ctx context.Context, members []string, states []resState) ([]Grant, []resState, error) {
	a := q.a
	if q.lease == 0 {
		if err := q.grantLease(ctx); err != nil {
			return nil, nil, err
		}
	}
	epoch := states[0].epoch
	grants := make([]Grant, len(members))
	cmps := a.domainCmps(epoch)
	var then []clientv3.Op
	for i, res := range members {
		g := Grant{
			Resource: res, Owner: q.req.Owner, RequestID: q.req.RequestID, Epoch: epoch, Generation: states[i].gen + 1,
			LeaseID: q.lease, TTL: time.Duration(q.ttl) * time.Second, GrantedAt: q.leaseSent,
		}
		holderVal, err := json.Marshal(g)
		if err != nil {
			return nil, nil, err
		}
		reqVal, err := json.Marshal(requestRecord{Grant: g, CreatedAt: time.Now().UTC()})
		if err != nil {
			return nil, nil, err
		}
		grants[i] = g
		cmps = append(cmps, a.memberCmps(res, states[i].gen, q.req.RequestID)...)
		then = append(then, a.memberOps(res, g.Generation, epoch, q.req.Owner, q.req.RequestID, string(holderVal), string(reqVal), q.lease)...)
	}
	var resp *clientv3.TxnResponse
	// Re-sent after a lost answer as Acquire's: the request records make a
	// later copy fail and read them back (duplicate).
	err := a.call(ctx, "group grant transaction", q.attempt(), func(rctx context.Context) (err error) {
		resp, err = a.kv.Txn(rctx).If(cmps...).Then(then...).Else(q.groupReads(members, states)...).Commit()
		return err
	})
	switch {
	case isLeaseNotFound(err):
		q.lease = 0
		return nil, states, nil
	case errors.Is(err, fencepub.ErrUnavailable):
		q.keepLease = true
		return nil, nil, fmt.Errorf("%w; the group grant transaction's outcome is unknown: retry with request id %q", err, q.req.RequestID)
	case err != nil:
		return nil, nil, err
	case !resp.Succeeded:
		q.keepLease = false
		next, err := q.parseGroup(resp.Header.Revision, resp.Responses, len(members))
		if err != nil {
			return nil, nil, err
		}
		for i, res := range members {
			if err := grantGap(res, states[i], next[i]); err != nil {
				return nil, nil, err
			}
			a.remember(res, counter{epoch: next[i].epoch, gen: next[i].gen})
		}
		return nil, next, nil
	}
	q.keepLease = true
	for i := range grants {
		grants[i].HolderRevision = resp.Header.Revision
		a.remember(grants[i].Resource, counter{epoch: epoch, gen: grants[i].Generation})
	}
	for _, g := range grants {
		if err := q.confirm(ctx, g, nil, true); err != nil {
			q.keepLease = errors.Is(err, fencepub.ErrUnavailable)
			return nil, nil, err
		}
	}
	for _, g := range grants {
		a.pruneMarkers(ctx, g)
	}
	return grants, nil, nil
}

// groupDuplicate answers a retried group request id from the members'
// request records, each as Acquire's duplicate does. They were written in
// one transaction, so a member without one means the id was used for
// another set of resources.
func (q *acquisition) groupDuplicate(ctx context.Context, members []string, states []resState) ([]Grant, error) {
	grants := make([]Grant, len(members))
	var errs []error
	for i, res := range members {
		if states[i].request == nil {
			return nil, fmt.Errorf("%w: request id %q got a grant of another member set (none of %q)",
				ErrRequestConflict, q.req.RequestID, res)
		}
		m := *q
		m.req.Resource = res
		g, err := m.duplicate(ctx, states[i])
		q.keepLease = q.keepLease || m.keepLease
		if err != nil && !errors.Is(err, ErrExpired) {
			return nil, err
		}
		grants[i], errs = g, append(errs, err)
	}
	return grants, errors.Join(errs...)
}

// ReleaseGroup seals every member's term as Release does, even one no
// longer held, then revokes the group's lease (DESIGN.md "Groups").
// Errors: fencepub.ErrInvalid (grants not of one lease and owner);
// ErrLeaseLost naming each member no longer held (joined); Release's.
func (a *Authority) ReleaseGroup(ctx context.Context, grants []Grant) error {
	if len(grants) == 0 {
		return fmt.Errorf("%w: authority: release of an empty group", fencepub.ErrInvalid)
	}
	for _, g := range grants {
		if err := checkGrant(g); err != nil {
			return err
		}
		if g.LeaseID != grants[0].LeaseID || g.Owner != grants[0].Owner {
			return fmt.Errorf("%w: authority: grants of %q and %q are not of one group (lease or owner differ)",
				fencepub.ErrInvalid, grants[0].Resource, g.Resource)
		}
	}
	var lost []error
	for _, g := range grants {
		if err := a.endTerm(ctx, g); err != nil {
			if !errors.Is(err, ErrLeaseLost) {
				return err
			}
			lost = append(lost, err)
		}
	}
	if len(lost) < len(grants) {
		if err := a.revokeLease(ctx, grants[0].LeaseID); err != nil {
			return err
		}
	}
	return errors.Join(lost...)
}

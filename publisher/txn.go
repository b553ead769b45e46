package publisher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/retry"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// idempotentAttempts bounds the sends of a request that is safe to repeat
// (resource init, reads), each bounded by Config.RequestTimeout, after an
// error that is not etcd's "unavailable" (those are sent again until the
// deadline, see retry).
const idempotentAttempts = 3

// Indexes of the Else branch's reads in a publish transaction.
const (
	elseOp = iota
	elsePointer
	elseSeal
	elseEpoch
	elseGrant
	elseHolder // strict mode only
)

// Indexes in a publish transaction's compares and Then writes of what is
// the operation's rather than the member's: a group publish (group.go)
// shares one op record and one epoch compare among its members.
const (
	cmpOp       = 0
	cmpEpoch    = 3
	thenPointer = 0 // the pointer's put: the value a chained base compares (pipeline.go)
	thenOp      = 1
)

// prepared is one publish transaction, built once: every re-send carries the
// same version, object key, digest and commit time, so it can apply at most
// once (the op record is created by the first apply and compared absent).
type prepared struct {
	term    Term
	version layout.Version
	key     string // idempotency key
	digest  string
	object  layout.Object
	pointer layout.Pointer // what Then writes
	base    *base          // a dataset publish's base, compared exactly; nil for none

	cmps []clientv3.Cmp
	then []clientv3.Op
	els  []clientv3.Op
}

// prepare builds the publish transaction of DESIGN.md "Publish" step 2.
// If: op record absent, pointer < v, seal < v, epoch == v.Epoch, grant
// record == GrantRecordValue(epoch, owner) [, strict: holder unchanged].
// Then: pointer, op record, history entry. Else: read all of them.
func (c *Client) prepare(t Term, v layout.Version, key, digest string, obj layout.Object, contentType string) *prepared {
	ns, res := c.ns, t.resource
	now := c.cfg.now().UTC()
	ptr := layout.Pointer{
		Version: v, Object: obj, IdempotencyKey: key, Digest: digest,
		ContentType: contentType, Owner: t.owner, CommittedAt: now,
	}
	rec := layout.OpRecord{Digest: digest, Version: v, ObjectKey: obj.Key, Owner: t.owner}
	// The compact encoders cannot fail.
	ptrVal, _ := layout.EncodePointer(ptr)
	opVal, _ := layout.EncodeOp(ns.OpKey(res, key), rec)
	enc := layout.EncodeVersion(v)
	pr := &prepared{term: t, version: v, key: key, digest: digest, object: obj, pointer: ptr}
	pr.cmps = []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(ns.OpKey(res, key)), "=", 0),
		clientv3.Compare(clientv3.Value(ns.PointerKey(res)), "<", enc),
		clientv3.Compare(clientv3.Value(ns.SealKey(res)), "<", enc),
		clientv3.Compare(clientv3.Value(ns.EpochKey()), "=", layout.EncodeNumber(v.Epoch)),
		clientv3.Compare(clientv3.Value(ns.GrantKey(res, v.Fence)), "=", layout.GrantRecordValue(v.Epoch, t.owner)),
	}
	pr.then = []clientv3.Op{
		clientv3.OpPut(ns.PointerKey(res), ptrVal),
		clientv3.OpPut(ns.OpKey(res, key), opVal),
		clientv3.OpPut(ns.HistoryKey(res, v), ptrVal),
	}
	pr.els = []clientv3.Op{
		clientv3.OpGet(ns.OpKey(res, key)),
		clientv3.OpGet(ns.PointerKey(res)),
		clientv3.OpGet(ns.SealKey(res)),
		clientv3.OpGet(ns.EpochKey()),
		clientv3.OpGet(ns.GrantKey(res, v.Fence)),
	}
	if t.strict {
		pr.cmps = append(pr.cmps, t.holderCmp(ns))
		pr.els = append(pr.els, clientv3.OpGet(ns.HolderKey(res)))
	}
	if p, ok := prev(v); ok && t.contiguous {
		// With pointer < v above: the pointer value sorts above p's encoding
		// exactly when its version is at least p, so its version is p.
		pr.cmps = append(pr.cmps, clientv3.Compare(clientv3.Value(ns.PointerKey(res)), ">", layout.EncodeVersion(p)))
	}
	return pr
}

// send makes one attempt, bounded by Config.RequestTimeout and, in strict
// mode, by a third of the grant's TTL (Term.ttl): an attempt stuck on a
// stalled member then leaves time to re-send to another before the lease
// can expire, as the authority bounds its own attempts (DESIGN.md
// invariant 12).
func (c *Client) send(ctx context.Context, pr *prepared) (*clientv3.TxnResponse, error) {
	limit := c.cfg.RequestTimeout
	if pr.term.strict && pr.term.ttl > 0 {
		limit = min(limit, pr.term.ttl/3)
	}
	actx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return c.kv.Txn(actx).If(pr.cmps...).Then(pr.then...).Else(pr.els...).Commit()
}

// commit sends pr and classifies the answer. A first send that etcd
// refused before applying it (retry.EtcdNotApplied) is a definite failure.
// Any other failure may have reached etcd and makes the outcome ambiguous;
// pr is then re-sent, unchanged, with jittered backoff (retry.Do) until an
// answer or the deadline (ctx's, or ResendTimeout), and at the deadline the
// outcome is unknown (DESIGN.md "Publish" step 3). A contiguous-mode gap
// refusal of a re-send is unknown at once: the earlier send may still be on
// its way and apply once seq-1 is published. So is a re-send that finds the
// resource or the domain's epoch gone (fencepub.ErrNotInitialized): etcd
// was restored or replaced since an earlier send, which may have applied.
func (c *Client) commit(ctx context.Context, pr *prepared) (Result, error) {
	if err := ctx.Err(); err != nil {
		c.m.failure("txn")
		return Result{}, fmt.Errorf("publisher: publish of %s not sent: %w", pr.version, err)
	}
	start := time.Now()
	resp, attempt, err := c.resend(ctx, func(ctx context.Context) (*clientv3.TxnResponse, error) { return c.send(ctx, pr) },
		"resource", pr.term.resource, "version", pr.version.String(), "key", pr.key)
	resendable := func(err error) bool { return ambiguous(attempt, err) }
	switch {
	case err == nil:
		res, err := c.classify(pr, resp)
		if attempt > 1 && errors.Is(err, fencepub.ErrNotInitialized) {
			// The resource is gone since an earlier send: etcd was restored
			// or replaced, and that send may have applied before it was.
			return c.unknown(pr, start, attempt, fmt.Errorf("a re-send found %w; an earlier send may have applied before etcd was restored or replaced", err))
		}
		if res.Outcome == Duplicate {
			res.Object = c.recordedObject(ctx, pr.term.resource, res.Version, res.Object)
		}
		if attempt == 1 || res.Outcome != Stale || res.Reason != ReasonGap {
			res.Attempts = attempt
			c.answered(start, attempt, res.Outcome, res.Reason)
			return res, err
		}
		// Unlike the pointer, seal and epoch, the gap can close: an earlier
		// send still on its way can then apply. Not wrapped: the outcome is
		// unknown, not stale.
		err = fmt.Errorf("a re-send was refused (%v), but an earlier send may still apply once the gap closes", err)
		return c.unknown(pr, start, attempt, err)
	case attempt == 0:
		c.m.failure("txn")
		return Result{}, fmt.Errorf("publisher: publish of %s not sent: %w", pr.version, err)
	case !resendable(err):
		c.m.failure("txn")
		return Result{}, fmt.Errorf("publisher: etcd refused the publish transaction of %s (not applied): %w", pr.version, err)
	}
	return c.unknown(pr, start, attempt, err)
}

// answered counts a transaction answered after attempt sends since start
// with outcome o and reason r; no outcome counts as a classify failure.
func (c *Client) answered(start time.Time, attempt int, o Outcome, r Reason) {
	c.m.txnDone(time.Since(start), attempt)
	if o != "" {
		c.m.outcome(o, r)
	} else {
		c.m.failure("classify")
	}
}

// ambiguous reports whether err, the last error of attempt sends of one
// transaction, leaves its outcome open: once a send went unanswered, every
// later error is ambiguous too (that send may still apply); a first send
// etcd refused before applying it is not.
func ambiguous(attempt int, err error) bool { return attempt > 1 || !retry.EtcdNotApplied(err) }

// resend sends one transaction with send, unchanged, with jittered backoff
// (retry.Do) while its failure is ambiguous, until an answer or ctx's
// deadline (Config.ResendTimeout when ctx has none). It returns the
// answer, the number of sends and the last error; logArgs name the
// transaction in the warning of each unanswered send.
func (c *Client) resend(ctx context.Context, send func(context.Context) (*clientv3.TxnResponse, error), logArgs ...any) (*clientv3.TxnResponse, int, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.ResendTimeout)
		defer cancel()
	}
	var (
		attempt int
		resp    *clientv3.TxnResponse
	)
	err := retry.Do(ctx, func(ctx context.Context) error {
		attempt++
		var err error
		if resp, err = send(ctx); err != nil && ambiguous(attempt, err) {
			c.log.Warn("publish transaction unanswered; re-sending the same transaction", append(logArgs, "attempt", attempt, "err", err)...)
		}
		return err
	}, func(err error) bool { return ambiguous(attempt, err) })
	return resp, attempt, err
}

// notApplied reports whether commit's answer (res, err) means that the
// transaction did not apply and never will, with no outcome: it was never
// sent (ctx ended first), etcd refused it before applying it
// (retry.EtcdNotApplied), or its one send was answered by the Else branch
// with an error (a record that does not decode, a resource not
// initialised). Unknown and every outcome (stale and conflict included,
// which spend their seq) are not; nor is an error after a re-send, since an
// earlier send may still be on its way.
func notApplied(res Result, err error) bool {
	return err != nil && res.Outcome == "" && res.Attempts <= 1
}

// unknown is commit's Unknown result after attempt sends, the last of which
// failed with last.
func (c *Client) unknown(pr *prepared, start time.Time, attempt int, last error) (Result, error) {
	c.m.txnDone(time.Since(start), attempt)
	c.m.outcome(Unknown, reasonNone)
	res := pr.result(Unknown, reasonNone)
	res.Attempts = attempt
	return res, fmt.Errorf("%w: resource %q, key %q, version %s: %d sends, last error: %w",
		ErrUnknown, pr.term.resource, pr.key, pr.version, attempt, last)
}

// recordedObject returns obj, the object of res's op record at version v,
// in full: as it is when it has more than its key (the pointer's), else
// from the history entry of v (one read, bounded by RequestTimeout). When
// the entry is gone (GC pruned it) or the read fails, obj names the object
// by key only; the outcome does not depend on it.
func (c *Client) recordedObject(ctx context.Context, res string, v layout.Version, obj layout.Object) layout.Object {
	if obj != (layout.Object{Key: obj.Key}) {
		return obj
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := c.kv.Get(rctx, c.ns.HistoryKey(res, v))
	if err != nil || len(resp.Kvs) == 0 {
		return obj
	}
	if e, err := layout.DecodePointer(resp.Kvs[0].Value); err == nil && e.Version == v && e.Object.Key == obj.Key {
		return e.Object
	}
	return obj
}

// result is a Result about pr's own attempt.
func (pr *prepared) result(o Outcome, r Reason) Result {
	return Result{
		Outcome: o, Reason: r, Resource: pr.term.resource, IdempotencyKey: pr.key, Digest: pr.digest,
		Version: pr.version, Object: pr.object,
		Attempt: &Attempt{Version: pr.version, Object: pr.object},
	}
}

// kv returns the single key-value of a range response, or nil.
func kv(r *clientv3.TxnResponse, i int) *mvccpb.KeyValue {
	if i >= len(r.Responses) {
		return nil
	}
	rr := r.Responses[i].GetResponseRange()
	if rr == nil || len(rr.Kvs) == 0 {
		return nil
	}
	return rr.Kvs[0]
}

// classify turns a transaction response into a Result, in the order of
// DESIGN.md "Publish" step 2: op record (a re-send of our own applied
// attempt is applied; same digest is duplicate; another is conflict), then
// strict-mode lease loss, then stale by pointer, seal, epoch, grant, and in
// contiguous mode gap. So a lost response is never reported as stale.
func (c *Client) classify(pr *prepared, resp *clientv3.TxnResponse) (Result, error) {
	res := pr.result(Applied, reasonNone)
	res.Revision = resp.Header.Revision
	if resp.Succeeded {
		ptr := pr.pointer
		res.Pointer = &ptr
		return res, nil
	}
	t, v := pr.term, pr.version
	if op := kv(resp, elseOp); op != nil {
		rec, err := layout.DecodeOp(op.Key, op.Value)
		if err != nil {
			return Result{}, fmt.Errorf("publisher: op record %q of %q: %w", pr.key, t.resource, err)
		}
		if p := kv(resp, elsePointer); p != nil {
			if ptr, err := layout.DecodePointer(p.Value); err == nil {
				res.Pointer = &ptr
			}
		}
		switch {
		case rec.Digest != pr.digest:
			res.Outcome = Conflict
			return res, fmt.Errorf("%w: key %q of %q was applied at %s with digest %s; this request's digest is %s",
				ErrConflict, pr.key, t.resource, rec.Version, rec.Digest, pr.digest)
		case rec.Version == v && rec.ObjectKey == pr.object.Key:
			return res, nil // our own earlier send was applied
		default:
			res.Outcome, res.Version, res.Object = Duplicate, rec.Version, rec.Object(res.Pointer)
			return res, nil
		}
	}
	pkv, skv := kv(resp, elsePointer), kv(resp, elseSeal)
	if pkv == nil || skv == nil {
		return Result{}, fmt.Errorf("%w: resource %q has no pointer or seal", fencepub.ErrNotInitialized, t.resource)
	}
	ptr, err := layout.DecodePointer(pkv.Value)
	if err != nil {
		return Result{}, fmt.Errorf("publisher: pointer of %q: %w", t.resource, err)
	}
	seal, err := layout.DecodeSeal(skv.Value)
	if err != nil {
		return Result{}, fmt.Errorf("publisher: seal of %q: %w", t.resource, err)
	}
	res.Pointer = &ptr
	stale := func(r Reason, format string, args ...any) (Result, error) {
		res.Outcome, res.Reason = Stale, r
		return res, fmt.Errorf("%w (%s): resource %q, version %s: %s", ErrStale, r, t.resource, v, fmt.Sprintf(format, args...))
	}
	if t.strict {
		if h := kv(resp, elseHolder); h == nil || h.CreateRevision != t.holderRevision {
			res.Outcome, res.Reason = Stale, ReasonLease
			return res, fmt.Errorf("%w (%s): %w: the holder of %q created at revision %d is gone (lease expired, revoked or released)",
				ErrStale, ReasonLease, authority.ErrLeaseLost, t.resource, t.holderRevision)
		}
	}
	if ptr.Version.Compare(v) >= 0 {
		return stale(ReasonPointer, "the pointer is at %s", ptr.Version)
	}
	if seal.Version.Compare(v) >= 0 {
		return stale(ReasonSeal, "the seal is at %s", seal.Version)
	}
	ekv := kv(resp, elseEpoch)
	if ekv == nil {
		return Result{}, fmt.Errorf("%w: domain %q has no epoch (run the authority's init)", fencepub.ErrNotInitialized, c.ns.Domain)
	}
	if string(ekv.Value) != layout.EncodeNumber(v.Epoch) {
		current := string(ekv.Value)
		if e, err := layout.DecodeNumber(current); err == nil {
			current = strconv.FormatUint(e, 10)
		}
		return stale(ReasonEpoch, "the current epoch is %s, the version's %d", current, v.Epoch)
	}
	want := layout.GrantRecordValue(v.Epoch, t.owner)
	if g := kv(resp, elseGrant); g == nil || string(g.Value) != want {
		got := "has no grant record"
		if g != nil {
			got = fmt.Sprintf("has a grant record %q", g.Value)
			if e, owner, err := layout.ParseGrantRecord(string(g.Value)); err == nil {
				got = fmt.Sprintf("was granted to owner %q in epoch %d", owner, e)
			}
		}
		return stale(ReasonGrant, "fence %d %s; this publish needs it granted to owner %q in epoch %d", v.Fence, got, t.owner, v.Epoch)
	}
	if pr.base != nil && string(pkv.Value) != pr.base.value {
		return stale(ReasonBase, "%s", errBaseMoved(ptr.Version, pr.base))
	}
	if p, ok := prev(v); ok && t.contiguous && ptr.Version.Compare(p) < 0 {
		return stale(ReasonGap, "contiguous mode: the pointer is at %s, not at the previous seq %s", ptr.Version, p)
	}
	return Result{}, fmt.Errorf("%w: transaction of %s on %q (revision %d)", errAllMatch, v, t.resource, resp.Header.Revision)
}

// errAllMatch is classify's answer to a failed transaction whose compared
// values all match: a member of a group that another member failed, or a
// single publish that raced something classify does not read.
var errAllMatch = errors.New("publisher: the transaction failed but every compared value matches")

// retry runs fn, which must be safe to repeat, each attempt bounded by
// RequestTimeout (retry.Do, jittered backoff): after an answer that the
// cluster cannot serve it now or no answer in time (retry.EtcdUnavailable:
// a stalled member, a leader election) until ctx's deadline, or
// ResendTimeout when ctx has none (DESIGN.md invariant 12); after another
// error without a definite answer (not retry.EtcdNotApplied) up to
// idempotentAttempts times. The last error is wrapped in
// fencepub.ErrUnavailable unless ctx ended; when ctx's deadline ended the
// retries of an unavailable etcd, the error wraps both.
func (c *Client) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	rctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, c.cfg.ResendTimeout)
		defer cancel()
	}
	attempt, unavailable := 0, false
	err := retry.Do(rctx, func(rctx context.Context) error {
		attempt++
		actx, cancel := context.WithTimeout(rctx, c.cfg.RequestTimeout)
		defer cancel()
		err := fn(actx)
		unavailable = unavailable || ctx.Err() == nil && retry.EtcdUnavailable(err)
		return err
	}, func(err error) bool {
		return retry.EtcdUnavailable(err) || attempt < idempotentAttempts && !retry.EtcdNotApplied(err)
	})
	switch {
	case err == nil || retry.EtcdNotApplied(err):
		return err
	case unavailable && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: %s: retried until the caller's deadline: %w", fencepub.ErrUnavailable, what, context.Cause(ctx))
	case ctx.Err() != nil:
		return fmt.Errorf("publisher: %s: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %w", fencepub.ErrUnavailable, what, err)
}

// initResource creates res's pointer and seal with zero versions in one
// transaction if both are absent (DESIGN.md "etcd layout"), else reads them.
// It returns the pointer and the seal's version. Safe to repeat.
func (c *Client) initResource(ctx context.Context, res string) (layout.Pointer, layout.Version, error) {
	resp, err := c.createResource(ctx, res)
	if err != nil || resp.Succeeded {
		return layout.Pointer{}, layout.Version{}, err
	}
	pkv, skv := kv(resp, 0), kv(resp, 1)
	ptr, err := layout.DecodePointer(pkv.Value)
	if err != nil {
		return layout.Pointer{}, layout.Version{}, fmt.Errorf("publisher: pointer of %q: %w", res, err)
	}
	seal, err := layout.DecodeSeal(skv.Value)
	if err != nil {
		return layout.Pointer{}, layout.Version{}, fmt.Errorf("publisher: seal of %q: %w", res, err)
	}
	return ptr, seal.Version, nil
}

// createResource runs initResource's transaction without decoding what it
// read: when it did not create the keys, its response holds the pointer (0)
// and the seal (1), both present. Errors: fencepub.ErrUnavailable, ctx's
// error, layout.ErrCorruptRecord when only one of the two keys exists.
func (c *Client) createResource(ctx context.Context, res string) (*clientv3.TxnResponse, error) {
	pk, sk := c.ns.PointerKey(res), c.ns.SealKey(res)
	zeroPtr, _ := layout.EncodePointer(layout.Pointer{})
	zeroSeal, _ := layout.EncodeSeal(layout.Seal{})
	var resp *clientv3.TxnResponse
	err := c.retry(ctx, "init resource "+res, func(ctx context.Context) error {
		var err error
		resp, err = c.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(pk), "=", 0), clientv3.Compare(clientv3.CreateRevision(sk), "=", 0)).
			Then(clientv3.OpPut(pk, zeroPtr), clientv3.OpPut(sk, zeroSeal)).
			Else(clientv3.OpGet(pk), clientv3.OpGet(sk)).
			Commit()
		return err
	})
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded && (kv(resp, 0) == nil || kv(resp, 1) == nil) {
		return nil, fmt.Errorf("%w: resource %q has a pointer or a seal but not both", layout.ErrCorruptRecord, res)
	}
	return resp, nil
}

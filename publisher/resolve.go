package publisher

import (
	"context"
	"fmt"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Resolve settles the outcome of a publish of key at version v on resource
// (after ErrUnknown) in one etcd transaction (DESIGN.md invariant 8):
//
//   - the op record of key exists at version v: Applied (nil error);
//   - it exists at another version: Duplicate (nil error) with the version
//     and object that applied the operation; the attempt at v never will;
//   - it is absent: the seal is raised to v unless it is already at or above
//     it, in the same transaction that saw the record absent. The attempt is
//     then definitely not applied and never will be: Stale with reason
//     "seal", returned with ErrStale.
//
// Result.Digest is the op record's digest when one exists; a caller holding
// its own digest compares it to tell a duplicate from a conflict. Pass the
// exact version of the unknown attempt: Resolve seals every version up to v,
// so a version from the future would block that fence's later seqs.
//
// Resolve is safe to repeat and re-sends its transaction until an answer or
// the deadline (ctx's, or Config.ResendTimeout); then ErrUnavailable.
// Errors: ErrInvalid, ErrUnavailable, layout.ErrCorruptRecord.
func (c *Client) Resolve(ctx context.Context, resource, key string, v layout.Version) (Result, error) {
	if err := layout.ValidateResource(resource, false); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := layout.ValidateKey("idempotency key", key); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if v.Epoch == 0 || v.Fence == 0 || v.Seq == 0 || v.Validate() != nil {
		return Result{}, fmt.Errorf("%w: version %s: epoch, fence and seq must be in 1..%d", ErrInvalid, v, layout.MaxNumber)
	}
	if _, _, err := c.initResource(ctx, resource); err != nil {
		return Result{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.ResendTimeout)
		defer cancel()
	}
	ns := c.ns
	opKey, sealKey, ptrKey := ns.OpKey(resource, key), ns.SealKey(resource), ns.PointerKey(resource)
	sealVal, _ := layout.EncodeSeal(layout.Seal{Version: v, Reason: "resolve " + key, At: time.Now().UTC()})
	var (
		resp    *clientv3.TxnResponse
		err     error
		attempt int
	)
	for {
		attempt++
		actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		resp, err = c.cfg.Etcd.Txn(actx).
			If(clientv3.Compare(clientv3.CreateRevision(opKey), "=", 0), clientv3.Compare(clientv3.Value(sealKey), "<", v.Encode())).
			Then(clientv3.OpPut(sealKey, sealVal), clientv3.OpGet(ptrKey)).
			Else(clientv3.OpGet(opKey), clientv3.OpGet(sealKey), clientv3.OpGet(ptrKey)).
			Commit()
		cancel()
		if err == nil || definite(err) || ctx.Err() != nil || !sleep(ctx, backoff(attempt)) {
			break
		}
	}
	if err != nil {
		return Result{}, fmt.Errorf("%w: resolve %q of %q at %s after %d sends: %w", ErrUnavailable, key, resource, v, attempt, err)
	}
	res := Result{Resource: resource, IdempotencyKey: key, Version: v, Revision: resp.Header.Revision, Attempts: attempt}
	ptrIdx := 2
	if resp.Succeeded {
		ptrIdx = 1
	}
	if p := kv(resp, ptrIdx); p != nil {
		ptr, err := layout.DecodePointer(p.Value)
		if err != nil {
			return Result{}, fmt.Errorf("publisher: pointer of %q: %w", resource, err)
		}
		res.Pointer = &ptr
	}
	stale := func(seal layout.Version) (Result, error) {
		res.Outcome, res.Reason = Stale, ReasonSeal
		c.m.resolved(Stale)
		return res, fmt.Errorf("%w (%s): %q of %q at %s was not applied and never will be: the seal is at %s",
			ErrStale, ReasonSeal, key, resource, v, seal)
	}
	if resp.Succeeded {
		return stale(v)
	}
	if op := kv(resp, 0); op != nil {
		rec, err := layout.DecodeOp(op.Value)
		if err != nil {
			return Result{}, fmt.Errorf("publisher: op record %q of %q: %w", key, resource, err)
		}
		res.Outcome, res.Digest, res.Version, res.Object = Applied, rec.Digest, rec.Version, rec.Object
		if rec.Version != v {
			res.Outcome = Duplicate
		}
		c.m.resolved(res.Outcome)
		return res, nil
	}
	skv := kv(resp, 1)
	if skv == nil {
		return Result{}, fmt.Errorf("%w: resource %q has no seal", ErrNotInitialized, resource)
	}
	seal, err := layout.DecodeSeal(skv.Value)
	if err != nil {
		return Result{}, fmt.Errorf("publisher: seal of %q: %w", resource, err)
	}
	return stale(seal.Version)
}

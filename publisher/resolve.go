package publisher

import (
	"context"
	"fmt"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/wait"
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
//     "seal", returned with ErrStale;
//   - it is absent and v's epoch is older than the domain's: no publish of v
//     can apply any more (the publish transaction requires the current
//     epoch): Stale with reason "epoch", returned with ErrStale.
//
// The same transaction requires that v could have been carried by a real
// publish: v.Epoch at most the domain's current epoch and v.Fence at most
// the resource's durable generation. Otherwise nothing is written and
// Resolve returns ErrInvalid: sealing a version of a future epoch or of a
// fence never granted would refuse every later grant's publishes, for good
// (the seal never goes down). Pass the exact version of the unknown
// attempt: Resolve seals every version up to v, so a seq from the future
// would still block that fence's later seqs.
//
// Result.Digest is the op record's digest when one exists; a caller holding
// its own digest compares it to tell a duplicate from a conflict.
//
// Resolve is safe to repeat and re-sends its transaction until an answer or
// the deadline (ctx's, or Config.ResendTimeout); then ErrUnavailable.
// Errors: ErrInvalid, ErrUnavailable, ErrNotInitialized,
// layout.ErrCorruptRecord.
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
	if _, err := c.createResource(ctx, resource); err != nil { // a corrupt pointer must not stop Resolve
		return Result{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.ResendTimeout)
		defer cancel()
	}
	ns := c.ns
	opKey, sealKey, ptrKey := ns.OpKey(resource, key), ns.SealKey(resource), ns.PointerKey(resource)
	epochKey, genKey := ns.EpochKey(), ns.GenerationKey(resource)
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
			If(
				clientv3.Compare(clientv3.CreateRevision(opKey), "=", 0),
				clientv3.Compare(clientv3.Value(sealKey), "<", v.Encode()),
				// epoch >= v.Epoch and generation >= v.Fence: fixed-width
				// numbers compare byte-wise, and etcd has no ">=".
				clientv3.Compare(clientv3.Value(epochKey), ">", layout.EncodeNumber(v.Epoch-1)),
				clientv3.Compare(clientv3.Value(genKey), ">", layout.EncodeNumber(v.Fence-1)),
			).
			Then(clientv3.OpPut(sealKey, sealVal), clientv3.OpGet(ptrKey)).
			Else(clientv3.OpGet(opKey), clientv3.OpGet(sealKey), clientv3.OpGet(ptrKey), clientv3.OpGet(epochKey), clientv3.OpGet(genKey)).
			Commit()
		cancel()
		if err == nil || definite(err) || ctx.Err() != nil || !wait.Sleep(ctx, backoff(attempt)) {
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
	// The pointer is informative here: a corrupt one must not hide the
	// answer the transaction settled (the seal may just have been raised).
	if p := kv(resp, ptrIdx); p != nil {
		if ptr, err := layout.DecodePointer(p.Value); err == nil {
			res.Pointer = &ptr
		} else {
			c.log.Warn("resolve: the resource's pointer does not decode", "resource", resource, "err", err)
		}
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
	if !seal.Version.Less(v) {
		return stale(seal.Version)
	}
	return c.resolveRefused(res, resp, v)
}

// resolveRefused classifies a Resolve transaction that found no op record
// and the seal below v but failed its epoch or generation compare (Else
// reads 3 and 4): v's epoch is older than the domain's (stale, reason epoch:
// the publish transaction requires the current epoch, which only rises), or
// v could not have been carried by any publish (ErrInvalid).
func (c *Client) resolveRefused(res Result, resp *clientv3.TxnResponse, v layout.Version) (Result, error) {
	ekv := kv(resp, 3)
	if ekv == nil {
		return Result{}, fmt.Errorf("%w: domain %q has no epoch (run the authority's init)", ErrNotInitialized, c.ns.Domain)
	}
	epoch, err := layout.DecodeNumber(string(ekv.Value))
	if err != nil {
		return Result{}, fmt.Errorf("%w: epoch key: %w", layout.ErrCorruptRecord, err)
	}
	switch {
	case v.Epoch > epoch:
		return Result{}, fmt.Errorf("%w: version %s: epoch %d is above the domain's current epoch %d; no publish carries it (nothing sealed)",
			ErrInvalid, v, v.Epoch, epoch)
	case v.Epoch < epoch:
		res.Outcome, res.Reason = Stale, ReasonEpoch
		c.m.resolved(Stale)
		return res, fmt.Errorf("%w (%s): %q of %q at %s was not applied and never will be: the domain is at epoch %d",
			ErrStale, ReasonEpoch, res.IdempotencyKey, res.Resource, v, epoch)
	}
	var gen uint64
	if gkv := kv(resp, 4); gkv != nil {
		if gen, err = layout.DecodeNumber(string(gkv.Value)); err != nil {
			return Result{}, fmt.Errorf("%w: generation of %q: %w", layout.ErrCorruptRecord, res.Resource, err)
		}
	}
	if v.Fence > gen {
		return Result{}, fmt.Errorf("%w: version %s: fence %d of %q was never granted (its generation is %d); no publish carries it (nothing sealed)",
			ErrInvalid, v, v.Fence, res.Resource, gen)
	}
	return Result{}, fmt.Errorf("publisher: resolve of %s on %q failed but every compared value matches (revision %d)",
		v, res.Resource, resp.Header.Revision)
}

package publisher

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/retry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// AttemptID names the one publish attempt that Resolve settles (DESIGN.md
// invariant 11): its request digest, its object key, or both. An unknown
// Result carries both (Result.Digest and Result.Object.Key).
type AttemptID struct {
	// Digest is the attempt's request digest: 64 lowercase hex digits of
	// sha256 over body, content type and metadata (Result.Digest), not the
	// body's own sha256.
	Digest string `json:"digest,omitempty"`
	// ObjectKey is the key of the object the attempt wrote; it names the
	// resource and the version Resolve is given.
	ObjectKey string `json:"object_key,omitempty"`
}

// AttemptID returns the identity of the attempt r reports, for Resolve:
// the request digest and the object this call wrote (Result.Attempt when
// set, else Result.Object).
func (r Result) AttemptID() AttemptID {
	obj := r.Object
	if r.Attempt != nil {
		obj = r.Attempt.Object
	}
	return AttemptID{Digest: r.Digest, ObjectKey: obj.Key}
}

// validate checks that id names an attempt of resource at v. Errors:
// fencepub.ErrInvalid.
func (id AttemptID) validate(ns layout.Namespace, resource string, v layout.Version) error {
	if id.Digest == "" && id.ObjectKey == "" {
		return fmt.Errorf("%w: cannot tell which attempt: give its request digest or object key", fencepub.ErrInvalid)
	}
	if id.Digest != "" {
		if b, err := hex.DecodeString(id.Digest); err != nil || len(b) != 32 || hex.EncodeToString(b) != id.Digest {
			return fmt.Errorf("%w: request digest %.80q: want 64 lowercase hex digits", fencepub.ErrInvalid, id.Digest)
		}
	}
	if id.ObjectKey != "" {
		if ov, _, ok := ns.ParseObjectKey(resource, id.ObjectKey); !ok || ov != v {
			return fmt.Errorf("%w: object key %.200q is not an attempt's object of %q at %s", fencepub.ErrInvalid, id.ObjectKey, resource, v)
		}
	}
	return nil
}

// String names id in messages.
func (id AttemptID) String() string {
	switch {
	case id.ObjectKey == "":
		return "digest " + id.Digest
	case id.Digest == "":
		return "object " + id.ObjectKey
	}
	return "digest " + id.Digest + ", object " + id.ObjectKey
}

// Resolve settles the outcome of the publish attempt id of key at version v
// on resource, after ErrUnknown, in one etcd transaction (DESIGN.md
// invariants 8 and 11, "Publish" step 3; the package doc, "Resolving an
// attempt"). It returns Applied or Duplicate (nil error), Conflict with
// ErrConflict, or Stale with ErrStale (reason "seal" or "epoch"). Pass the
// exact version of the attempt. It is safe to repeat and re-sends until an
// answer or the deadline (ctx's, or Config.ResendTimeout). Errors:
// fencepub.ErrInvalid, ErrConflict, ErrStale, fencepub.ErrUnavailable,
// fencepub.ErrNotInitialized, fencepub.ErrCorruptRecord.
func (c *Client) Resolve(ctx context.Context, resource, key string, v fencepub.Version, id AttemptID) (Result, error) {
	if err := layout.ValidateResource(resource, false); err != nil {
		return Result{}, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	if err := layout.ValidateKey("idempotency key", key); err != nil {
		return Result{}, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	if v.Epoch == 0 || v.Fence == 0 || v.Seq == 0 || v.Validate() != nil {
		return Result{}, fmt.Errorf("%w: version %s: epoch, fence and seq must be in 1..%d", fencepub.ErrInvalid, v, layout.MaxNumber)
	}
	if err := id.validate(c.ns, resource, v); err != nil {
		return Result{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.ResendTimeout)
		defer cancel()
	}
	r := resolution{resource: resource, key: key, v: v, id: id}
	var res Result
	err := retry.Do(ctx, func(ctx context.Context) error {
		// A corrupt pointer must not stop Resolve: it is only read here.
		init, err := c.createResource(ctx, resource)
		if err != nil {
			return err
		}
		r.plan(init)
		var again bool
		if res, again, err = c.resolveOnce(ctx, &r); again {
			return errReplan
		}
		return err
	}, func(err error) bool { return errors.Is(err, errReplan) })
	if errors.Is(err, errReplan) {
		return Result{}, fmt.Errorf("%w: resolve %q of %q at %s: the resource kept changing: %w", fencepub.ErrUnavailable, key, resource, v, ctx.Err())
	}
	if res.Outcome == Stale {
		if merr := c.markSettled(ctx, resource, key, v, res.Reason); merr != nil {
			kind := fencepub.ErrUnavailable
			if errors.Is(merr, fencepub.ErrInvalid) { // the store refused it: fix its configuration first
				kind = fencepub.ErrInvalid
			}
			return res, fmt.Errorf("%w: %q of %q at %s is settled in etcd (not applied, reason %s), but its marker in the bucket was not written: %w; resolve it again, or a recover from the bucket could republish it",
				kind, key, resource, v, res.Reason, merr)
		}
	}
	return res, err
}

// settledMarker is the body of a settled marker (layout.SettledMarker):
// informative, for an operator reading the bucket.
type settledMarker struct {
	IdempotencyKey string `json:"idempotency_key"`
	Reason         Reason `json:"reason"`
}

// markSettled records in the bucket, with one create-only PUT after etcd
// settled it, that the attempt at v of resource was never applied: etcd's
// seal is lost with etcd, and RestoreLost must still never republish it
// (DESIGN.md invariant 8). An existing marker is the same fact written by
// an earlier Resolve. Errors: the store's.
func (c *Client) markSettled(ctx context.Context, resource, key string, v layout.Version, reason Reason) error {
	body, err := json.Marshal(settledMarker{IdempotencyKey: key, Reason: reason})
	if err != nil {
		return err
	}
	return retry.Do(ctx, func(ctx context.Context) error {
		_, err := objstore.PutSmallCreateOnly(ctx, c.cfg.Store, c.ns.SettledMarker(resource, v), body, "application/json")
		if errors.Is(err, objstore.ErrExists) {
			return nil
		}
		return err
	}, func(err error) bool { return retry.StoreUnavailable(err) || retry.StoreConflict(err) })
}

// errReplan is resolveOnce's "the pointer or seal changed since the
// transaction was planned": Resolve reads and plans again.
var errReplan = errors.New("publisher: resolve: the pointer or seal changed; plan again")

// resolution is one Resolve call: the attempt, and the seal its
// transaction writes, planned from the pointer and seal read before it.
type resolution struct {
	resource, key string
	v             layout.Version
	id            AttemptID
	sealVal       string
	// guard, when set, requires the pointer and the seal at these
	// ModRevisions: the planned seal keeps a decommission's reason, which
	// is right only while they are unchanged.
	guard           bool
	ptrMod, sealMod int64
}

// plan sets the seal r's transaction writes from init, the resource-init
// transaction's response (createResource).
func (r *resolution) plan(init *clientv3.TxnResponse) {
	seal := layout.Seal{Version: r.v, Reason: "resolve " + r.key, At: time.Now().UTC()}
	r.guard = false
	if !init.Succeeded {
		pkv, skv := kv(init, 0), kv(init, 1)
		if cur, err := layout.DecodeSeal(skv.Value); err == nil { // a corrupt seal fails the transaction's compare or is replaced
			ptr, _ := layout.DecodePointer(pkv.Value) // a corrupt pointer counts as the zero version
			seal = cur.RaisedTo(r.v, seal.Reason, seal.At, ptr.Version)
			r.guard, r.ptrMod, r.sealMod = cur.Retires(ptr.Version), pkv.ModRevision, skv.ModRevision
		}
	}
	r.sealVal, _ = layout.EncodeSeal(seal)
}

// resolveOnce sends r's transaction until an answer or ctx's end and
// classifies it. again is true when the guard failed: the pointer or seal
// changed since r was planned, and Resolve must read and plan again.
func (c *Client) resolveOnce(ctx context.Context, r *resolution) (res Result, again bool, err error) {
	ns, v, key, resource := c.ns, r.v, r.key, r.resource
	opKey, sealKey, ptrKey := ns.OpKey(resource, key), ns.SealKey(resource), ns.PointerKey(resource)
	epochKey, genKey := ns.EpochKey(), ns.GenerationKey(resource)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(opKey), "=", 0),
		clientv3.Compare(clientv3.Value(sealKey), "<", layout.EncodeVersion(v)),
		// epoch >= v.Epoch and generation >= v.Fence: fixed-width
		// numbers compare byte-wise, and etcd has no ">=".
		clientv3.Compare(clientv3.Value(epochKey), ">", layout.EncodeNumber(v.Epoch-1)),
		clientv3.Compare(clientv3.Value(genKey), ">", layout.EncodeNumber(v.Fence-1)),
	}
	if r.guard {
		cmps = append(cmps,
			clientv3.Compare(clientv3.ModRevision(ptrKey), "=", r.ptrMod),
			clientv3.Compare(clientv3.ModRevision(sealKey), "=", r.sealMod))
	}
	var (
		resp    *clientv3.TxnResponse
		attempt int
	)
	// The transaction is safe to repeat: it is re-sent unchanged until an
	// answer, a definite refusal or ctx's end.
	err = retry.Do(ctx, func(ctx context.Context) error {
		attempt++
		actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
		var err error
		resp, err = c.kv.Txn(actx).
			If(cmps...).
			Then(clientv3.OpPut(sealKey, r.sealVal), clientv3.OpGet(ptrKey)).
			Else(clientv3.OpGet(opKey), clientv3.OpGet(sealKey), clientv3.OpGet(ptrKey), clientv3.OpGet(epochKey), clientv3.OpGet(genKey)).
			Commit()
		return err
	}, func(err error) bool { return !retry.EtcdNotApplied(err) })
	if err != nil {
		return Result{}, false, fmt.Errorf("%w: resolve %q of %q at %s after %d sends: %w", fencepub.ErrUnavailable, key, resource, v, attempt, err)
	}
	res = Result{Resource: resource, IdempotencyKey: key, Version: v, Revision: resp.Header.Revision, Attempts: attempt}
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
	stale := func(seal layout.Version) (Result, bool, error) {
		res.Outcome, res.Reason = Stale, ReasonSeal
		c.m.resolved(Stale)
		return res, false, fmt.Errorf("%w (%s): %q of %q at %s was not applied and never will be: the seal is at %s",
			ErrStale, ReasonSeal, key, resource, v, seal)
	}
	if resp.Succeeded {
		return stale(v)
	}
	if op := kv(resp, 0); op != nil {
		rec, err := layout.DecodeOp(op.Key, op.Value)
		if err != nil {
			return Result{}, false, fmt.Errorf("publisher: op record %q of %q: %w", key, resource, err)
		}
		res, err = c.resolveApplied(res, rec, r.id)
		res.Object = c.recordedObject(ctx, resource, res.Version, res.Object)
		return res, false, err
	}
	skv := kv(resp, 1)
	if skv == nil {
		return Result{}, false, fmt.Errorf("%w: resource %q has no seal", fencepub.ErrNotInitialized, resource)
	}
	seal, err := layout.DecodeSeal(skv.Value)
	if err != nil {
		return Result{}, false, fmt.Errorf("publisher: seal of %q: %w", resource, err)
	}
	if seal.Version.Compare(v) >= 0 {
		return stale(seal.Version)
	}
	if pkv := kv(resp, 2); r.guard && (skv.ModRevision != r.sealMod || pkv == nil || pkv.ModRevision != r.ptrMod) {
		return Result{}, true, nil
	}
	res, err = c.resolveRefused(res, resp, v)
	return res, false, err
}

// resolveApplied classifies a Resolve that found rec, the op record of its
// key: the attempt id took effect (Applied or Duplicate) or another attempt
// did (Conflict, with ErrConflict). res gets rec's digest, version and
// object.
func (c *Client) resolveApplied(res Result, rec layout.OpRecord, id AttemptID) (Result, error) {
	v := res.Version
	res.Digest, res.Version, res.Object = rec.Digest, rec.Version, rec.Object(res.Pointer)
	switch {
	case id.ObjectKey != "" && rec.ObjectKey == id.ObjectKey, id.Digest != "" && rec.Digest == id.Digest:
		res.Outcome = Applied
		if rec.Version != v {
			res.Outcome = Duplicate
		}
		c.m.resolved(res.Outcome)
		return res, nil
	}
	res.Outcome = Conflict
	c.m.resolved(Conflict)
	return res, fmt.Errorf("%w: key %q of %q was applied at %s by another attempt (digest %s, object %s); the attempt at %s (%s) never will be",
		ErrConflict, res.IdempotencyKey, res.Resource, rec.Version, rec.Digest, rec.ObjectKey, v, id)
}

// resolveRefused classifies a Resolve transaction that found no op record
// and the seal below v but failed its epoch or generation compare (Else
// reads 3 and 4): v's epoch is older than the domain's (stale, reason epoch:
// the publish transaction requires the current epoch, which only rises), or
// v could not have been carried by any publish (fencepub.ErrInvalid).
func (c *Client) resolveRefused(res Result, resp *clientv3.TxnResponse, v layout.Version) (Result, error) {
	ekv := kv(resp, 3)
	if ekv == nil {
		return Result{}, fmt.Errorf("%w: domain %q has no epoch (run the authority's init)", fencepub.ErrNotInitialized, c.ns.Domain)
	}
	epoch, err := layout.DecodeNumber(string(ekv.Value))
	if err != nil {
		return Result{}, fmt.Errorf("%w: epoch key: %w", layout.ErrCorruptRecord, err)
	}
	switch {
	case v.Epoch > epoch:
		return Result{}, fmt.Errorf("%w: version %s: epoch %d is above the domain's current epoch %d; no publish carries it (nothing sealed)",
			fencepub.ErrInvalid, v, v.Epoch, epoch)
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
			fencepub.ErrInvalid, v, v.Fence, res.Resource, gen)
	}
	return Result{}, fmt.Errorf("publisher: resolve of %s on %q failed but every compared value matches (revision %d)",
		v, res.Resource, resp.Header.Revision)
}

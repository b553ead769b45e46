package authority

import (
	"context"
	"fmt"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sealReasonReleased is the layout.Seal.Reason of a seal Release raised
// over a finished term.
const sealReasonReleased = "released"

// sealAttempts bounds sealTerm's re-plans after the pointer or seal of a
// retired resource changed under it.
const sealAttempts = 8

// releaseReads are the reads of Release's check transaction, in both
// branches: g's holder key and the epoch (describeLoss), and, when seals,
// the resource's seal, its pointer and the grant record of g's fence,
// which sealTerm plans from (response indexes 2, 3, 4).
func (a *Authority) releaseReads(g Grant, seals bool) []clientv3.Op {
	reads := []clientv3.Op{clientv3.OpGet(a.ns.HolderKey(g.Resource)), clientv3.OpGet(a.ns.EpochKey())}
	if !seals {
		return reads
	}
	return append(reads,
		clientv3.OpGet(a.ns.SealKey(g.Resource)),
		clientv3.OpGet(a.ns.PointerKey(g.Resource)),
		clientv3.OpGet(a.ns.GrantKey(g.Resource, g.Generation)))
}

// termSeal is the seal write sealTerm planned: the value, and, while the
// current seal retires the resource, the ModRevisions of pointer and seal
// it must find unchanged.
type termSeal struct {
	value           string
	guard           bool
	ptrMod, sealMod int64
}

// planTermSeal plans the seal over g's term, target = (g.Epoch,
// g.Generation, layout.MaxNumber), from read (holder, epoch, seal, pointer,
// grant record, as Release reads them). ok is false when there is nothing
// to raise: the domain moved to another epoch (older-epoch objects are
// unpublishable already), the grant record no longer names g (pruned once
// the pointer passed the fence), the resource was never initialised (no
// publish of the term could be made), or max(pointer, seal) is at or above
// the target. A corrupt pointer or seal is reported, and left to the
// operator and GC. The seal keeps a decommission's reason and time
// (layout.Seal.RaisedTo), so a retired resource stays retired.
func planTermSeal(g Grant, read *clientv3.TxnResponse, now time.Time) (plan termSeal, ok bool, err error) {
	value := func(i int) *mvccKV {
		if kvs := read.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			return kvs[0]
		}
		return nil
	}
	ekv, skv, pkv, gkv := value(1), value(2), value(3), value(4)
	switch {
	case ekv == nil || string(ekv.Value) != layout.EncodeNumber(g.Epoch),
		gkv == nil || string(gkv.Value) != layout.GrantRecordValue(g.Epoch, g.Owner),
		skv == nil || pkv == nil:
		return termSeal{}, false, nil
	}
	seal, err := layout.DecodeSeal(skv.Value)
	if err != nil {
		return termSeal{}, false, fmt.Errorf("%w: seal of %q: %w", fencepub.ErrCorruptState, g.Resource, err)
	}
	ptr, err := layout.DecodePointer(pkv.Value)
	if err != nil {
		return termSeal{}, false, fmt.Errorf("%w: pointer of %q: %w", fencepub.ErrCorruptState, g.Resource, err)
	}
	target := g.Version(layout.MaxNumber)
	if layout.MaxVersion(ptr.Version, seal.Version).Compare(target) >= 0 {
		return termSeal{}, false, nil
	}
	plan.value, err = layout.EncodeSeal(seal.RaisedTo(target, sealReasonReleased, now.UTC(), ptr.Version))
	plan.guard, plan.ptrMod, plan.sealMod = seal.Retires(ptr.Version), pkv.ModRevision, skv.ModRevision
	return plan, err == nil, err
}

// sealTerm raises the seal of g's resource over g's term, (g.Epoch,
// g.Generation, layout.MaxNumber), planned from read (Release's check), in
// one transaction that requires the grant record of g's fence to name
// g.Owner in g.Epoch, the domain still in g.Epoch and the seal below the
// target — the seal only rises, and only the term's own owner seals it
// (DESIGN.md "Leftovers of finished work"). Its Else reads plan the next
// attempt, so a re-send after a lost answer, or a concurrent raise, ends
// with nothing written. A corrupt pointer or seal is logged and skipped:
// the release itself goes on, and GC treats the term's leftovers as
// abandoned.
//
// Errors: fencepub.ErrUnavailable, ctx's error.
func (a *Authority) sealTerm(ctx context.Context, g Grant, read *clientv3.TxnResponse) error {
	sk, pk := a.ns.SealKey(g.Resource), a.ns.PointerKey(g.Resource)
	target := g.Version(layout.MaxNumber)
	reads := a.releaseReads(g, true)
	for range sealAttempts {
		plan, ok, err := planTermSeal(g, read, time.Now())
		if err != nil {
			a.log.Warn("authority: release: the term is not sealed", "resource", g.Resource, "generation", g.Generation, "err", err)
			return nil
		}
		if !ok {
			return nil
		}
		cmps := []clientv3.Cmp{g.grantCmp(a.ns), g.epochCmp(a.ns), clientv3.Compare(clientv3.Value(sk), "<", layout.EncodeVersion(target))}
		if plan.guard {
			cmps = append(cmps,
				clientv3.Compare(clientv3.ModRevision(pk), "=", plan.ptrMod),
				clientv3.Compare(clientv3.ModRevision(sk), "=", plan.sealMod))
		}
		var resp *clientv3.TxnResponse
		if err := a.call(ctx, "release: seal", 0, func(rctx context.Context) (err error) {
			resp, err = a.kv.Txn(rctx).If(cmps...).Then(clientv3.OpPut(sk, plan.value)).Else(reads...).Commit()
			return err
		}); err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
		read = resp
	}
	return fmt.Errorf("%w: release of %q generation %d: the resource kept changing while its term was sealed (%d attempts)",
		fencepub.ErrUnavailable, g.Resource, g.Generation, sealAttempts)
}

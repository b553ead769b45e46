package gc

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Seal reasons GC writes (layout.Seal.Reason).
const (
	// sealReasonAbandoned: raised over abandoned in-flight objects before
	// deleting them.
	sealReasonAbandoned = "gc-abandoned"
	// sealReasonDecommissioned: raised by decommission to (epoch,
	// generation, max). While the seal is above the pointer with this
	// reason, GC keeps the resource's published and retained objects only
	// for the reader grace after the seal was written (its ModRevision on
	// the domain clock; the seal's At is informative).
	sealReasonDecommissioned = layout.SealReasonDecommissioned
)

// raiseSeal raises the seal of s.Resource to target in ONE transaction that
// requires the pointer, the seal and the epoch unchanged since the snapshot
// (their ModRevisions), so the seal only rises and two collectors racing
// with different snapshots can never lower it (DESIGN.md "Garbage
// collection": in flight). On a resource that has neither pointer nor seal
// it creates both, the pointer with the zero version, as the publisher's
// resource init would. ok is false when the compare failed (nothing
// written). target must be above s.Top().
//
// Errors: fencepub.ErrUnavailable (the outcome is unknown: do not delete),
// ctx's error.
func (c *Collector) raiseSeal(ctx context.Context, s *state, target layout.Version, reason string) (ok bool, err error) {
	if s.Top().Compare(target) >= 0 {
		return false, fmt.Errorf("gc: refusing to set the seal of %q to %s, not above %s", s.Resource, target, s.Top())
	}
	if s.HasPointer != s.HasSeal {
		return false, fmt.Errorf("%w: %q has a pointer or a seal but not both", fencepub.ErrCorruptState, s.Resource)
	}
	ns := c.ns
	// A still retired resource keeps its seal's reason and time.
	sealVal, err := layout.EncodeSeal(s.Seal.RaisedTo(target, reason, c.now().UTC(), s.Pointer.Version))
	if err != nil {
		return false, err
	}
	ops := []clientv3.Op{clientv3.OpPut(ns.SealKey(s.Resource), sealVal)}
	if !s.HasPointer {
		ptrVal, err := layout.EncodePointer(layout.Pointer{})
		if err != nil {
			return false, err
		}
		ops = append(ops, clientv3.OpPut(ns.PointerKey(s.Resource), ptrVal))
	}
	// Retried (call): a second copy fails the compares (ok false: the
	// caller keeps the objects until its next pass, which finds the seal).
	var resp *clientv3.TxnResponse
	if err := c.call(ctx, "raise seal of "+s.Resource, func(ctx context.Context) (err error) {
		resp, err = c.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(ns.PointerKey(s.Resource)), "=", s.pointerMod),
			clientv3.Compare(clientv3.ModRevision(ns.SealKey(s.Resource)), "=", s.sealMod),
			clientv3.Compare(clientv3.ModRevision(ns.EpochKey()), "=", s.epochMod),
		).Then(ops...).Commit()
		return err
	}); err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// decommissionAttempts bounds decommission's retries after a concurrent
// change (a grant, a publish, another seal).
const decommissionAttempts = 8

// decommission is operator.Decommission: it retires res so that no fence of
// its past can ever publish (`fencepub resource delete`; DESIGN.md "etcd
// layout"; the package doc, "Decommissioning"): one transaction raises its
// seal to (epoch, generation, fencepub.MaxNumber) with reason
// layout.SealReasonDecommissioned. GC then deletes its objects and records;
// a later grant re-creates the resource. Errors: fencepub.ErrInvalid (bad
// name), ErrUnknownResource (never granted), authority.ErrHeld (a live lease
// and !force), fencepub.ErrNotInitialized, fencepub.ErrCorruptState,
// errRaceLost, fencepub.ErrUnavailable, ctx's error.
func (c *Collector) decommission(ctx context.Context, res string, force bool) (operator.Decommissioned, error) {
	if err := layout.ValidateResource(res, false); err != nil {
		return operator.Decommissioned{}, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	ns := c.ns
	keys := []string{ns.EpochKey(), ns.GenerationKey(res), ns.PointerKey(res), ns.SealKey(res), ns.HolderKey(res)}
	for range decommissionAttempts {
		gets := make([]clientv3.Op, len(keys))
		for i, k := range keys {
			gets[i] = clientv3.OpGet(k)
		}
		var resp *clientv3.TxnResponse
		if err := c.call(ctx, "read "+res, func(ctx context.Context) (err error) {
			resp, err = c.cli.Txn(ctx).Then(gets...).Commit()
			return err
		}); err != nil {
			return operator.Decommissioned{}, err
		}
		kvs := make([]*mvccKV, len(keys))
		for i := range keys {
			if r := resp.Responses[i].GetResponseRange().Kvs; len(r) > 0 {
				kvs[i] = r[0]
			}
		}
		epoch, gen, ptr, seal, holder, err := decodeDecommission(kvs)
		if err != nil {
			return operator.Decommissioned{}, err
		}
		out := operator.Decommissioned{Resource: res, Previous: layout.MaxVersion(ptr.Version, seal.Version), Revision: resp.Header.Revision}
		if kvs[1] == nil {
			return out, fmt.Errorf("%w: %q was never granted (no generation counter in domain %q); nothing sealed", ErrUnknownResource, res, ns.Domain)
		}
		target := layout.Version{Epoch: epoch, Fence: gen, Seq: layout.MaxNumber}
		// A release's seal over the last term is at the target too, but
		// does not retire the resource: it is re-labelled below.
		if out.Previous.Compare(target) >= 0 && (ptr.Version.Compare(target) >= 0 || seal.Reason == sealReasonDecommissioned) {
			out.Seal, out.Already = out.Previous, true
			return out, nil
		}
		if holder != nil && !force {
			return out, fmt.Errorf("%w: %q is held by %q (generation %d, epoch %d); force the seal (fencepub resource delete --force) to retire it anyway",
				authority.ErrHeld, res, holder.Owner, holder.Generation, holder.Epoch)
		}
		if (kvs[2] == nil) != (kvs[3] == nil) {
			return out, fmt.Errorf("%w: %q has a pointer or a seal but not both", fencepub.ErrCorruptState, res)
		}
		sealVal, err := layout.EncodeSeal(layout.Seal{Version: target, Reason: sealReasonDecommissioned, At: c.now().UTC(), Retired: target})
		if err != nil {
			return out, err
		}
		ops := []clientv3.Op{clientv3.OpPut(ns.SealKey(res), sealVal)}
		if kvs[2] == nil {
			ptrVal, err := layout.EncodePointer(layout.Pointer{})
			if err != nil {
				return out, err
			}
			ops = append(ops, clientv3.OpPut(ns.PointerKey(res), ptrVal))
		}
		cmps := make([]clientv3.Cmp, 0, len(keys))
		for i, k := range keys[:4] {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", modRev(kvs[i])))
		}
		// The holder must be the one read (absent unless forced).
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ns.HolderKey(res)), "=", createRev(kvs[4])))
		// Retried (call): a second copy fails the compares, and the next
		// round reads the seal already at the target.
		var tresp *clientv3.TxnResponse
		if err := c.call(ctx, "seal "+res, func(ctx context.Context) (err error) {
			tresp, err = c.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
			return err
		}); err != nil {
			return out, err
		}
		if tresp.Succeeded {
			out.Seal, out.Revision = target, tresp.Header.Revision
			if holder != nil {
				out.Holder = holder
			}
			c.log.Info("gc: resource decommissioned", "resource", res, "seal", target.String(), "forced_holder", holder != nil)
			return out, nil
		}
	}
	return operator.Decommissioned{}, fmt.Errorf("%w: %q kept changing; %d attempts", errRaceLost, res, decommissionAttempts)
}

func modRev(kv *mvccKV) int64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

func createRev(kv *mvccKV) int64 {
	if kv == nil {
		return 0
	}
	return kv.CreateRevision
}

// decodeDecommission decodes the epoch, generation, pointer, seal and
// holder read by decommission (nil entries are absent keys).
func decodeDecommission(kvs []*mvccKV) (epoch, gen uint64, ptr layout.Pointer, seal layout.Seal, holder *authority.Grant, err error) {
	if kvs[0] == nil {
		return 0, 0, ptr, seal, nil, fmt.Errorf("%w: no epoch key", fencepub.ErrNotInitialized)
	}
	if epoch, err = layout.DecodeNumber(string(kvs[0].Value)); err != nil {
		return 0, 0, ptr, seal, nil, fmt.Errorf("%w: epoch key: %w", fencepub.ErrCorruptState, err)
	}
	if kvs[1] != nil {
		if gen, err = layout.DecodeNumber(string(kvs[1].Value)); err != nil {
			return 0, 0, ptr, seal, nil, fmt.Errorf("%w: generation: %w", fencepub.ErrCorruptState, err)
		}
	}
	if kvs[2] != nil {
		if ptr, err = layout.DecodePointer(kvs[2].Value); err != nil {
			return 0, 0, ptr, seal, nil, fmt.Errorf("%w: %w", fencepub.ErrCorruptState, err)
		}
	}
	if kvs[3] != nil {
		if seal, err = layout.DecodeSeal(kvs[3].Value); err != nil {
			return 0, 0, ptr, seal, nil, fmt.Errorf("%w: %w", fencepub.ErrCorruptState, err)
		}
	}
	if kvs[4] != nil {
		var g authority.Grant
		if json.Unmarshal(kvs[4].Value, &g) != nil {
			g = authority.Grant{Owner: "(undecodable holder record)"}
		}
		g.HolderRevision = kvs[4].CreateRevision
		holder = &g
	}
	return epoch, gen, ptr, seal, holder, nil
}

package reader

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/leader"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/retry"
)

func init() {
	operator.Resources = func(ctx context.Context, cfg any) ([]operator.Resource, error) {
		return resources(ctx, cfg.(Config))
	}
	operator.State = func(ctx context.Context, r any) (operator.Resource, error) {
		return r.(*Reader).state(ctx)
	}
}

// listPage is how many keys one etcd read of a listing asks for.
const listPage = 1000

// resources is operator.Resources, which `fencepub ls` runs: it lists the
// resources of cfg's domain that have a pointer, sorted by name, with their
// pointer and seal: every resource a publisher has bound, since the pointer
// and the seal are created, with zero versions, before a resource's first
// publish and never deleted (DESIGN.md "Reading", "etcd layout"). A resource
// that was granted but whose holder has not bound a publisher yet is not
// listed; state reads it.
//
// It reads the pointers, then the seals, at one etcd revision (linearizable),
// 1000 keys per read, each read retried as Current's are within
// Config.RequestTimeout; the result holds every resource in memory. It blocks
// until the listing is read or ctx ends. It does not read objects. Errors:
// fencepub.ErrInvalid (cfg), fencepub.ErrUnavailable,
// fencepub.ErrCorruptRecord (a pointer or seal that does not decode, or a
// pointer key that names no valid resource; the error names the key), ctx's
// error.
func resources(ctx context.Context, cfg Config) ([]operator.Resource, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ns := layout.Namespace(cfg.Namespace)
	var out []operator.Resource
	rev, err := scan(ctx, cfg, ns.PointersPrefix(), 0, func(kv *mvccpb.KeyValue) error {
		name, err := ns.PointerResource(string(kv.Key))
		if err != nil {
			return fmt.Errorf("%w: %w", layout.ErrCorruptRecord, err)
		}
		ptr, err := layout.DecodePointer(kv.Value)
		if err != nil {
			return fmt.Errorf("reader: pointer %s: %w", kv.Key, err)
		}
		out = append(out, operator.Resource{Name: name, Pointer: ptr})
		return nil
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	seals := map[string]layout.Seal{}
	_, err = scan(ctx, cfg, ns.SealsPrefix(), rev, func(kv *mvccpb.KeyValue) error {
		seal, err := layout.DecodeSeal(kv.Value)
		if err != nil {
			return fmt.Errorf("reader: seal %s: %w", kv.Key, err)
		}
		seals[string(kv.Key)] = seal
		return nil
	})
	for i := range out {
		out[i].Seal = seals[ns.SealKey(out[i].Name)]
	}
	return out, err
}

// state is operator.State, which `fencepub ls --resource` runs: it returns
// the resource's pointer and seal, read in one etcd transaction
// (linearizable) and retried as Current's reads are. It is a
// listing, not a read of the published state: it does not take part in
// Current's rule against going back below a version already returned
// (invariant 6), and it reads no object. A resource granted whose holder
// has not published yet has the zero Pointer; one never granted is an
// error (DESIGN.md "Reading"). Errors: ErrUnknownResource,
// fencepub.ErrUnavailable, fencepub.ErrCorruptRecord, ctx's error.
func (r *Reader) state(ctx context.Context) (operator.Resource, error) {
	ns := layout.Namespace(r.cfg.Namespace)
	var resp *clientv3.TxnResponse
	err := etcdRead(ctx, r.cfg, fmt.Sprintf("read the pointer and seal of %q", r.res), func(ctx context.Context) (err error) {
		resp, err = leader.KV(r.cfg.Etcd).Txn(ctx).Then(clientv3.OpGet(r.key), clientv3.OpGet(ns.SealKey(r.res))).Commit()
		return err
	})
	if err != nil {
		return operator.Resource{}, err
	}
	out := operator.Resource{Name: r.res}
	ptrKVs, sealKVs := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(ptrKVs) == 0 {
		return out, r.known(ctx)
	}
	if out.Pointer, err = layout.DecodePointer(ptrKVs[0].Value); err != nil {
		return operator.Resource{}, fmt.Errorf("reader: pointer of %q: %w", r.res, err)
	}
	if len(sealKVs) > 0 {
		if out.Seal, err = layout.DecodeSeal(sealKVs[0].Value); err != nil {
			return operator.Resource{}, fmt.Errorf("reader: seal of %q: %w", r.res, err)
		}
	}
	return out, nil
}

// History returns the resource's retained versions, oldest first: the
// history entries GC keeps exactly while it retains the version (DESIGN.md
// "Garbage collection"), each the pointer that publish wrote (Version,
// Object, IdempotencyKey, Digest, ContentType, Owner, CommittedAt); the
// last is the current pointer. OpenVersion reads any of them (DESIGN.md
// "Reading").
//
// It reads the entries at one etcd revision (linearizable; the package doc,
// "Listings"), each read retried as Current's are within
// Config.RequestTimeout. It does not take part in Current's rule against
// going back. Errors: ErrUnknownResource (never granted),
// fencepub.ErrUnavailable, fencepub.ErrCorruptRecord (an entry that does
// not decode; the error names its key), ctx's error.
func (r *Reader) History(ctx context.Context) ([]fencepub.Pointer, error) {
	out := []fencepub.Pointer{}
	_, err := scan(ctx, r.cfg, layout.Namespace(r.cfg.Namespace).HistoryPrefix(r.res), 0, func(kv *mvccpb.KeyValue) error {
		ptr, err := layout.DecodePointer(kv.Value)
		if err != nil {
			return fmt.Errorf("reader: history entry %s: %w", kv.Key, err)
		}
		out = append(out, ptr)
		return nil
	})
	if err == nil && len(out) == 0 {
		err = r.known(ctx)
	}
	return out, err
}

// OpenVersion returns the body of the retained version v, verified against
// v's history entry (Body.Pointer) as Open verifies the current one
// (DESIGN.md "Reading"). v may be below the current version; OpenVersion
// changes nothing that Current, Open and Watch return. It is safe for
// concurrent use and blocks for one etcd read and one GET (two more etcd
// reads when the entry or its object is missing).
//
// Errors: ErrNotRetained (no history entry), ErrUnknownResource,
// ErrDecommissioned, ErrObjectMissing (the entry remains, its object is
// gone), ErrObjectChanged, ErrDigestMismatch, ErrIsDataset,
// fencepub.ErrInvalid (a zero or out-of-range v, or no Config.Store),
// fencepub.ErrUnavailable, fencepub.ErrCorruptRecord, ctx's error.
func (r *Reader) OpenVersion(ctx context.Context, v fencepub.Version) (*Body, error) {
	switch {
	case r.cfg.Store == nil:
		return nil, fmt.Errorf("%w: Config.Store is nil", fencepub.ErrInvalid)
	case v.IsZero():
		return nil, fmt.Errorf("%w: OpenVersion of %q needs a published version, got %s", fencepub.ErrInvalid, r.res, v)
	}
	if err := v.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	ptr, err := r.historyEntry(ctx, v)
	if err != nil {
		return nil, err
	}
	if err := r.notDataset(ptr); err != nil {
		return nil, err
	}
	b, err := r.fetch(ctx, ptr)
	if !errors.Is(err, ErrObjectMissing) {
		return b, err
	}
	// GC deletes a version's object before it prunes the entry.
	if _, herr := r.historyEntry(ctx, v); errors.Is(herr, ErrNotRetained) {
		return nil, fmt.Errorf("%w: %s of %q was collected while it was opened", ErrNotRetained, v, r.res)
	}
	if derr := r.decommissioned(ctx, ptr); derr != nil {
		return nil, derr
	}
	return nil, err
}

// historyEntry reads the history entry of v. Errors: ErrNotRetained (no
// entry), ErrUnknownResource (nor the resource), fencepub.ErrUnavailable,
// layout.ErrCorruptRecord.
func (r *Reader) historyEntry(ctx context.Context, v layout.Version) (layout.Pointer, error) {
	var resp *clientv3.GetResponse
	key := layout.Namespace(r.cfg.Namespace).HistoryKey(r.res, v)
	err := etcdRead(ctx, r.cfg, fmt.Sprintf("read version %s of %q", v, r.res), func(ctx context.Context) (err error) {
		resp, err = leader.KV(r.cfg.Etcd).Get(ctx, key)
		return err
	})
	switch {
	case err != nil:
		return layout.Pointer{}, err
	case len(resp.Kvs) == 0:
		if err := r.known(ctx); err != nil {
			return layout.Pointer{}, err
		}
		return layout.Pointer{}, fmt.Errorf("%w: %q has no history entry for %s", ErrNotRetained, r.res, v)
	}
	ptr, err := layout.DecodePointer(resp.Kvs[0].Value)
	if err != nil {
		return layout.Pointer{}, fmt.Errorf("reader: history entry %s: %w", key, err)
	}
	return ptr, nil
}

// known returns nil when etcd holds any durable trace of the resource —
// its pointer, its generation counter, or a restore record that `authority
// recover` wrote for it (a resource of the bucket's history, taken over or
// restored, whose grants this etcd lost) — and an error wrapping
// ErrUnknownResource when it holds none: the resource was never granted in
// the domain. The three are read in one etcd transaction, retried as the
// pointer's reads are. Errors also fencepub.ErrUnavailable and ctx's
// error.
func (r *Reader) known(ctx context.Context) error {
	ns := layout.Namespace(r.cfg.Namespace)
	var resp *clientv3.TxnResponse
	err := etcdRead(ctx, r.cfg, fmt.Sprintf("read the generation counter of %q", r.res), func(ctx context.Context) (err error) {
		resp, err = leader.KV(r.cfg.Etcd).Txn(ctx).Then(
			clientv3.OpGet(r.key, clientv3.WithCountOnly()),
			clientv3.OpGet(ns.GenerationKey(r.res), clientv3.WithCountOnly()),
			clientv3.OpGet(ns.RestoredPrefix(r.res), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		).Commit()
		return err
	})
	if err != nil {
		return err
	}
	for _, op := range resp.Responses {
		if op.GetResponseRange().Count > 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: %q has no pointer and was never granted in domain %q", ErrUnknownResource, r.res, ns.Domain)
}

// scan calls fn for every key under prefix in key order, reading
// listPage keys at a time at etcd revision rev (0: the first read's
// revision, which scan returns). Each read goes through etcdRead. fn's
// error ends the scan and is returned.
func scan(ctx context.Context, cfg Config, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		var resp *clientv3.GetResponse
		err := etcdRead(ctx, cfg, "list "+prefix, func(ctx context.Context) (err error) {
			resp, err = leader.KV(cfg.Etcd).Get(ctx, from, opts...)
			return err
		})
		if err != nil {
			return rev, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return rev, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// etcdRead runs op, one etcd read named by what, with the bounds and
// retries of the pointer's reads (Reader.get): each attempt bounded by
// Config.RequestTimeout/readAttempts, retried while etcd is unavailable
// (retry.EtcdUnavailable), all within Config.RequestTimeout and ctx
// (DESIGN.md invariant 12). Errors: fencepub.ErrUnavailable wrapping
// etcd's error (a refused permission included), or ctx's cause.
func etcdRead(ctx context.Context, cfg Config, what string, op func(context.Context) error) error {
	bctx, cancel := context.WithTimeoutCause(ctx, cfg.RequestTimeout,
		fmt.Errorf("%w: no answer within %s (Config.RequestTimeout)", fencepub.ErrUnavailable, cfg.RequestTimeout))
	defer cancel()
	err := retry.Do(bctx, func(bctx context.Context) error {
		actx, cancel := context.WithTimeout(bctx, cfg.RequestTimeout/readAttempts)
		defer cancel()
		if err := op(actx); err != nil {
			return fmt.Errorf("%w: %s: %w", fencepub.ErrUnavailable, what, err)
		}
		return nil
	}, retry.EtcdUnavailable)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("reader: %s: %w", what, context.Cause(ctx))
	}
	return err
}

package authority

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/ownership"
	"github.com/fencepub/fencepub/internal/recovery"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// restoredPointer is a pointer found by Recover: its version and raw value.
type restoredPointer struct {
	version layout.Version
	value   []byte
}

func init() {
	recovery.Recover = func(ctx context.Context, a any, opts recovery.Options) (recovery.Report, error) {
		return a.(*Authority).recoverDomain(ctx, opts)
	}
}

// recoverDomain is recovery.Recover, which `fencepub authority recover`
// runs: it moves the domain to a new epoch after an etcd restore (DESIGN.md
// invariant 3; the package doc, "How Recover works"), and repairs a corrupt
// epoch key the same way. Run it while workers cannot reach etcd (the
// restore runbook in docs/operations.md). Every step is idempotent: after a
// failure, run it again; etcd requests and marker reads and writes are
// retried within ctx's deadline or Config.RetryTimeout. Errors:
// ErrForeignHistory (retry with FromBucket), ErrInitialized,
// ErrForeignDeployment, fencepub.ErrUnavailable, ErrExhausted,
// fencepub.ErrCorruptState, a concurrent epoch change (run again), etcd's
// permission denied, ctx's error.
func (a *Authority) recoverDomain(ctx context.Context, opts recovery.Options) (recovery.Report, error) {
	rep := recovery.Report{DryRun: opts.DryRun, FromBucket: opts.FromBucket, Revoked: []recovery.RevokedHolder{}, Resources: []recovery.ResourceRecovery{}}
	// The put of the epoch key sits in a branch that never runs (no key has
	// a negative version): etcd checks the permissions of both branches
	// before it applies a transaction, so a user who may not write the
	// epoch (every role but the operator's, DESIGN.md "Security") is
	// refused here, before recover reserves an epoch in the bucket.
	var resp *clientv3.TxnResponse
	if err := a.call(ctx, "read domain", 0, func(ctx context.Context) (err error) {
		resp, err = a.kv.Txn(ctx).If(clientv3.Compare(clientv3.Version(a.ns.EpochKey()), "<", 0)).
			Then(clientv3.OpPut(a.ns.EpochKey(), "")).
			Else(clientv3.OpGet(a.ns.EpochKey()), clientv3.OpGet(a.ns.DeploymentKey()), clientv3.OpGet(a.ns.RollbackKey())).
			Commit()
		return err
	}); err != nil {
		return rep, err
	}
	epochKVs, depKVs := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	d, initialised, err := decodeDomain(epochKVs, depKVs)
	var epochValue []byte // what switchEpoch requires the epoch key to still hold
	if len(epochKVs) > 0 {
		epochValue, initialised = epochKVs[0].Value, true
	}
	if errors.Is(err, fencepub.ErrCorruptState) {
		// A corrupt epoch key stops every grant and publish of the domain;
		// recover is its repair: the new epoch comes from the bucket and
		// the pointers, which the corruption did not touch. The old epoch
		// is unknown (0): restored pointers are recorded for the epochs of
		// the objects above them only.
		rep.CorruptEpoch = string(epochValue)
		d, err = domain{}, nil
		if len(depKVs) > 0 {
			d.DeploymentID = string(depKVs[0].Value)
		}
		a.log.Warn("authority: recover replaces a corrupt epoch key", "value", rep.CorruptEpoch)
	}
	if err != nil {
		return rep, err
	}
	if err := a.checkRecoverSource(ctx, initialised, epochValue, opts.FromBucket); err != nil {
		return rep, err
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		rep.RollbackFlag = string(kvs[0].Value)
	}
	rep.OldEpoch = d.Epoch
	if rep.DeploymentID, err = a.recoverDeployment(ctx, d, opts.DryRun); err != nil {
		return rep, err
	}
	pointers, err := a.readPointers(ctx)
	if err != nil {
		return rep, err
	}
	for _, p := range pointers {
		rep.Highest.Pointer = max(rep.Highest.Pointer, p.version.Epoch)
	}
	if err := a.scanBucket(ctx, pointers, &rep); err != nil {
		return rep, err
	}
	h := rep.Highest
	top := max(rep.OldEpoch, h.EpochMarker, h.GrantMarker, h.Pointer, h.Object)
	if top >= layout.MaxNumber {
		return rep, fmt.Errorf("%w: epochs reach %d", ErrExhausted, top)
	}
	rep.NewEpoch = top + 1
	planRestored(&rep)
	if opts.DryRun {
		return rep, nil
	}
	if rep.NewEpoch, err = a.reserveRecoverEpoch(ctx, rep.NewEpoch, rep.DeploymentID); err != nil {
		return rep, err
	}
	a.log.Info("authority: recover reserved a new epoch", "old", rep.OldEpoch, "new", rep.NewEpoch)
	if err := a.recordRestored(ctx, pointers, &rep); err != nil {
		return rep, err
	}
	reason := "recover"
	if opts.FromBucket {
		reason = "recover-from-bucket"
	}
	records := a.epochRecordOps(rep.DeploymentID, reason, rep.NewEpoch, rep.OldEpoch)
	switchRev, err := a.switchEpoch(ctx, epochValue, initialised, rep.NewEpoch, rep.DeploymentID, records)
	if err != nil {
		return rep, err
	}
	a.mu.Lock()
	clear(a.known)
	a.mu.Unlock()
	a.log.Info("authority: recover switched the epoch", "epoch", rep.NewEpoch, "revision", switchRev)
	if rep.Revoked, err = a.revokeHolders(ctx, switchRev); err != nil {
		return rep, err
	}
	return rep, nil
}

// checkRecoverSource checks that the kind of recovery asked for matches
// etcd: a take-over (fromBucket) needs an etcd without an epoch for the
// domain; a snapshot recovery on such an etcd is refused when the bucket
// holds another history (DESIGN.md invariant 9).
func (a *Authority) checkRecoverSource(ctx context.Context, initialised bool, epochValue []byte, fromBucket bool) error {
	switch {
	case fromBucket && initialised:
		return fmt.Errorf("%w: epoch key %s holds %q; a restore from a snapshot is recovered without --from-bucket",
			ErrInitialized, a.ns.EpochKey(), epochValue)
	case !fromBucket && !initialised:
		_, err := a.checkBucket(ctx)
		return err
	}
	return nil
}

// recoverDeployment returns the deployment id after checking (or, if
// missing, creating) the bucket's ownership marker.
func (a *Authority) recoverDeployment(ctx context.Context, d domain, dryRun bool) (string, error) {
	var m ownership.Marker
	err := a.storeCall(ctx, "read ownership marker", func(ctx context.Context) (err error) {
		m, err = ownership.Read(ctx, a.st, a.ns)
		return err
	})
	switch {
	case err == nil:
		if d.DeploymentID != "" && m.DeploymentID != d.DeploymentID {
			return "", fmt.Errorf("%w: etcd's deployment is %q but %s names %q", ErrForeignDeployment, d.DeploymentID, a.ns.OwnershipObject(), m.DeploymentID)
		}
		return m.DeploymentID, nil
	case !errors.Is(err, objstore.ErrNotFound):
		return "", err
	case dryRun:
		return d.DeploymentID, nil
	}
	candidate := d.DeploymentID
	if candidate == "" {
		candidate = NewID()
	}
	dep, err := a.ensureOwnership(ctx, candidate)
	if err == nil && d.DeploymentID != "" && dep != d.DeploymentID {
		err = fmt.Errorf("%w: etcd's deployment is %q but %s names %q", ErrForeignDeployment, d.DeploymentID, a.ns.OwnershipObject(), dep)
	}
	return dep, err
}

// readPointers reads every pointer of the domain, paginated, keyed by
// resource name.
func (a *Authority) readPointers(ctx context.Context) (map[string]restoredPointer, error) {
	out := make(map[string]restoredPointer)
	prefix := a.ns.PointersPrefix()
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(500)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev)) // one consistent view
		}
		var resp *clientv3.GetResponse
		if err := a.call(ctx, "read pointers", 0, func(ctx context.Context) (err error) {
			resp, err = a.kv.Get(ctx, key, opts...)
			return err
		}); err != nil {
			return nil, err
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			res, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), prefix))
			if err != nil {
				return nil, fmt.Errorf("%w: pointer key %q", fencepub.ErrCorruptState, kv.Key)
			}
			p, err := layout.DecodePointer(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("%w: pointer of %q: %w", fencepub.ErrCorruptState, res, err)
			}
			out[res] = restoredPointer{version: p.Version, value: kv.Value}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// scanBucket lists the domain's epoch markers, grant markers and objects,
// filling rep.Highest and rep.Resources (objects above each pointer).
func (a *Authority) scanBucket(ctx context.Context, pointers map[string]restoredPointer, rep *recovery.Report) error {
	err := a.listKeys(ctx, a.ns.EpochMarkersPrefix(), "", 0, 0, func(o objstore.ObjectInfo) bool {
		if e, ok := a.parseEpochMarker(o.Key); ok {
			rep.Highest.EpochMarker = max(rep.Highest.EpochMarker, e)
		}
		return true
	})
	if err != nil {
		return err
	}
	grants := a.ns.MetaPrefix() + "grants/"
	err = a.listKeys(ctx, grants, "", 0, 0, func(o objstore.ObjectInfo) bool {
		res, _, ok := strings.Cut(strings.TrimPrefix(o.Key, grants), "/")
		if name, err := url.PathUnescape(res); ok && err == nil {
			if c, ok := a.parseGrantMarker(name, o.Key); ok {
				rep.Highest.GrantMarker = max(rep.Highest.GrantMarker, c.epoch)
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	byRes := make(map[string]*recovery.ResourceRecovery)
	order := []string{}
	entry := func(res string) *recovery.ResourceRecovery {
		r, ok := byRes[res]
		if !ok {
			p, has := pointers[res]
			r = &recovery.ResourceRecovery{Resource: res, RestoredPointer: p.version, HasPointer: has, Above: []recovery.LostObject{}, Recorded: []uint64{}}
			byRes[res] = r
			order = append(order, res)
		}
		return r
	}
	for res := range pointers {
		entry(res)
	}
	root, meta := a.ns.Root(), a.ns.MetaPrefix()
	err = a.listKeys(ctx, root, "", 0, 0, func(o objstore.ObjectInfo) bool {
		if strings.HasPrefix(o.Key, meta) {
			return true
		}
		esc, _, ok := strings.Cut(strings.TrimPrefix(o.Key, root), "/")
		res, err := url.PathUnescape(esc)
		if !ok || err != nil {
			return true // foreign: not ours to judge
		}
		v, _, ok := a.ns.ParseObjectKey(res, o.Key)
		if !ok {
			return true
		}
		rep.Highest.Object = max(rep.Highest.Object, v.Epoch)
		if r := entry(res); r.RestoredPointer.Compare(v) < 0 {
			r.Above = append(r.Above, recovery.LostObject{Key: o.Key, Version: v, Size: o.Size, LastModified: o.LastModified})
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, res := range order {
		rep.Resources = append(rep.Resources, *byRes[res])
	}
	return nil
}

// reserveRecoverEpoch writes the epoch marker of the first free epoch from
// epoch on and returns that epoch.
func (a *Authority) reserveRecoverEpoch(ctx context.Context, epoch uint64, dep string) (uint64, error) {
	nonce := NewID()
	for range 16 {
		ours, err := a.reserveEpoch(ctx, epochMarker{Epoch: epoch, Deployment: dep, Reason: "recover", Nonce: nonce})
		if err != nil || ours {
			return epoch, err
		}
		if epoch++; epoch > layout.MaxNumber {
			break
		}
	}
	return 0, fmt.Errorf("authority: recover: no free epoch marker found up to %d (concurrent recovers?)", epoch)
}

// planRestored fills each resource's Recorded: OldEpoch if it had a
// pointer, and every epoch of an object above that pointer.
func planRestored(rep *recovery.Report) {
	for i := range rep.Resources {
		r := &rep.Resources[i]
		if r.HasPointer && rep.OldEpoch > 0 {
			r.Recorded = append(r.Recorded, rep.OldEpoch)
		}
		for _, o := range r.Above {
			if e := o.Version.Epoch; !slices.Contains(r.Recorded, e) {
				r.Recorded = append(r.Recorded, e)
			}
		}
		slices.Sort(r.Recorded)
	}
}

// pruneBatch bounds the deletions per transaction, well under etcd's
// default limit of 128 operations per transaction.
const pruneBatch = 50

// recordRestored writes, for each resource of rep and each epoch in its
// Recorded, layout.RestoredKey(res, epoch) = the restored pointer's value
// (the zero pointer's when it has none), unless a record exists; nested
// transactions, at most pruneBatch per request, each retried (call): a
// record is created only where none exists, so a second copy is a no-op.
func (a *Authority) recordRestored(ctx context.Context, pointers map[string]restoredPointer, rep *recovery.Report) error {
	zero, err := layout.EncodePointer(layout.Pointer{})
	if err != nil {
		return err
	}
	var ops []clientv3.Op
	for _, r := range rep.Resources {
		val := zero
		if p, ok := pointers[r.Resource]; ok {
			val = string(p.value)
		}
		for _, e := range r.Recorded {
			k := a.ns.RestoredKey(r.Resource, e)
			ops = append(ops, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(k, val)}, nil))
		}
	}
	for len(ops) > 0 {
		n := min(len(ops), pruneBatch)
		if err := a.call(ctx, "record restored pointers", 0, func(ctx context.Context) error {
			_, err := a.kv.Txn(ctx).Then(ops[:n]...).Commit()
			return err
		}); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// switchEpoch sets the domain epoch from the value old (absent when not
// initialised) to epoch, and the deployment key, in one transaction that
// requires the epoch key unchanged, clearing the rollback flag and running
// records (the epoch records). It returns the transaction's revision.
//
// The transaction is retried (call): a re-send after an earlier copy
// applied fails its compare and finds the epoch key holding epoch, which
// only this call can have written (epoch's marker in the bucket is this
// recover's, reserved create-only), so the epoch key's ModRevision is then
// the switch's revision.
func (a *Authority) switchEpoch(ctx context.Context, old []byte, initialised bool, epoch uint64, dep string, records []clientv3.Op) (int64, error) {
	cmp := clientv3.Compare(clientv3.CreateRevision(a.ns.EpochKey()), "=", 0)
	if initialised {
		cmp = clientv3.Compare(clientv3.Value(a.ns.EpochKey()), "=", string(old))
	}
	newValue := layout.EncodeNumber(epoch)
	var resp *clientv3.TxnResponse
	if err := a.call(ctx, "switch epoch", 0, func(ctx context.Context) (err error) {
		resp, err = a.kv.Txn(ctx).If(cmp).Then(append(records,
			clientv3.OpPut(a.ns.EpochKey(), newValue),
			clientv3.OpPut(a.ns.DeploymentKey(), dep),
			clientv3.OpDelete(a.ns.RollbackKey()),
		)...).Else(clientv3.OpGet(a.ns.EpochKey())).Commit()
		return err
	}); err != nil {
		return 0, err
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 && string(kvs[0].Value) == newValue {
		return kvs[0].ModRevision, nil // an earlier copy of this switch applied
	}
	return 0, fmt.Errorf("authority: recover: the epoch changed from %q while recovering (a concurrent init or recover?); run recover again", old)
}

// revokeHolders revokes the lease of every holder key of the domain created
// before revision rev and returns them.
func (a *Authority) revokeHolders(ctx context.Context, rev int64) ([]recovery.RevokedHolder, error) {
	prefix := a.ns.AuthorityPrefix()
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	var holders []string
	for {
		var resp *clientv3.GetResponse
		if err := a.call(ctx, "list holders", 0, func(ctx context.Context) (err error) {
			resp, err = a.kv.Get(ctx, key, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(1000))
			return err
		}); err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			if strings.HasSuffix(string(kv.Key), "/holder") && kv.CreateRevision < rev {
				holders = append(holders, string(kv.Key))
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	out := []recovery.RevokedHolder{}
	for _, k := range holders {
		var resp *clientv3.GetResponse
		if err := a.call(ctx, "read holder", 0, func(ctx context.Context) (err error) {
			resp, err = a.kv.Get(ctx, k)
			return err
		}); err != nil {
			return out, err
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision >= rev {
			continue // gone already, or granted in the new epoch
		}
		kv := resp.Kvs[0]
		// A holder that does not decode is still ended: Recover runs after
		// the epoch switch, and failing here would leave the lease to block
		// its resource (and a re-run would only switch the epoch again).
		g, err := decodeHolder(kv)
		if err != nil {
			a.log.Warn("authority: recover ends a holder record that does not decode", "key", k, "err", err)
			g = Grant{Resource: resourceOfHolderKey(a.ns, k)}
		}
		if err := a.endHolder(ctx, kv); err != nil {
			return out, err
		}
		a.log.Info("authority: recover revoked a restored lease", "resource", g.Resource, "owner", g.Owner, "generation", g.Generation)
		out = append(out, recovery.RevokedHolder{Resource: g.Resource, Owner: g.Owner, Epoch: g.Epoch, Generation: g.Generation, LeaseID: kv.Lease})
	}
	return out, nil
}

// endHolder revokes the lease of holder record kv, or, for a record
// attached to no lease (written out of band; it would never expire),
// deletes it in a transaction that requires it unchanged. Both are retried
// (call): a revoke of a lease already revoked finds none, and the delete's
// compare makes a second copy a no-op.
func (a *Authority) endHolder(ctx context.Context, kv *mvccKV) error {
	if kv.Lease != 0 {
		return a.call(ctx, "revoke lease", 0, func(ctx context.Context) error {
			if _, err := a.lease.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !isLeaseNotFound(err) {
				return err
			}
			return nil
		})
	}
	key := string(kv.Key)
	return a.call(ctx, "delete a holder without lease", 0, func(ctx context.Context) error {
		_, err := a.kv.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(key)).
			Commit()
		return err
	})
}

// resourceOfHolderKey returns the resource name in a holder key of ns, or
// the key itself when it does not parse.
func resourceOfHolderKey(ns layout.Namespace, key string) string {
	esc, ok := strings.CutSuffix(strings.TrimPrefix(key, ns.AuthorityPrefix()), "/holder")
	if res, err := url.PathUnescape(esc); ok && err == nil {
		return res
	}
	return key
}

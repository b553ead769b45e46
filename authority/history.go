package authority

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/ownership"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A bucket belongs to one history (DESIGN.md invariant 9): the objects and
// markers under a domain's root were written under the etcd history that
// created them. An etcd holding none of it never initialises itself over
// them implicitly; `fencepub authority recover --from-bucket` is the
// explicit take-over.

// foreignHistoryError is the ErrForeignHistory error: the bucket already
// holds something under the domain's root and etcd has no epoch for the
// domain. errors.Is(err, ErrForeignHistory) holds.
type foreignHistoryError struct {
	// Root is the domain's root in the bucket ("<prefix>/<domain>/").
	Root string
	// DeploymentID is the ownership marker's deployment id; "" when the
	// bucket has no (readable) ownership marker.
	DeploymentID string
	// HighestEpoch is the highest epoch marker in the bucket; 0 when none.
	HighestEpoch uint64
	// Found is a key found under Root (the ownership marker when there is
	// one).
	Found string
}

func (e *foreignHistoryError) Error() string {
	dep := "no ownership marker"
	if e.DeploymentID != "" {
		dep = "deployment " + e.DeploymentID
	}
	epoch := "no epoch marker"
	if e.HighestEpoch > 0 {
		epoch = fmt.Sprintf("highest epoch marker %d", e.HighestEpoch)
	}
	return fmt.Sprintf("authority: the bucket already holds another etcd history under %s (%s, %s, found %s) and this etcd holds none of it, "+
		"so it does not initialise over it: take the bucket over with `fencepub authority recover --from-bucket` (it quarantines what it finds), "+
		"or configure another namespace.prefix or namespace.domain", e.Root, dep, epoch, e.Found)
}

// Is makes errors.Is(err, ErrForeignHistory) true.
func (e *foreignHistoryError) Is(target error) bool { return target == ErrForeignHistory }

// checkHistory is operator.CheckHistory: it reports whether etcd may own what
// the bucket holds under the domain's root: nil when etcd's domain is
// initialised, when the root is empty, or when it holds only the ownership
// marker of an init of this etcd in progress (etcd's deployment key names it).
// It reads etcd, then the ownership marker and at most one listed key; it
// writes nothing. The CLI calls it to explain an uninitialised domain.
//
// Errors: ErrForeignHistory, fencepub.ErrUnavailable, fencepub.ErrCorruptState
// (an ownership marker that does not decode). The rule: DESIGN.md invariant 9.
func (a *Authority) checkHistory(ctx context.Context) error {
	if _, ok, err := a.readDomain(ctx); err != nil || ok {
		return err
	}
	_, err := a.checkBucket(ctx)
	return err
}

// checkOwnership is operator.CheckOwnership (`fencepub doctor`, the CLI's
// check before a publish, GC before a pass): it checks that the bucket
// belongs to this etcd's history (DESIGN.md invariant 9, "etcd layout"):
// the domain is initialised and the bucket's ownership marker names etcd's
// deployment id. It returns the domain. It reads etcd, then the marker,
// each retried within ctx's deadline; it writes nothing.
//
// Errors: fencepub.ErrNotInitialized (etcd has no epoch for the domain) or,
// when the bucket holds another history, ErrForeignHistory; ErrNoOwnership
// (no deployment id in etcd or no ownership marker in the bucket: a changed
// s3.bucket; or a marker that does not decode); ErrForeignDeployment (the
// marker names another deployment); fencepub.ErrInvalid and
// fencepub.ErrObjectNotFound (a missing bucket); fencepub.ErrUnavailable;
// fencepub.ErrCorruptState.
func (a *Authority) checkOwnership(ctx context.Context) (domain, error) {
	d, ok, err := a.readDomain(ctx)
	if err != nil {
		return domain{}, err
	}
	if !ok {
		if _, err := a.checkBucket(ctx); err != nil {
			return domain{}, err
		}
		return domain{}, fmt.Errorf("%w: no epoch key under %s", fencepub.ErrNotInitialized, a.ns.Root())
	}
	if d.DeploymentID == "" {
		return d, fmt.Errorf("%w: etcd has no deployment id at %s", ErrNoOwnership, a.ns.DeploymentKey())
	}
	var m ownership.Marker
	err = a.storeCall(ctx, "read ownership marker", func(rctx context.Context) (err error) {
		m, err = ownership.Read(rctx, a.st, a.ns)
		return err
	})
	switch {
	case errors.Is(err, objstore.ErrNoBucket):
		return d, err
	case errors.Is(err, objstore.ErrNotFound):
		return d, fmt.Errorf("%w: bucket %q has no ownership marker %s (etcd's deployment is %s)", ErrNoOwnership, a.st.BucketName(), a.ns.OwnershipObject(), d.DeploymentID)
	case errors.Is(err, fencepub.ErrCorruptState):
		return d, fmt.Errorf("%w: %w", ErrNoOwnership, err)
	case err != nil:
		return d, err
	case m.DeploymentID != d.DeploymentID:
		return d, fmt.Errorf("%w: marker %s in bucket %q names deployment %s, etcd's deployment is %s", ErrForeignDeployment, a.ns.OwnershipObject(), a.st.BucketName(), m.DeploymentID, d.DeploymentID)
	}
	return d, nil
}

// checkBucket returns the deployment id an uninitialised domain may use: the
// ownership marker's when etcd's deployment key already holds the same id
// (an init of this etcd is in progress), "" when the root holds nothing; a
// *foreignHistoryError otherwise. The marker is read before etcd's key, and
// init claims the key before it writes the marker, so a concurrent init of
// this etcd is never mistaken for a foreign history.
func (a *Authority) checkBucket(ctx context.Context) (string, error) {
	for attempt := 0; ; attempt++ {
		rctx, cancel := a.rctx(ctx)
		m, err := ownership.Read(rctx, a.st, a.ns)
		cancel()
		switch {
		case err == nil:
			claimed, err := a.readClaim(ctx)
			if err != nil {
				return "", err
			}
			if claimed == m.DeploymentID {
				return m.DeploymentID, nil
			}
			return "", a.foreignHistory(ctx, m.DeploymentID, a.ns.OwnershipObject())
		case !errors.Is(err, objstore.ErrNotFound):
			return "", storeErr(ctx, "read ownership marker", err)
		}
		first, found, err := a.firstAfter(ctx, a.ns.Root(), "")
		if err != nil || !found {
			return "", err
		}
		if attempt > 0 {
			return "", a.foreignHistory(ctx, "", first)
		}
		// A concurrent init of this etcd may have written the ownership
		// marker since it was read: look once more.
	}
}

// foreignHistory builds the ErrForeignHistory error of what was found.
func (a *Authority) foreignHistory(ctx context.Context, dep, found string) error {
	top, err := a.maxEpochMarker(ctx)
	if err != nil {
		return err
	}
	return &foreignHistoryError{Root: a.ns.Root(), DeploymentID: dep, HighestEpoch: top, Found: found}
}

// readClaim returns the value of etcd's deployment key, "" when absent.
func (a *Authority) readClaim(ctx context.Context) (string, error) {
	var resp *clientv3.GetResponse
	err := a.call(ctx, "read deployment", 0, func(rctx context.Context) (err error) {
		resp, err = a.kv.Get(rctx, a.ns.DeploymentKey())
		return err
	})
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// claimOwnership makes a fresh deployment id the owner of an empty root: it
// claims etcd's deployment key (kept if another init of this etcd claimed
// it first), then writes the ownership marker create-only. When a marker
// with another id won the race (another etcd's init), it withdraws its claim
// with a compare-and-delete and returns a *foreignHistoryError.
func (a *Authority) claimOwnership(ctx context.Context) (string, error) {
	key, dep := a.ns.DeploymentKey(), NewID()
	rctx, cancel := a.rctx(ctx)
	resp, err := a.kv.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, dep)).
		Else(clientv3.OpGet(key)).
		Commit()
	cancel()
	if err != nil {
		return "", etcdErr(ctx, "claim deployment", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || len(kvs[0].Value) == 0 {
			return "", fmt.Errorf("%w: deployment key %s is empty", fencepub.ErrCorruptState, key)
		}
		dep = string(kvs[0].Value)
	}
	created, err := a.putCreateOnly(ctx, a.ns.OwnershipObject(), ownership.Marker{DeploymentID: dep, CreatedAt: time.Now().UTC()})
	if err != nil || created {
		return dep, err
	}
	var m ownership.Marker
	if err := a.getJSON(ctx, a.ns.OwnershipObject(), &m); err != nil {
		return "", err
	}
	if m.DeploymentID == dep {
		return dep, nil
	}
	rctx, cancel = a.rctx(ctx)
	_, err = a.kv.Txn(rctx).
		If(clientv3.Compare(clientv3.Value(key), "=", dep), clientv3.Compare(clientv3.CreateRevision(a.ns.EpochKey()), "=", 0)).
		Then(clientv3.OpDelete(key)).
		Commit()
	cancel()
	if err != nil {
		return "", etcdErr(ctx, "withdraw deployment claim", err)
	}
	a.log.Warn("authority: another deployment took the bucket prefix first; init withdrew its claim",
		"object", a.ns.OwnershipObject(), "deployment", m.DeploymentID)
	return "", a.foreignHistory(ctx, m.DeploymentID, a.ns.OwnershipObject())
}

// epochRecordOps returns the puts of the etcd epoch records of epochs
// (layout.EpochRecord; 0 is skipped), each only if absent, so the
// transaction that makes an epoch current also records that this etcd
// issued it. The value names the deployment and why.
func (a *Authority) epochRecordOps(dep, reason string, epochs ...uint64) []clientv3.Op {
	var ops []clientv3.Op
	for _, e := range epochs {
		if e == 0 {
			continue
		}
		k := a.ns.EpochRecord(e)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(k, strings.Join([]string{reason, dep}, " "))}, nil))
	}
	return ops
}

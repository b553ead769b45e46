package authority

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/retry"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Errors returned (wrapped) by Authority and Session methods; test with
// errors.Is. Bad names are reported with fencepub.ErrInvalidName.
var (
	// ErrHeld: another grant holds the resource's lease. Its message names
	// the holder (owner, generation, epoch) and an estimate of its expiry.
	ErrHeld = errors.New("authority: lease held by another owner")
	// ErrLeaseLost: the grant no longer holds its resource: its lease expired
	// or was revoked, it was released, the domain moved to a new epoch, or a
	// Session could not confirm a renewal before its local deadline. A lost
	// grant is never renewed into a new or larger fence; acquire again.
	ErrLeaseLost = errors.New("authority: lease lost")
	// ErrExpired: an acquire retried with a request id that already got a
	// grant returns that original grant together with this error when the
	// grant no longer holds the resource (expired, released or revoked).
	ErrExpired = errors.New("authority: the request's grant has expired")
	// ErrRolledBack: the authority's durable history went back (an etcd
	// restore from an old snapshot): a grant marker in the object store shows
	// a grant that etcd no longer knows. The domain then refuses every grant
	// until an operator runs `fencepub authority recover` (DESIGN.md
	// invariant 3).
	ErrRolledBack = errors.New("authority: the authority's history was rolled back (etcd restored from an old snapshot?); run `fencepub authority recover`")
	// ErrBadTTL: a lease TTL etcd would not honour exactly. etcd leases have
	// whole-second TTLs and, with etcd's default timing (100 ms heartbeat,
	// 1 s election timeout), a minimum of 2 s; etcd silently stretches a
	// shorter TTL, so the authority refuses it instead.
	ErrBadTTL = errors.New("authority: invalid lease TTL")
	// ErrInvalidGrant: a Grant passed to Renew, Release or NewSession lacks
	// the fields that identify a grant (lease id, holder revision, ...).
	ErrInvalidGrant = errors.New("authority: invalid grant")
	// ErrRequestConflict: the request id already got a grant for another
	// owner; a request id identifies one acquire request.
	ErrRequestConflict = errors.New("authority: request id already used by another owner")
	// ErrForeignDeployment: the bucket's ownership marker names a deployment
	// other than the one recorded in etcd.
	ErrForeignDeployment = errors.New("authority: the bucket prefix belongs to another deployment")
	// ErrNoOwnership: an initialised domain's bucket has no ownership marker
	// (or etcd has no deployment key), so nothing shows that the bucket's
	// prefix belongs to this etcd's history: typically s3.bucket names
	// another bucket than the one the domain was initialised with.
	ErrNoOwnership = errors.New("authority: ownership of the bucket prefix cannot be established")
	// ErrForeignHistory: etcd holds no epoch for the domain but the bucket
	// already holds something under its root (an ownership marker, epoch or
	// grant markers, objects): the history of another etcd (an empty
	// replacement, a second cluster configured with the same bucket). The
	// message names the root, the ownership marker's deployment, the
	// highest epoch marker and a key found. Initialising the domain (the
	// first Acquire, `fencepub init`) refuses it and writes nothing;
	// `fencepub authority recover --from-bucket` takes the bucket over (DESIGN.md invariant 9).
	ErrForeignHistory = errors.New("authority: the bucket holds another etcd history")
	// ErrInitialized: `fencepub authority recover --from-bucket` found an
	// epoch in etcd: etcd holds the domain's history (a snapshot restore is
	// recovered without --from-bucket).
	ErrInitialized = errors.New("authority: etcd already holds the domain's history")
	// ErrExhausted: minting would pass fencepub.MaxNumber; fencepub refuses to
	// wrap (DESIGN.md "Object layout").
	ErrExhausted = errors.New("authority: number space exhausted")
)

// heldError is the ErrHeld error of Acquire: the resource is held by Holder
// until about Until (the client's estimate from the lease's remaining TTL;
// zero when unknown). errors.Is(err, ErrHeld) holds.
type heldError struct {
	Resource string
	Holder   Grant
	Until    time.Time
}

func (e *heldError) Error() string {
	until := "unknown"
	if !e.Until.IsZero() {
		until = "~" + e.Until.Format(time.RFC3339)
	}
	return fmt.Sprintf("authority: resource %q is held by %q (generation %d, epoch %d) until %s",
		e.Resource, e.Holder.Owner, e.Holder.Generation, e.Holder.Epoch, until)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *heldError) Is(target error) bool { return target == ErrHeld }

// etcdErr classifies err from an etcd call made with a per-request timeout
// derived from ctx: the caller's own cancellation or deadline passes through;
// a per-request timeout, an unreachable endpoint or a lost leader
// (retry.EtcdUnavailable) become fencepub.ErrUnavailable; anything else is
// wrapped naming what.
func etcdErr(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("authority: %s: %w", what, context.Cause(ctx))
	}
	if retry.EtcdUnavailable(err) {
		return fmt.Errorf("%w: etcd %s: %w", fencepub.ErrUnavailable, what, err)
	}
	return fmt.Errorf("authority: etcd %s: %w", what, err)
}

// storeErr classifies err from an object-store call the way etcdErr does;
// objstore.ErrUnavailable and a per-request timeout become
// fencepub.ErrUnavailable (the objstore sentinel stays in the chain).
func storeErr(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("authority: %s: %w", what, context.Cause(ctx))
	}
	if errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: object store %s: %w", fencepub.ErrUnavailable, what, err)
	}
	return fmt.Errorf("authority: object store %s: %w", what, err)
}

// isLeaseNotFound reports etcd's "requested lease not found".
func isLeaseNotFound(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// Package retry runs a request again, with jittered exponential backoff,
// while it fails in a way that another attempt may cure (an etcd member
// that is stalled, has lost its leader or does not answer in time), until
// the caller's context ends. It is the one retry loop of the authority, the
// publisher and the GC (DESIGN.md invariant 12: available while a quorum
// is). EtcdUnavailable and EtcdNotApplied are the one classifier of etcd's
// answers: the first says whether another attempt may succeed, the second
// whether etcd certainly did not apply a request that failed.
// StoreUnavailable and StoreConflict classify the object store's answers.
//
// A retried request must be safe to send twice: a read, a keepalive, or a
// transaction whose compares make a second copy a no-op (the authority's
// grant transaction is guarded by its request record).
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/fencepub/fencepub/internal/errkind"
	"github.com/fencepub/fencepub/internal/objstore"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Backoff between attempts: from InitialInterval, doubling up to
// MaxInterval, each wait randomised by ±50 % so clients that failed together
// do not retry together.
const (
	InitialInterval = 50 * time.Millisecond
	MaxInterval     = time.Second
)

// Do calls op(ctx) until it returns nil, an error retryable rejects, or ctx
// ends, waiting a jittered backoff between attempts. op bounds each attempt
// itself (a per-request timeout derived from ctx), so one attempt stuck on a
// stalled server does not use up the caller's deadline.
//
// Do blocks until then. It returns nil, op's first non-retryable error, or,
// when ctx ends, op's last error (it says more than ctx's own: which request
// got no answer); ctx's error if op never ran to an error. A ctx without a
// deadline retries a retryable failure for as long as it lasts.
func Do(ctx context.Context, op func(context.Context) error, retryable func(error) bool) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier = InitialInterval, MaxInterval, 2
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := op(ctx)
		if err != nil && !retryable(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		last = err
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	if err != nil && last != nil && ctx.Err() != nil {
		return last
	}
	return err
}

// unavailableEtcdErrors are etcd's answers that mean "no quorum or no leader
// right now, or this member cannot serve": another attempt, possibly on
// another member, may succeed.
var unavailableEtcdErrors = []error{
	rpctypes.ErrNoLeader, rpctypes.ErrNotLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrStopped,
	rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
	rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrUnhealthy, rpctypes.ErrTooManyRequests,
}

// EtcdUnavailable reports whether err, from one etcd request, means the
// cluster or the member did not serve it now: no leader, a leader change, a
// server-side timeout, an unreachable or closing connection (gRPC
// Unavailable), or no answer before the request's own deadline
// (context.DeadlineExceeded, gRPC DeadlineExceeded). Such a request may be
// retried; a mutation's outcome is then unknown until it is read back or
// re-sent. Callers check their own context first: a deadline of the caller
// is not the cluster's fault.
func EtcdUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, u := range unavailableEtcdErrors {
		if errors.Is(err, u) {
			return true
		}
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
	}
	return false
}

// EtcdNotApplied reports whether err, from one etcd request, proves that
// etcd did not apply it: etcd refused it before proposing it to the raft
// log. Those are the gRPC codes etcd's server answers with while it checks
// a request (rpctypes): InvalidArgument (bad or too large request),
// FailedPrecondition (not leader, not capable, auth state), PermissionDenied,
// Unauthenticated, ResourceExhausted (no space, too many requests),
// OutOfRange, Unimplemented, AlreadyExists and NotFound (no such lease).
// Everything else proves nothing: a transport error, a timeout, a
// cancellation or a leader change (gRPC Unavailable, DeadlineExceeded,
// Canceled) may come after the request was committed, and a plain error that
// carries no gRPC status says nothing about etcd at all.
//
// It answers another question than EtcdUnavailable, and an error can be
// both (ErrNotLeader, ErrTooManyRequests: not applied, and worth another
// attempt) or neither (ErrLeaseNotFound is not applied and final;
// gRPC Canceled is neither applied for sure nor a cluster fault).
func EtcdNotApplied(err error) bool {
	var code codes.Code
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	} else {
		return false
	}
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated,
		codes.ResourceExhausted, codes.OutOfRange, codes.Unimplemented, codes.AlreadyExists, codes.NotFound:
		return true
	}
	return false
}

// StoreUnavailable reports whether err, from one objstore.Store request,
// means the store did not serve it now: it is a fencepub.ErrUnavailable
// (objstore.ErrUnavailable: a transport failure, a lost response, a 5xx
// answer; or the same kind from another Store implementation). The request
// may or may not have been applied; only a request that is safe to send
// twice (a create-only write, a read) is retried on it.
func StoreUnavailable(err error) bool {
	return errors.Is(err, errkind.ErrUnavailable)
}

// StoreConflict reports whether err, from one objstore.Store write, is a
// 409 ConditionalRequestConflict (objstore.ErrConditionFailed): another
// conditional write to the same key was in progress, this one was not
// applied, and it may be sent again.
func StoreConflict(err error) bool {
	return errors.Is(err, objstore.ErrConditionFailed)
}

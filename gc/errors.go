package gc

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/retry"
)

// Errors returned (wrapped) by this package; test with errors.Is.
var (
	// ErrNoOwnership: the bucket has no ownership marker for the domain (or
	// etcd has no deployment key), so GC cannot tell whose objects these are.
	// Nothing is deleted. It is authority.ErrNoOwnership.
	ErrNoOwnership = authority.ErrNoOwnership
	// ErrUnknownResource: the resource was never granted (no generation
	// counter), e.g. a typo in its name; nothing was written.
	ErrUnknownResource = errors.New("gc: unknown resource")
	// ErrIncomplete: a pass finished with errors on some resources; the
	// report lists them. Whatever was deleted was safe on its own.
	ErrIncomplete = errors.New("gc: pass incomplete")
)

// errRaceLost: a seal transaction found the pointer, seal, epoch,
// generation or holder changed since it read them, more times than
// decommission retries.
var errRaceLost = errors.New("gc: state changed concurrently")

// etcdErr classifies err from an etcd call bounded by a per-request timeout
// derived from ctx: the caller's cancellation passes through; a timeout, an
// unreachable endpoint or a lost leader (retry.EtcdUnavailable) become
// fencepub.ErrUnavailable.
func etcdErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("gc: %s: %w", what, context.Cause(ctx))
	}
	if retry.EtcdUnavailable(err) {
		return fmt.Errorf("%w: etcd %s: %w", fencepub.ErrUnavailable, what, err)
	}
	return fmt.Errorf("gc: etcd %s: %w", what, err)
}

// storeErr classifies err from an object-store call like etcdErr.
func storeErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("gc: %s: %w", what, context.Cause(ctx))
	}
	if errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: object store %s: %w", fencepub.ErrUnavailable, what, err)
	}
	return fmt.Errorf("gc: object store %s: %w", what, err)
}

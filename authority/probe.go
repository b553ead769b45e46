package authority

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
)

// ErrCreateOnlyIgnored is wrapped by *CreateOnlyError: the object store
// accepted a create-only write onto a key that exists.
var ErrCreateOnlyIgnored = errors.New("authority: the object store ignores create-only writes (If-None-Match: *)")

// CreateOnlyError reports a store that overwrote an existing object
// although the write asked for create-only (If-None-Match: *). fencepub
// needs that guarantee: a publisher's retried write, epoch and grant
// markers and the bucket ownership marker rely on a 412 for an existing
// key (DESIGN.md "Publish, in one round trip to etcd" step 1, invariants 3
// and 9).
type CreateOnlyError struct {
	// Store names the store: its endpoint and bucket.
	Store string
	// Key is the probe object the store overwrote.
	Key string
}

func (e *CreateOnlyError) Error() string {
	return fmt.Sprintf("authority: the object store %s overwrote %s although the PUT was create-only (If-None-Match: *): "+
		"it does not honour conditional writes, which fencepub needs (use MinIO, AWS S3 or a store that answers 412 PreconditionFailed)", e.Store, e.Key)
}

func (e *CreateOnlyError) Unwrap() error { return ErrCreateOnlyIgnored }

// ProbeCreateOnly checks that s refuses a create-only write onto an
// existing key: it writes key create-only (created now, or already there
// from an earlier probe), then again, and that second write must fail with
// objstore.ErrExists. The probe object is tiny and left in place (a worker
// may not delete objects, invariant 13). A 409 ConditionalRequestConflict
// (a concurrent probe) is retried.
// store names s in the error. It blocks for at most two writes, each
// bounded by ctx.
//
// Errors: *CreateOnlyError (ErrCreateOnlyIgnored) when the second write
// succeeded; ErrUnavailable or the store's error for a write that failed
// otherwise.
func ProbeCreateOnly(ctx context.Context, s objstore.Store, store, key string) error {
	body := []byte(`{"probe":"create-only"}`)
	put := func() error {
		for i := 0; ; i++ {
			_, err := objstore.PutSmallCreateOnly(ctx, s, key, body, markerContentType)
			if !errors.Is(err, objstore.ErrConditionConflict) || i == conflictRetries {
				return err
			}
			time.Sleep(time.Duration(i+1) * 20 * time.Millisecond) // a concurrent probe's write
		}
	}
	if err := put(); err != nil && !errors.Is(err, objstore.ErrExists) {
		return storeErr(ctx, "create-only probe "+key, err)
	}
	err := put()
	switch {
	case err == nil:
		return &CreateOnlyError{Store: store, Key: key}
	case errors.Is(err, objstore.ErrExists):
		return nil
	}
	return storeErr(ctx, "create-only probe "+key, err)
}

// probeStore runs ProbeCreateOnly on the authority's store, each write
// bounded by RequestTimeout.
func (a *Authority) probeStore(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 2*a.cfg.RequestTimeout)
	defer cancel()
	return ProbeCreateOnly(rctx, a.st, StoreName(a.st), a.ns.CreateOnlyProbeObject())
}

// StoreName names a store in messages: its String (s3store's is "<endpoint
// URL>, bucket <name>") when it has one, else its bucket.
func StoreName(s objstore.Store) string {
	if n, ok := s.(fmt.Stringer); ok {
		return n.String()
	}
	return fmt.Sprintf("bucket %q", s.BucketName())
}

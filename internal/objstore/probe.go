package objstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrCreateOnlyIgnored: the store accepted a create-only write
// (If-None-Match: *) onto a key that exists. fencepub needs that guarantee:
// a publisher's retried write, the epoch and grant markers and the bucket
// ownership marker rely on a 412 for an existing key (DESIGN.md "Publish, in
// one round trip to etcd" step 1, invariants 3 and 9). The root package
// re-exports it as fencepub.ErrCreateOnlyIgnored.
var ErrCreateOnlyIgnored = errors.New("objstore: create-only writes ignored")

// probeConflictRetries bounds the retries of a probe write answered 409
// ConditionalRequestConflict (a concurrent probe).
const probeConflictRetries = 5

// probeBody and probeContentType are the probe object's bytes and type.
var probeBody = []byte(`{"probe":"create-only"}`)

const probeContentType = "application/json"

// ProbeCreateOnly checks that st refuses a create-only write onto an
// existing key: it writes key create-only (created now, or already there
// from an earlier probe), then again, and that second write must fail with
// ErrExists. The probe object is 23 bytes and left in place (a worker may
// not delete objects, DESIGN.md invariant 13). A write answered
// ErrConditionFailed (a concurrent probe) is retried up to 5 times. It
// blocks for at most those writes, each bounded by ctx.
//
// Errors: ErrCreateOnlyIgnored (wrapped, naming the store, by its String when
// it has one, and the key) when the second write succeeded; the store's error
// (ErrUnavailable, ErrAccessDenied, ...) for a write that failed otherwise.
func ProbeCreateOnly(ctx context.Context, st Store, key string) error {
	put := func() error {
		for i := 0; ; i++ {
			_, err := PutSmallCreateOnly(ctx, st, key, probeBody, probeContentType)
			if !errors.Is(err, ErrConditionFailed) || i == probeConflictRetries {
				return err
			}
			time.Sleep(time.Duration(i+1) * 20 * time.Millisecond) // a concurrent probe's write
		}
	}
	if err := put(); err != nil && !errors.Is(err, ErrExists) {
		return err
	}
	err := put()
	switch {
	case err == nil:
		return fmt.Errorf("%w: the object store %s overwrote %s although the PUT was create-only (If-None-Match: *): "+
			"it does not honour conditional writes, which fencepub needs (use MinIO, AWS S3 or a store that answers 412 PreconditionFailed)",
			ErrCreateOnlyIgnored, name(st), key)
	case errors.Is(err, ErrExists):
		return nil
	}
	return err
}

// name names st in messages: its String (s3store's is "<endpoint URL>,
// bucket <name>") when it has one, else its bucket.
func name(st Store) string {
	if n, ok := st.(fmt.Stringer); ok {
		return n.String()
	}
	return fmt.Sprintf("bucket %q", st.BucketName())
}

// Overwriter is a Store that can also write without a condition (s3store
// is one). Only ProbeOverwrite uses it: fencepub writes no data this way.
type Overwriter interface {
	// PutOverwrite writes body to key in one PUT without If-None-Match,
	// replacing an object at key (in a versioned bucket: adding a version).
	// ErrAccessDenied when the store refuses it for these credentials.
	PutOverwrite(ctx context.Context, key string, body []byte, contentType string) error
}

// ProbeOverwrite tells whether the store lets st's credentials overwrite an
// existing object: it writes key once more, without If-None-Match, with the
// probe's own 23 bytes, so the probe object's content never changes (a
// versioned bucket gains a version of it). Call it on a key that
// ProbeCreateOnly has just probed with the same credentials. It returns
// true when the store refused the write with ErrAccessDenied (AWS S3 under
// a policy that admits object creation only with an If-None-Match header,
// docs/security-object-store.md), false when the write went through
// (MinIO and SeaweedFS, which have no such policy condition). It blocks
// for one write, bounded by ctx.
//
// Errors: the store's error (ErrUnavailable, ...) for a write that failed
// otherwise.
func ProbeOverwrite(ctx context.Context, st Overwriter, key string) (refused bool, err error) {
	err = st.PutOverwrite(ctx, key, probeBody, probeContentType)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, ErrAccessDenied):
		return true, nil
	}
	return false, err
}

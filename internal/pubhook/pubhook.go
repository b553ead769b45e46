// Package pubhook reaches the operations of package publisher that are not
// its API, for the programs of this repository that drive the protocol one
// step at a time (the chaos soak, the error-contract test): the seq a
// Publisher's next publish takes, the request digest of an operation, which
// `fencepub resolve --file` also computes, and the republish of an object
// an etcd restore lost, which `fencepub authority recover --republish` runs
// through recovery.RestoreLost. Package publisher sets them when it is
// initialised, so they are set in any program that imports it.
package pubhook

import "context"

var (
	// NextSeq returns the seq the next publish of p (a
	// *publisher.Publisher) will use.
	NextSeq func(p any) uint64
	// RequestDigest returns the request digest of op (a
	// publisher.Operation), 64 lowercase hex digits, as Publish computes it:
	// it validates op, reads op.Body to EOF (until ctx ends) and hashes it
	// with the content type and metadata. Errors: fencepub.ErrInvalid,
	// publisher.ErrBody, ctx's error.
	RequestDigest func(ctx context.Context, op any) (string, error)
	// Republish publishes the object at objectKey again with p (a
	// *publisher.Publisher) under idempotency key, as a new version, and
	// returns its publisher.Result.
	Republish func(ctx context.Context, p any, objectKey, key string) (any, error)
)

// Package pubhook reaches the two operations of package publisher that are
// not its API, for the programs of this repository that drive the protocol
// one step at a time (the chaos soak, the error-contract test): the seq a
// Publisher's next publish takes, and the republish of an object an etcd
// restore lost, which `fencepub authority recover --republish` runs through
// recovery.RestoreLost. Package publisher sets both when it is
// initialised, so they are set in any program that imports it.
package pubhook

import "context"

var (
	// NextSeq returns the seq the next publish of p (a
	// *publisher.Publisher) will use.
	NextSeq func(p any) uint64
	// Republish publishes the object at objectKey again with p (a
	// *publisher.Publisher) under idempotency key, as a new version, and
	// returns its publisher.Result.
	Republish func(ctx context.Context, p any, objectKey, key string) (any, error)
)

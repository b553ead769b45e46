// Package operator reaches what the fencepub CLI's operator commands read
// and change in a domain beyond the library's API: a lease's state for
// `fencepub authority show`, the domain's epoch and the bucket's history
// for `init`, `setup-roles` and `doctor`, the resources of `fencepub ls`
// (implemented by packages authority and reader), and the decommission of
// `fencepub resource delete` (package gc). Each package sets its
// functions when it is initialised, so they are set in any program that
// imports that package.
package operator

import (
	"context"

	"github.com/fencepub/fencepub"
)

var (
	// Inspect reads with a (an *authority.Authority) res's epoch,
	// generation and holder in one etcd transaction, plus the holder
	// lease's remaining TTL. Errors: fencepub.ErrInvalidName,
	// fencepub.ErrUnavailable, fencepub.ErrCorruptState.
	Inspect func(ctx context.Context, a any, res string) (LeaseState, error)
	// Epoch returns the current epoch of a's domain (a is an
	// *authority.Authority; one linearizable read). Errors:
	// fencepub.ErrNotInitialized, fencepub.ErrUnavailable,
	// fencepub.ErrCorruptState.
	Epoch func(ctx context.Context, a any) (uint64, error)
	// CheckHistory reports whether the etcd of a (an
	// *authority.Authority) may own what the bucket holds under the
	// domain's root: nil when the domain is initialised, when the root is
	// empty, or when it holds only the ownership marker of an init of this
	// etcd in progress. It writes nothing. Errors:
	// authority.ErrForeignHistory, fencepub.ErrUnavailable,
	// fencepub.ErrCorruptState. The rule: DESIGN.md invariant 9.
	CheckHistory func(ctx context.Context, a any) error
	// Resources lists the resources that have a pointer in the domain of
	// cfg (a reader.Config), sorted by name, read at one etcd revision,
	// 1000 keys per read (DESIGN.md "Reading"). Errors:
	// fencepub.ErrInvalid, fencepub.ErrUnavailable,
	// fencepub.ErrCorruptRecord, ctx's error.
	Resources func(ctx context.Context, cfg any) ([]Resource, error)
	// State returns the pointer and seal of r's resource (r is a
	// *reader.Reader), read in one etcd transaction; a resource granted
	// but never published has the zero Pointer. Errors:
	// reader.ErrUnknownResource, fencepub.ErrUnavailable,
	// fencepub.ErrCorruptRecord, ctx's error.
	State func(ctx context.Context, r any) (Resource, error)
	// Decommission retires res with c (a *gc.Collector): one etcd
	// transaction raises its seal to (epoch, generation, fencepub.MaxNumber)
	// so no fence of its past can publish (the gc package doc,
	// "Decommissioning"). Errors: fencepub.ErrInvalid,
	// gc.ErrUnknownResource, authority.ErrHeld (a live lease and !force),
	// fencepub.ErrNotInitialized, fencepub.ErrCorruptState, a concurrent
	// change (run again), fencepub.ErrUnavailable, ctx's error.
	Decommission func(ctx context.Context, c any, res string, force bool) (Decommissioned, error)
)

// LeaseState is a resource's authority state read at one etcd revision.
type LeaseState struct {
	Resource string
	// Epoch is the domain's epoch (0: domain not initialised).
	Epoch uint64
	// Generation is the resource's durable generation: its latest fence.
	Generation uint64
	// Holder is the live holder, an authority.Holder; nil when none.
	Holder   any
	Revision int64
}

// Resource is one resource of a domain as Resources and State read it.
type Resource struct {
	Name string
	// Pointer is the published pointer: the zero Pointer while nothing is
	// published.
	Pointer fencepub.Pointer
	// Seal is the resource's seal; Seal.Retires(Pointer.Version) reports
	// a resource retired by `fencepub resource delete`.
	Seal fencepub.Seal
}

// Decommissioned is the result of Decommission.
type Decommissioned struct {
	Resource string `json:"resource"`
	// Seal is the seal after the call: (epoch, generation, max) or the
	// higher seal that was already there.
	Seal fencepub.Version `json:"seal"`
	// Previous is max(pointer, seal) before the call.
	Previous fencepub.Version `json:"previous"`
	// Already is true when the resource was already retired at or above
	// the target, or its pointer is there (nothing written).
	Already bool `json:"already"`
	// Holder is the live grant that was sealed out (only with force), an
	// *authority.Grant; nil otherwise.
	Holder any `json:"holder,omitempty"`
	// Revision is the etcd revision of the deciding read or transaction.
	Revision int64 `json:"revision"`
}

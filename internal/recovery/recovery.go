// Package recovery is the operator's recovery of a domain after an etcd
// restore or loss, which `fencepub authority recover` runs: the report of
// the epoch move (Recover, implemented by package authority) and the
// republish of what the restore lost (RestoreLost, implemented by package
// publisher). Each package sets its function when it is initialised, so it
// is set in any program that imports that package.
package recovery

import (
	"context"
	"time"

	"github.com/fencepub/fencepub"
)

var (
	// Recover moves the domain of a (an *authority.Authority) to a new
	// epoch after an etcd restore and repairs a corrupt epoch key the same
	// way (the authority package doc, "How Recover works"). Every step is
	// idempotent: after a failure, run it again. Its errors are those of
	// the authority package (ErrForeignHistory: retry with FromBucket).
	Recover func(ctx context.Context, a any, opts Options) (Report, error)
	// RestoreLost republishes with c (a *publisher.Client), under grants
	// of a (an *authority.Authority), the newest object above each
	// restored pointer of rep that could have been published under the new
	// epoch. It returns one Restored per resource it tried, in rep's order.
	RestoreLost func(ctx context.Context, c, a any, rep Report) []Restored
)

// Options configures Recover. The zero value performs the recovery.
type Options struct {
	// DryRun computes and reports what Recover would do and changes nothing
	// (NewEpoch is then the epoch it would reserve).
	DryRun bool
	// FromBucket takes over a bucket whose etcd history is lost with no
	// snapshot (an empty replacement etcd): etcd must hold no epoch for the
	// domain. Recover then adopts the ownership marker's deployment id and
	// quarantines every object found (DESIGN.md invariant 9). Without it,
	// Recover on an etcd with no epoch refuses a bucket that holds anything
	// under the domain's root.
	FromBucket bool
}

// Report describes a Recover run.
type Report struct {
	DryRun bool `json:"dry_run"`
	// FromBucket is true for a take-over of the bucket by an etcd without
	// the domain's history (Options.FromBucket).
	FromBucket   bool   `json:"from_bucket"`
	DeploymentID string `json:"deployment_id"`
	// OldEpoch is etcd's epoch before the recovery (0: the restored etcd had
	// no epoch); NewEpoch the epoch the domain is in afterwards.
	OldEpoch uint64 `json:"old_epoch"`
	NewEpoch uint64 `json:"new_epoch"`
	// Highest is the highest epoch found in each source; NewEpoch is one
	// above all of them and OldEpoch.
	Highest EpochSources `json:"highest_seen"`
	// RollbackFlag is the rollback evidence Acquire had recorded (cleared).
	RollbackFlag string `json:"rollback_flag,omitempty"`
	// CorruptEpoch is the value of an epoch key that did not decode, which
	// Recover replaced (OldEpoch is then 0: unknown).
	CorruptEpoch string `json:"corrupt_epoch,omitempty"`
	// Revoked lists the holders whose leases were revoked: every holder the
	// restored etcd had (they were all granted before NewEpoch).
	Revoked []RevokedHolder `json:"revoked"`
	// Resources lists, per resource with a pointer or objects, the pointer
	// the restore left and the objects above it.
	Resources []ResourceRecovery `json:"resources"`
}

// EpochSources are the highest epochs Recover found in each place that the
// restore did not roll back (the bucket) and in the restored pointers.
type EpochSources struct {
	EpochMarker uint64 `json:"epoch_marker"`
	GrantMarker uint64 `json:"grant_marker"`
	Pointer     uint64 `json:"pointer"`
	Object      uint64 `json:"object"`
}

// RevokedHolder is a holder whose lease Recover revoked.
type RevokedHolder struct {
	Resource   string `json:"resource"`
	Owner      string `json:"owner"`
	Epoch      uint64 `json:"epoch"`
	Generation uint64 `json:"generation"`
	LeaseID    int64  `json:"lease_id,string"` // a string: IDs exceed 2^53, where JSON numbers lose digits
}

// ResourceRecovery is one resource's state after a restore.
type ResourceRecovery struct {
	Resource string `json:"resource"`
	// RestoredPointer is the pointer version etcd had (zero when it had no
	// pointer); Recover records it under the restored key of (resource,
	// OldEpoch), so GC quarantines old-epoch objects above it.
	RestoredPointer fencepub.Version `json:"restored_pointer"`
	HasPointer      bool             `json:"has_pointer"`
	// Above are the objects whose version is above RestoredPointer, in
	// version order (newest last): publishes the restore may have lost,
	// or unpublished attempts. `recover --republish` republishes the newest.
	Above []LostObject `json:"above"`
	// Recorded lists the old epochs for which Recover recorded
	// RestoredPointer (DESIGN.md "etcd layout"): OldEpoch when the resource had a
	// pointer, and every epoch of an object in Above — GC quarantines an
	// old-epoch object only through the record of its own epoch.
	Recorded []uint64 `json:"recorded_epochs"`
}

// LostObject is an object above a restored pointer.
type LostObject struct {
	Key          string           `json:"key"`
	Version      fencepub.Version `json:"version"`
	Size         int64            `json:"size"`
	LastModified time.Time        `json:"last_modified"`
}

// Restored is one resource's outcome of RestoreLost.
type Restored struct {
	Resource string           `json:"resource"`
	From     fencepub.Version `json:"from"` // the lost object's old-epoch version
	Key      string           `json:"key"`  // the object republished
	// Result is the republish's publisher.Result (its zero value when the
	// republish failed before it published).
	Result any    `json:"result"`
	Error  string `json:"error,omitempty"`
}

// Package operator reaches what the fencepub CLI's operator commands read
// and change in a domain beyond the library's API: a lease's state for
// `fencepub authority show`, the domain's epoch, its initialisation, the
// bucket's history and its ownership for `init`, `setup-roles`, `doctor`
// and the check before a publish, the resources of `fencepub ls`
// (implemented by packages authority and reader), the decommission of
// `fencepub resource delete`, the detailed pass report of `fencepub gc run`
// and the daemon of `fencepub gc daemon` (package gc). Each package sets
// its functions when it is initialised, so they are set in any program that
// imports that package.
package operator

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/prometheus/client_golang/prometheus"
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
	// Init initialises the domain of a (an *authority.Authority) if it is
	// not yet and returns its epoch and deployment id; on an initialised
	// domain it is one etcd read (the authority package doc, "How a domain
	// is initialised"; Acquire does it too). It is idempotent and safe to
	// run concurrently. It refuses, writing nothing, a bucket that holds
	// another etcd history. Errors: fencepub.ErrCreateOnlyIgnored (naming
	// the store), authority.ErrForeignHistory, fencepub.ErrUnavailable,
	// authority.ErrExhausted, fencepub.ErrCorruptState.
	Init func(ctx context.Context, a any) (Domain, error)
	// CheckOwnership checks with a (an *authority.Authority) that the
	// bucket belongs to this etcd's history: the domain is initialised and
	// the bucket's ownership marker names etcd's deployment id; it returns
	// the Domain and writes nothing. Errors: fencepub.ErrNotInitialized
	// or, when the bucket holds another history,
	// authority.ErrForeignHistory; authority.ErrNoOwnership,
	// authority.ErrForeignDeployment; fencepub.ErrInvalid and
	// fencepub.ErrObjectNotFound (a missing bucket);
	// fencepub.ErrUnavailable; fencepub.ErrCorruptState. The rule:
	// DESIGN.md invariant 9.
	CheckOwnership func(ctx context.Context, a any) (Domain, error)
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
	// NewDaemon gives cfg's zero fields their defaults (DefaultDaemonConfig;
	// an Owner generated per process), checks them and returns the GC
	// daemon (the gc package doc; DESIGN.md "Garbage collection"). Errors:
	// fencepub.ErrInvalid naming the field.
	NewDaemon func(cfg DaemonConfig) (Daemon, error)
	// RunGC runs one pass of c (a *gc.Collector) over opts (a
	// gc.RunOptions) as Collector.Run does and returns its detailed report,
	// in every case; verbose keeps every decision in GCReport.Decisions
	// (memory grows with the object count). Errors: Collector.Run's.
	RunGC func(ctx context.Context, c any, opts any, verbose bool) (*GCReport, error)
	// DefaultDaemonConfig returns the values NewDaemon gives DaemonConfig's
	// zero fields: Interval 5 min, LeaseTTL 15 s.
	DefaultDaemonConfig func() DaemonConfig
)

// DaemonConfig configures NewDaemon.
type DaemonConfig struct {
	// Collector is the *gc.Collector whose passes the daemon runs;
	// required.
	Collector any
	// Interval is the time from the end of one pass to the start of the
	// next.
	Interval time.Duration
	// LeaseTTL is the TTL of the GC lease, the reserved resource "_gc"
	// (whole seconds, at least 2 s). A killed leader is replaced within
	// about one TTL.
	LeaseTTL time.Duration
	// Owner identifies this replica in the lease; "" generates one.
	Owner string
	// Resources are the resources of each pass; none means all. All with
	// Resources is refused.
	Resources []string
	All       bool
	// Logger; default: the Collector's.
	Logger *slog.Logger
	// Metrics, a *gc.Metrics or nil, reports leadership
	// (fencepub_gc_leader); the pass metrics come from the Collector's.
	Metrics any
}

// Daemon runs GC passes on a schedule. Several replicas may run; only the
// holder of the GC lease runs passes, and safety never depends on it.
type Daemon interface {
	// Run campaigns for the GC lease and, while holding it, runs a pass at
	// once and then every Interval, until ctx ends; then it releases the
	// lease and returns nil.
	Run(ctx context.Context) error
	// Handler serves /healthz, /readyz and /metrics (g's metrics).
	Handler(g prometheus.Gatherer) http.Handler
}

// Domain is the result of Init and CheckOwnership: the domain's current
// epoch and the id of the deployment that owns it (in etcd and in the
// bucket's ownership marker).
type Domain struct {
	Epoch        uint64 `json:"epoch"`
	DeploymentID string `json:"deployment_id"`
}

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
	Seal layout.Seal
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

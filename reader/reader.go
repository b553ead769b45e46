package reader

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/debuglog"
	"github.com/fencepub/fencepub/internal/errkind"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/leader"
	"github.com/fencepub/fencepub/internal/manifest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors returned (wrapped) by Reader methods and in Update.Err; test with
// errors.Is. A pointer value that does not decode is fencepub.ErrCorruptRecord.
var (
	// ErrNotPublished: the resource has no published version yet.
	ErrNotPublished = errors.New("reader: nothing published")
	// ErrUnknownResource: etcd holds no pointer, no generation counter
	// and no restore record of the resource: it was never granted in the
	// domain (a misspelt name, or another domain's resource), as opposed
	// to granted and not yet published (ErrNotPublished alone). An error
	// wrapping it also wraps ErrNotPublished, so errors.Is(err,
	// ErrNotPublished) holds for both. These keys are durable and never
	// deleted, so the answer does not flip back (DESIGN.md "Reading").
	ErrUnknownResource error = &subError{msg: "reader: unknown resource", parent: ErrNotPublished}
	// ErrNotRetained: OpenVersion's version has no history entry: it was
	// never published, or GC pruned it once it was no longer retained
	// (DESIGN.md "Reading", "Garbage collection"). History lists the
	// retained ones.
	ErrNotRetained = errors.New("reader: version not retained")
	// ErrObjectMissing: the current pointer's object does not exist. Loud on
	// purpose: a published object must never be deleted (invariant 7).
	ErrObjectMissing = errors.New("reader: the published object is missing")
	// ErrObjectChanged: the object under the pointer's key no longer has the
	// pointer's ETag (objects are immutable, so something overwrote it).
	ErrObjectChanged = errors.New("reader: the published object changed")
	// ErrDigestMismatch: the bytes read do not match the pointer's sha256 or
	// size. Returned by Body.Read at the end of the body.
	ErrDigestMismatch = errors.New("reader: object bytes do not match the pointer's sha256")
	// ErrWentBack: the pointer is below a version this Reader already
	// returned (invariant 6 forbids showing it). Only etcd's history going
	// back explains it: a restore from a backup not yet followed by
	// `fencepub authority recover --republish`, or a pointer written out of
	// band. The error names both versions; a new Reader starts afresh.
	ErrWentBack = errors.New("reader: the pointer went back below a version already read")
	// ErrDecommissioned: the current pointer's object is gone because the
	// resource was retired (`fencepub resource delete`: a decommission
	// seal at or above the pointer) and GC collected its objects; not data
	// loss.
	ErrDecommissioned = errors.New("reader: the resource was decommissioned")
)

// defaultOpenRetries bounds how often Open follows a newer pointer after the
// object it tried was collected.
const defaultOpenRetries = 3

// defaultRequestTimeout bounds a call's wait for the pointer.
const defaultRequestTimeout = 5 * time.Second

// readAttempts is how many etcd reads of the pointer fit in one
// RequestTimeout: each read is bounded by RequestTimeout/readAttempts, so a
// read sent to a stalled member leaves time for retries that reach another
// one (DESIGN.md invariant 12).
const readAttempts = 3

// Config holds a Reader's dependencies and options.
type Config struct {
	// Env locates the domain. The Reader closes neither client.
	fencepub.Env
	// Logger receives watch re-syncs; nil discards.
	Logger *slog.Logger
	// Serializable makes Current and Open read the pointer from the local
	// etcd member without a quorum round (faster, possibly stale). A read
	// that returns a version below one this Reader already saw is repeated
	// linearizably, so versions never go back. Watch's syncs are always
	// linearizable.
	Serializable bool
	// OpenRetries bounds Open's retries after a collected object; default
	// 3.
	OpenRetries int
	// RequestTimeout bounds a call's wait for the pointer (Current, Open and
	// Watch's syncs) from its arrival, retries of a read that failed with
	// etcd unavailable included: an etcd that does not answer in time is
	// fencepub.ErrUnavailable instead of a wait as long as the caller's
	// context (the etcd client waits for a connection indefinitely). Each
	// etcd read is bounded by a third of it, so one sent to a stalled member
	// is retried, usually on another member, within the call's
	// RequestTimeout. Default 5 s.
	RequestTimeout time.Duration
	// StallTimeout, when positive, ends an object read that receives no byte
	// for that long — no response to the GET, or a body that stops — with
	// fencepub.ErrUnavailable; only the time spent waiting inside Read
	// counts, not the caller's pauses between reads. minio-go bounds the wait
	// for response headers, never a body that stops. 0 waits as long as the
	// caller's context.
	StallTimeout time.Duration
}

// Reader reads one resource's published state. It is safe for concurrent
// use.
type Reader struct {
	cfg Config
	res string
	key string // the pointer's etcd key
	log *slog.Logger
	kv  clientv3.KV // cfg.Etcd, its round trips logged at debug level

	mu     sync.Mutex
	seen   layout.Version  // highest version returned so far
	seenAt int64           // the etcd revision at which seen was written
	opened layout.Pointer  // the pointer of the last object opened
	reads  [2]readQueue    // pointer reads: [0] linearizable, [1] serializable
	cache  *manifest.Cache // dataset manifests by sha256 (dataset.go), made on first use
}

// DefaultConfig returns the values New gives Config's tunables when they
// are zero: OpenRetries 3, RequestTimeout 5 s; StallTimeout 0 (no stall
// bound). Env and Logger are left zero.
func DefaultConfig() Config {
	return Config{OpenRetries: defaultOpenRetries, RequestTimeout: defaultRequestTimeout}
}

// Validate checks c without a network call: Namespace as
// fencepub.NewNamespace checks it, Etcd set, no negative tunable. Store may
// be nil for a Reader that only calls Current and Watch. Errors:
// fencepub.ErrInvalid naming the field.
func (c Config) Validate() error {
	if _, err := fencepub.NewNamespace(c.Namespace.Prefix, c.Namespace.Domain); err != nil {
		return fmt.Errorf("reader.Config.Namespace: %w", err)
	}
	return cmp.Or(
		errkind.Nil("reader.Config.Etcd", c.Etcd == nil),
		errkind.Negative("reader.Config.OpenRetries", c.OpenRetries),
		errkind.Negative("reader.Config.RequestTimeout", c.RequestTimeout),
		errkind.Negative("reader.Config.StallTimeout", c.StallTimeout),
	)
}

// New checks cfg (Validate) and resource (a resource name), gives cfg's
// zero tunables their defaults (DefaultConfig) and returns a Reader of
// resource. It makes no network call. Errors: fencepub.ErrInvalid naming
// the field; with fencepub.ErrInvalidName for a bad resource name.
func New(cfg Config, resource string) (*Reader, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := layout.ValidateResource(resource, false); err != nil {
		return nil, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rlog := log.With("resource", resource)
	cfg.Store = debuglog.Store(cfg.Store, rlog)
	return &Reader{cfg: cfg, res: resource, key: layout.Namespace(cfg.Namespace).PointerKey(resource), log: log, kv: debuglog.KV(leader.KV(cfg.Etcd), rlog)}, nil
}

// withDefaults checks cfg (Validate) and gives its zero tunables their
// defaults (DefaultConfig). Errors: as Validate.
func (cfg Config) withDefaults() (Config, error) {
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	d := DefaultConfig()
	cfg.OpenRetries = cmp.Or(cfg.OpenRetries, d.OpenRetries)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, d.RequestTimeout)
	return cfg, nil
}

// subError is a sentinel error that is also its parent kind: errors.Is of
// it, or of an error wrapping it, holds for parent too.
type subError struct {
	msg    string
	parent error
}

func (e *subError) Error() string { return e.msg }
func (e *subError) Unwrap() error { return e.parent }

package authority

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/retry"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type (
	mvccKV     = mvccpb.KeyValue
	responseOp = pb.ResponseOp
)

// Defaults of Config's optional fields (DefaultConfig).
const (
	defaultRequestTimeout = 5 * time.Second
	defaultRetryTimeout   = 30 * time.Second
	defaultMarkerKeep     = 16
	defaultMaxTxnOps      = 128
)

// DefaultConfig returns the values New gives Config's optional fields when
// they are zero: RequestTimeout 5 s, RetryTimeout 30 s, MarkerKeep 16,
// MaxTxnOps 128. Env and Logger are left zero.
func DefaultConfig() Config {
	return Config{RequestTimeout: defaultRequestTimeout, RetryTimeout: defaultRetryTimeout, MarkerKeep: defaultMarkerKeep, MaxTxnOps: defaultMaxTxnOps}
}

// Config is the runtime configuration of an Authority: live clients and
// policy. Namespace, Etcd and Store are required; zero values of the others
// take the defaults each field states.
type Config struct {
	// Env locates the domain: every key the authority touches lives under
	// its Namespace, in its etcd; the authority keeps its epoch and grant
	// markers in its Store too (under _fencepub/), because they must
	// survive an etcd restore. The Authority closes neither client.
	fencepub.Env
	// RequestTimeout bounds each single etcd or object-store request; a
	// request that gets no answer in time fails with fencepub.ErrUnavailable
	// rather than blocking until the caller's context ends. Default 5 s.
	RequestTimeout time.Duration
	// RetryTimeout bounds the retries of one etcd request whose caller's
	// context has no deadline: an attempt that gets no answer within
	// RequestTimeout, or an answer that the cluster cannot serve it now (no
	// leader, a leader change), is sent again — usually to another member —
	// until ctx's deadline, or RetryTimeout when ctx has none (DESIGN.md
	// invariant 12). Default 30 s.
	RetryTimeout time.Duration
	// MarkerKeep is how many grant markers per resource survive pruning
	// below the newest one (at least 1). Default 16.
	MarkerKeep int
	// MaxTxnOps is etcd's limit on the operations of one transaction: it
	// must equal the server's --max-txn-ops (CLI key etcd.max_txn_ops).
	// AcquireGroup refuses a group that would not fit. Default 128, etcd's.
	MaxTxnOps int
	// Logger receives warnings and recover's progress. Default: discard.
	Logger *slog.Logger
}

// Authority grants fenced leases for the resources of one domain: each
// grant's generation (the fence) is minted in the same etcd transaction that
// grants the lease, from a durable per-resource counter (DESIGN.md
// invariants 2 and 3; protocol source, §Mint: minting belongs to the same
// atomic authority as granting).
// An Authority is safe for concurrent use. It owns no goroutines except
// those of the Sessions it returns.
type Authority struct {
	cfg Config
	ns  layout.Namespace
	cli *clientv3.Client
	// kv and lease are cli's, their round trips logged at debug level.
	kv    clientv3.KV
	lease clientv3.Lease
	st    objstore.Store
	log   *slog.Logger

	mu    sync.Mutex
	known map[string]counter // last (epoch, generation) seen per resource
}

// counter is the authority state a grant transaction compares.
type counter struct{ epoch, gen uint64 }

// domain is the result of initDomain and checkOwnership: the domain's
// current epoch and the id of the deployment that owns it.
type domain = operator.Domain

// Validate checks c without a network call: Namespace as
// fencepub.NewNamespace checks it, Etcd and Store set, no negative
// tunable. Errors: fencepub.ErrInvalid naming the field.
func (c Config) Validate() error {
	if _, err := fencepub.NewNamespace(c.Namespace.Prefix, c.Namespace.Domain); err != nil {
		return fmt.Errorf("authority.Config.Namespace: %w", err)
	}
	return cmp.Or(
		errkind.Nil("authority.Config.Etcd", c.Etcd == nil),
		errkind.Nil("authority.Config.Store", c.Store == nil),
		errkind.Negative("authority.Config.RequestTimeout", c.RequestTimeout),
		errkind.Negative("authority.Config.RetryTimeout", c.RetryTimeout),
		errkind.Negative("authority.Config.MarkerKeep", c.MarkerKeep),
		errkind.Negative("authority.Config.MaxTxnOps", c.MaxTxnOps),
	)
}

// New checks cfg (Validate), gives its zero tunables their defaults
// (DefaultConfig) and returns an Authority. It makes no network call.
// Errors: fencepub.ErrInvalid naming the field.
func New(cfg Config) (*Authority, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := DefaultConfig()
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, d.RequestTimeout)
	cfg.RetryTimeout = cmp.Or(cfg.RetryTimeout, d.RetryTimeout)
	cfg.MarkerKeep = cmp.Or(cfg.MarkerKeep, d.MarkerKeep)
	cfg.MaxTxnOps = cmp.Or(cfg.MaxTxnOps, d.MaxTxnOps)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Authority{
		cfg: cfg, ns: layout.Namespace(cfg.Namespace), cli: cfg.Etcd, st: debuglog.Store(cfg.Store, cfg.Logger), log: cfg.Logger,
		kv: debuglog.KV(leader.KV(cfg.Etcd), cfg.Logger), lease: debuglog.Lease(leader.Lease(cfg.Etcd), cfg.Logger),
		known: make(map[string]counter),
	}, nil
}

// rctx derives the context of one request: ctx bounded by RequestTimeout.
func (a *Authority) rctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.cfg.RequestTimeout)
}

// call runs op, one etcd request that is safe to send twice, retrying it
// while it fails with fencepub.ErrUnavailable (retry.Do, jittered backoff):
// each attempt is bounded by attempt (RequestTimeout when 0), all of them by
// ctx's deadline or, when ctx has none, RetryTimeout. op's error is
// classified by etcdErr against the caller's ctx, so the caller's own
// cancellation ends the retries at once and passes through; when the caller's
// deadline ends them, the error wraps both fencepub.ErrUnavailable and
// context.DeadlineExceeded.
func (a *Authority) call(ctx context.Context, what string, attempt time.Duration, op func(context.Context) error) error {
	return a.retried(ctx, attempt, op, func(err error) error { return etcdErr(ctx, what, err) },
		func(err error) bool { return errors.Is(err, fencepub.ErrUnavailable) })
}

// storeCall runs op, one object-store request that is safe to send twice (a
// read, or a create-only write whose caller recognises its own object when
// a re-send finds it existing), the way call runs an etcd request: retried
// while it fails with ErrUnavailable (objstore.ErrUnavailable, no answer
// within RequestTimeout) or a 409 conflict of a concurrent conditional
// write (objstore.ErrConditionFailed), within ctx's deadline or
// RetryTimeout (DESIGN.md invariant 12). op's error is classified by
// storeErr.
func (a *Authority) storeCall(ctx context.Context, what string, op func(context.Context) error) error {
	return a.retried(ctx, 0, op, func(err error) error { return storeErr(ctx, what, err) },
		func(err error) bool {
			return errors.Is(err, fencepub.ErrUnavailable) || errors.Is(err, objstore.ErrConditionFailed)
		})
}

// retried is the loop of call and storeCall: op's errors pass through
// classify (nil stays nil) and are retried while retryable holds.
func (a *Authority) retried(ctx context.Context, attempt time.Duration, op func(context.Context) error,
	classify func(error) error, retryable func(error) bool) error {
	if attempt <= 0 {
		attempt = a.cfg.RequestTimeout
	}
	bctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		bctx, cancel = context.WithTimeout(ctx, a.cfg.RetryTimeout)
	}
	defer cancel()
	var unavailable error // the last fencepub.ErrUnavailable of an attempt
	err := retry.Do(bctx, func(bctx context.Context) error {
		actx, cancel := context.WithTimeout(bctx, attempt)
		defer cancel()
		err := classify(op(actx))
		if errors.Is(err, fencepub.ErrUnavailable) {
			unavailable = err
		}
		return err
	}, retryable)
	if err != nil && unavailable != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The caller's deadline ended the retries: the service was
		// unavailable until then, which is what the caller needs to hear.
		return fmt.Errorf("%w; retried until the caller's deadline: %w", unavailable, context.Cause(ctx))
	}
	return err
}

func (a *Authority) remember(res string, c counter) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.known[res]; !ok || old.epoch < c.epoch || old.epoch == c.epoch && old.gen < c.gen {
		a.known[res] = c
	}
}

func (a *Authority) recall(res string) (counter, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.known[res]
	return c, ok
}

// NewID returns 16 random bytes as 32 lowercase hex digits: a fresh owner
// id, request id or deployment id.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux (crypto/rand)
	return hex.EncodeToString(b[:])
}

// readDomain reads the epoch and deployment keys at one revision. ok is
// false when the domain has no epoch yet.
func (a *Authority) readDomain(ctx context.Context) (d domain, ok bool, err error) {
	var resp *clientv3.TxnResponse
	err = a.call(ctx, "read domain", 0, func(rctx context.Context) (err error) {
		resp, err = a.kv.Txn(rctx).Then(clientv3.OpGet(a.ns.EpochKey()), clientv3.OpGet(a.ns.DeploymentKey())).Commit()
		return err
	})
	if err != nil {
		return domain{}, false, err
	}
	return decodeDomain(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
}

func decodeDomain(epochKVs, depKVs []*mvccKV) (domain, bool, error) {
	if len(epochKVs) == 0 {
		return domain{}, false, nil
	}
	e, err := layout.DecodeNumber(string(epochKVs[0].Value))
	if err != nil {
		return domain{}, false, fmt.Errorf("%w: epoch key: %w", fencepub.ErrCorruptState, err)
	}
	d := domain{Epoch: e}
	if len(depKVs) > 0 {
		d.DeploymentID = string(depKVs[0].Value)
	}
	return d, true, nil
}

// currentEpoch is operator.Epoch: the domain's current epoch (one
// linearizable read). Errors: fencepub.ErrNotInitialized,
// fencepub.ErrUnavailable, fencepub.ErrCorruptState.
func (a *Authority) currentEpoch(ctx context.Context) (uint64, error) {
	d, ok, err := a.readDomain(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: no epoch key under %q", fencepub.ErrNotInitialized, a.ns.Root())
	}
	return d.Epoch, nil
}

// initDomain is operator.Init (`fencepub init`, `setup-roles`; Acquire and
// AcquireGroup call it on an uninitialised domain): it initialises the
// domain if it is not yet and returns its epoch and deployment id; on an
// initialised domain it is one etcd read (DESIGN.md "etcd layout",
// invariants 3 and 9; the package doc, "How a domain is initialised"). It
// is idempotent and safe to run concurrently from many
// processes of the same etcd. It refuses, writing nothing, a bucket that
// holds another etcd history (`fencepub authority recover --from-bucket` takes one over).
// Errors: fencepub.ErrCreateOnlyIgnored (naming the store), ErrForeignHistory,
// fencepub.ErrUnavailable, ErrExhausted, fencepub.ErrCorruptState.
func (a *Authority) initDomain(ctx context.Context) (domain, error) {
	d, ok, err := a.readDomain(ctx)
	if err != nil || ok {
		return d, err
	}
	if err := a.probeStore(ctx); err != nil {
		return domain{}, err
	}
	dep, err := a.checkBucket(ctx)
	if err == nil && dep == "" {
		dep, err = a.claimOwnership(ctx)
	}
	if err != nil {
		return domain{}, err
	}
	nonce := NewID()
	for range 8 {
		maxEpoch, err := a.maxEpochMarker(ctx)
		if err != nil {
			return domain{}, err
		}
		if maxEpoch >= layout.MaxNumber {
			return domain{}, fmt.Errorf("%w: epoch markers reach %d", ErrExhausted, maxEpoch)
		}
		epoch := maxEpoch + 1
		ours, err := a.reserveEpoch(ctx, epochMarker{Epoch: epoch, Deployment: dep, Reason: "init", Nonce: nonce})
		if err != nil {
			return domain{}, err
		}
		if !ours {
			// Another process reserved the epoch first; an init of the same
			// deployment may use it too (only one etcd txn below succeeds).
			m, err := a.readEpochMarker(ctx, epoch)
			if err != nil {
				return domain{}, err
			}
			if m.Reason != "init" || m.Deployment != dep {
				continue
			}
		}
		// Re-sending is safe: a copy after one that applied fails its
		// compare and reads the epoch back (Else).
		var resp *clientv3.TxnResponse
		err = a.call(ctx, "init domain", 0, func(rctx context.Context) (err error) {
			resp, err = a.kv.Txn(rctx).
				If(clientv3.Compare(clientv3.CreateRevision(a.ns.EpochKey()), "=", 0), clientv3.Compare(clientv3.Value(a.ns.DeploymentKey()), "=", dep)).
				Then(append(a.epochRecordOps(dep, "init", epoch), clientv3.OpPut(a.ns.EpochKey(), layout.EncodeNumber(epoch)))...).
				Else(clientv3.OpGet(a.ns.EpochKey()), clientv3.OpGet(a.ns.DeploymentKey())).
				Commit()
			return err
		})
		if err != nil {
			// The outcome is unknown: the marker stays reserved either way.
			return domain{}, err
		}
		if resp.Succeeded {
			a.log.Info("authority: domain initialised", "root", a.ns.Root(), "epoch", epoch, "deployment", dep)
			return domain{Epoch: epoch, DeploymentID: dep}, nil
		}
		// A concurrent init won; an epoch marker we reserved stays unused,
		// which is harmless: epochs need to be unique, not contiguous.
		got, ok, err := decodeDomain(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
		if err == nil && !ok {
			err = fmt.Errorf("authority: init: deployment %s lost its claim on etcd's deployment key (another deployment took the bucket prefix?); run again", dep)
		}
		return got, err
	}
	return domain{}, fmt.Errorf("authority: init: could not reserve an epoch marker after 8 attempts (concurrent recovers?)")
}

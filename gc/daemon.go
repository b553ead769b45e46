package gc

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/errkind"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/retry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of daemonConfig (defaultDaemonConfig).
const (
	defaultInterval      = 5 * time.Minute
	defaultLeaseTTL      = 15 * time.Second
	defaultLeaseResource = "_gc"
)

// defaultDaemonConfig returns the values newDaemon gives daemonConfig's
// optional fields when they are zero: Interval 5 min, LeaseTTL 15 s,
// LeaseResource "_gc". Collector, Owner (generated per process), Run,
// Logger, Metrics and OnPass are left zero.
func defaultDaemonConfig() daemonConfig {
	return daemonConfig{Interval: defaultInterval, LeaseTTL: defaultLeaseTTL, LeaseResource: defaultLeaseResource}
}

// Readiness check bounds: /readyz reaches etcd and the store at most once
// per readyCheckTTL (probes are answered from the cached result between
// checks), and a check gives up after readyCheckTimeout, below the 1 s a
// kubelet waits for a probe by default, so the body can say why.
const (
	readyCheckTTL     = 3 * time.Second
	readyCheckTimeout = 800 * time.Millisecond
)

// daemonConfig configures a daemon. Collector is required; zero values of
// the others take the defaults.
type daemonConfig struct {
	Collector *Collector
	// Interval is the time from the end of one pass to the start of the
	// next. Default 5 min.
	Interval time.Duration
	// LeaseTTL is the GC lease's TTL (whole seconds, at least
	// 2 s, etcd's minimum). A killed leader is replaced within about one TTL.
	// Default 15 s.
	LeaseTTL time.Duration
	// LeaseResource is the reserved ('_'-prefixed) resource whose lease
	// elects the acting replica. Default "_gc".
	LeaseResource string
	// Owner identifies this replica in the lease. Default
	// "gc-<hostname>-<pid>-<random>".
	Owner string
	// Run selects the resources of each pass; the zero value means all.
	// DryRun is ignored.
	Run RunOptions
	// Logger; default: the Collector's.
	Logger *slog.Logger
	// Metrics, if set, reports leadership (fencepub_gc_leader); the pass
	// metrics come from the Collector's Config.Metrics.
	Metrics *Metrics
	// OnPass, if set, is called after each pass with its report and error.
	OnPass func(*passReport, error)
}

// daemonStatus is a daemon's state: the body of /healthz, and of /readyz
// within readyStatus.
type daemonStatus struct {
	Owner      string    `json:"owner"`
	Running    bool      `json:"running"`
	Leader     bool      `json:"leader"`
	Standby    bool      `json:"standby"`              // another replica held the GC lease when this one last campaigned
	Generation uint64    `json:"generation,omitempty"` // the GC lease's fence while leader
	Passes     int64     `json:"passes"`
	LastPass   time.Time `json:"last_pass,omitzero"`
	LastOK     time.Time `json:"last_success,omitzero"`
	// LastOKTook is how long the pass that ended at LastOK ran.
	LastOKTook time.Duration `json:"-"`
	// LastError is the error of this replica's last pass as leader, ""
	// when that pass had none (or none ran).
	LastError string `json:"last_error"`
}

// readyStatus is the body of /readyz: the state, whether this replica is
// ready, and why not (or "standby" for a ready standby).
type readyStatus struct {
	daemonStatus
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"` // "" for a ready leader
}

// daemon runs GC passes on a schedule. Several replicas may run; only the
// holder of the GC lease (authority, resource LeaseResource) runs passes.
// Safety never depends on the lease (every deletion is safe on its own);
// it only keeps replicas from doing the same work twice (DESIGN.md "Garbage
// collection": only the lease holder acts, but safety never depends on it).
type daemon struct {
	cfg  daemonConfig
	c    *Collector
	auth *authority.Authority
	log  *slog.Logger

	mu     sync.Mutex
	status daemonStatus

	// checkMu serializes the dependency checks of /readyz and guards the
	// cached result: checked is when it ran, checkErr what it found.
	checkMu  sync.Mutex
	checked  time.Time
	checkErr error
}

// validate checks c without a network call: Collector set, no negative
// Interval or LeaseTTL, LeaseResource (when set) a reserved resource name,
// Owner (when set) an owner name, Run not naming resources together with
// all. Errors: fencepub.ErrInvalid naming the field.
func (c daemonConfig) validate() error {
	if err := cmp.Or(
		errkind.Nil("operator.DaemonConfig.Collector", c.Collector == nil),
		errkind.Negative("operator.DaemonConfig.Interval", c.Interval),
		errkind.Negative("operator.DaemonConfig.LeaseTTL", c.LeaseTTL),
	); err != nil {
		return err
	}
	if c.Run.All && len(c.Run.Resources) > 0 {
		return fmt.Errorf("%w: operator.DaemonConfig names Resources and All", fencepub.ErrInvalid)
	}
	if c.LeaseResource != "" {
		if err := layout.ValidateResource(c.LeaseResource, true); err != nil {
			return fmt.Errorf("%w: the GC lease resource: %w", fencepub.ErrInvalid, err)
		}
	}
	if c.Owner != "" {
		if err := layout.ValidateOwner(c.Owner); err != nil {
			return fmt.Errorf("%w: operator.DaemonConfig.Owner: %w", fencepub.ErrInvalid, err)
		}
	}
	return nil
}

// newDaemon gives cfg's zero fields their defaults (defaultDaemonConfig;
// an Owner generated per process), checks it (validate) and returns a
// daemon. Errors: fencepub.ErrInvalid naming the field.
func newDaemon(cfg daemonConfig) (*daemon, error) {
	d := defaultDaemonConfig()
	cfg.Interval = cmp.Or(cfg.Interval, d.Interval)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, d.LeaseTTL)
	cfg.LeaseResource = cmp.Or(cfg.LeaseResource, d.LeaseResource)
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.Owner = fmt.Sprintf("gc-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if len(cfg.Run.Resources) == 0 {
		cfg.Run.All = true
	}
	cfg.Run.DryRun = false
	if cfg.Logger == nil {
		cfg.Logger = cfg.Collector.log
	}
	return &daemon{cfg: cfg, c: cfg.Collector, auth: cfg.Collector.auth, log: cfg.Logger, status: daemonStatus{Owner: cfg.Owner}}, nil
}

// snapshot returns a copy of the daemon's state.
func (d *daemon) snapshot() daemonStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status
}

func (d *daemon) update(f func(*daemonStatus)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(&d.status)
}

// Run campaigns for the GC lease and, while holding it, runs a pass at once
// and then every Interval. It blocks until ctx ends, then cancels a running
// pass (each deletion is safe on its own, so stopping anywhere is safe),
// releases the lease so another replica takes over at once, and returns
// nil. Losing the lease cancels the running pass and campaigns again.
// Errors from authority (etcd unreachable, ...) are logged and retried with
// a jittered back-off (retry.Do); they do not end Run.
func (d *daemon) Run(ctx context.Context) error {
	d.update(func(s *daemonStatus) { s.Running = true })
	defer d.update(func(s *daemonStatus) { s.Running, s.Leader, s.Standby, s.Generation = false, false, false, 0 })
	requestID := ""
	for ctx.Err() == nil {
		var g authority.Grant
		if err := retry.Do(ctx, func(ctx context.Context) error {
			if requestID == "" {
				requestID = randomHex(16)
			}
			var err error
			if g, err = d.campaign(ctx, requestID); err != nil && ctx.Err() == nil {
				d.log.Warn("gc daemon: acquiring the GC lease", "err", err)
				if !errors.Is(err, fencepub.ErrUnavailable) {
					requestID = "" // fencepub.ErrUnavailable: the grant may exist, ask again with the same request id
				}
			}
			return err
		}, func(error) bool { return true }); err != nil {
			return nil // only ctx's end stops the retries
		}
		requestID = ""
		d.lead(ctx, g)
	}
	return nil
}

// campaign acquires the GC lease with requestID, waiting while another
// replica holds it. It asks once without waiting first, so that a replica
// that finds another leader is marked standby (ready) while it waits.
func (d *daemon) campaign(ctx context.Context, requestID string) (authority.Grant, error) {
	req := authority.AcquireRequest{
		Resource: d.cfg.LeaseResource, Owner: d.cfg.Owner, RequestID: requestID,
		TTL: d.cfg.LeaseTTL,
	}
	ctx = layout.WithReservedNames(ctx)
	g, err := d.auth.Acquire(ctx, req)
	if !errors.Is(err, authority.ErrHeld) {
		return g, err
	}
	d.update(func(s *daemonStatus) { s.Standby = true })
	req.Wait = true
	return d.auth.Acquire(ctx, req)
}

// lead runs passes while g holds the GC lease.
func (d *daemon) lead(ctx context.Context, g authority.Grant) {
	sess, err := d.auth.NewSession(ctx, g)
	if err != nil {
		d.log.Warn("gc daemon: GC lease lost before its session started", "err", err)
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		if err := sess.Close(); err != nil && !errors.Is(err, authority.ErrLeaseLost) {
			d.log.Warn("gc daemon: releasing the GC lease", "err", err)
		}
		d.update(func(s *daemonStatus) { s.Leader, s.Generation = false, 0 })
		if d.cfg.Metrics != nil {
			d.cfg.Metrics.leader.Set(0)
		}
	}()
	// The running pass stops as soon as the session can no longer vouch
	// for the lease; this goroutine ends with lctx.
	go func() {
		select {
		case <-sess.Lost():
			cancel()
		case <-lctx.Done():
		}
	}()
	d.log.Info("gc daemon: holding the GC lease", "owner", g.Owner, "fence", g.Generation)
	d.update(func(s *daemonStatus) { s.Leader, s.Standby, s.Generation = true, false, g.Generation })
	if d.cfg.Metrics != nil {
		d.cfg.Metrics.leader.Set(1)
	}
	for {
		d.pass(lctx, g)
		t := time.NewTimer(d.cfg.Interval)
		select {
		case <-lctx.Done():
			t.Stop()
			if ctx.Err() == nil {
				d.log.Warn("gc daemon: GC lease lost", "err", sess.Err())
			}
			return
		case <-t.C:
		}
	}
}

// pass runs one pass under the lease (ctx ends when the lease is lost) and
// prunes the GC lease's own grant and request records. A pass cut short by
// ctx is not recorded.
func (d *daemon) pass(ctx context.Context, g authority.Grant) {
	start := time.Now()
	rep, err := d.c.runPass(ctx, d.cfg.Run, false)
	if err == nil {
		_, err = d.c.pruneLease(ctx, d.cfg.LeaseResource, g.Generation)
	}
	if ctx.Err() != nil {
		return // cut short by shutdown or a lost lease: not a pass result
	}
	if err != nil {
		d.log.Warn("gc daemon: pass failed", "fence", g.Generation, "outcome", passOutcome(err), "duration_ms", time.Since(start).Milliseconds(), "err", err)
	}
	now := time.Now()
	d.update(func(s *daemonStatus) {
		s.Passes++
		s.LastPass = now
		if err == nil {
			s.LastOK, s.LastOKTook, s.LastError = now, now.Sub(start), ""
		} else {
			s.LastError = err.Error()
		}
	})
	if d.cfg.OnPass != nil {
		d.cfg.OnPass(rep, err)
	}
}

// readiness says whether a replica in state s, running passes every
// interval, is ready at now, and why not: Run must be running; a leader
// needs a pass without errors that ended at most two cycles ago, a cycle
// being the interval (the wait after a pass) plus that pass's duration, so
// that a healthy leader whose passes take longer than the interval (a large
// bucket, a slow etcd) stays ready while its next pass runs; a standby
// (another replica held the GC lease at its last campaign) is ready with
// reason "standby"; a replica still campaigning is not.
func (s daemonStatus) readiness(now time.Time, interval time.Duration) (bool, string) {
	switch {
	case !s.Running:
		return false, "not running"
	case s.Leader && s.LastOK.IsZero() && s.Passes == 0:
		return false, "leader: first pass not finished"
	case s.Leader && s.LastOK.IsZero():
		return false, "leader: no pass without errors yet; last error: " + s.LastError
	case s.Leader && now.Sub(s.LastOK) > 2*(interval+s.LastOKTook):
		return false, fmt.Sprintf("leader: last pass without errors ended %s ago, more than 2x (the interval %s + that pass's %s); last error: %s",
			now.Sub(s.LastOK).Round(time.Millisecond), interval, s.LastOKTook.Round(time.Millisecond), s.LastError)
	case s.Leader:
		return true, ""
	case s.Standby:
		return true, "standby"
	default:
		return false, "campaigning for the GC lease"
	}
}

// checkDeps reports whether etcd and the object store answer: one
// linearizable etcd read of one key (it needs a quorum) and one bucket
// call, together bounded by readyCheckTimeout. The result is cached for
// readyCheckTTL; concurrent callers wait for one check, which does not end
// with a caller's context (a probe that gave up must not keep the next one
// from a cached answer). The error names etcd or the object store.
func (d *daemon) checkDeps(ctx context.Context) error {
	d.checkMu.Lock()
	defer d.checkMu.Unlock()
	if !d.checked.IsZero() && time.Since(d.checked) < readyCheckTTL {
		return d.checkErr
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyCheckTimeout)
	defer cancel()
	var err error
	if _, e := d.c.cli.Get(ctx, d.c.ns.EpochKey(), clientv3.WithCountOnly()); e != nil {
		err = fmt.Errorf("etcd unreachable: %w", e)
	} else if e := d.c.st.CheckBucket(ctx); e != nil {
		err = fmt.Errorf("object store unreachable: %w", e)
	}
	d.checked, d.checkErr = time.Now(), err
	return err
}

// Handler serves /healthz (liveness), /readyz (readiness) and /metrics (g
// in the Prometheus text format). /healthz answers 200 while Run is
// running, else 503, and never contacts etcd or the store. /readyz answers
// 200 for a fresh leader and for a standby, else 503: etcd or the object
// store does not answer, the leader has no recent pass without errors, or
// the replica has no role yet. Both answer the daemon's state as JSON (the
// package doc, "Probes and metrics"). Handlers are safe for concurrent use;
// a /readyz check takes at most 800 ms and outlives a request that gives
// up.
func (d *daemon) Handler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, st any, ok bool) {
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(st)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		st := d.snapshot()
		write(w, st, st.Running)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		st := readyStatus{daemonStatus: d.snapshot()}
		st.Ready, st.Reason = st.readiness(time.Now(), d.cfg.Interval)
		if st.Running {
			if err := d.checkDeps(r.Context()); err != nil {
				st.Ready, st.Reason = false, err.Error()
			}
		}
		write(w, st, st.Ready)
	})
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

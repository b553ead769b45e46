package gc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/debuglog"
	"github.com/fencepub/fencepub/internal/errkind"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/leader"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/retry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of Config's optional fields (DefaultConfig).
const (
	defaultOpRetention       = 7 * 24 * time.Hour
	defaultRequestRetention  = 24 * time.Hour
	maxDeleteBatch           = 1000 // S3's limit per multi-object delete
	defaultDeleteConcurrency = 4
	defaultRequestTimeout    = 10 * time.Second
)

// DefaultConfig returns the values New gives Config's optional fields when
// they are zero: Policy keeps 2 versions with a 10 min grace, 1 min skew
// and a 1 h abandon period; OpRetention 7 days; RequestRetention 24 h;
// DeleteBatch 1000, S3's limit per multi-object delete and the largest
// allowed; DeleteConcurrency 4; RequestTimeout 10 s. Env, Authority,
// Logger and Metrics are left zero.
func DefaultConfig() Config {
	return Config{
		Policy:      Policy{Retain: defaultRetain, Grace: defaultGrace, ClockSkew: defaultClockSkew, AbandonAfter: defaultAbandonAfter},
		OpRetention: defaultOpRetention, RequestRetention: defaultRequestRetention,
		DeleteBatch: maxDeleteBatch, DeleteConcurrency: defaultDeleteConcurrency, RequestTimeout: defaultRequestTimeout,
	}
}

// Config is a Collector's runtime configuration: live clients and policy.
// Env (the domain's Namespace, its etcd client and its bucket) is
// required; zero values of the others take the defaults.
type Config struct {
	// Env locates the domain. Its Etcd client is not closed by the
	// Collector.
	fencepub.Env
	// Authority checks the bucket's ownership marker before a pass (and
	// explains an uninitialised domain) and, for the daemon (`fencepub gc
	// daemon`), grants the GC lease. Nil: New builds one from Env with the
	// authority's defaults.
	Authority *authority.Authority
	// Policy says what to keep; zero fields take their defaults.
	Policy Policy
	// OpRetention is how long op records (idempotency records) live after
	// their commit, on the domain clock (clock.go): the retry/replay window
	// of DESIGN.md invariant 5. Default 7 days.
	OpRetention time.Duration
	// RequestRetention is how long an acquire request record lives after
	// its last change, on the domain clock, so that an acquire retried with
	// the same request id gets its original grant back (DESIGN.md "etcd
	// layout"). Default 24 h.
	RequestRetention time.Duration
	// DeleteBatch is the number of keys per multi-object delete, 1–1000.
	// Default 1000.
	DeleteBatch int
	// DeleteConcurrency is how many multi-object deletes run at once.
	// Default 4.
	DeleteConcurrency int
	// RequestTimeout bounds each etcd request and each object-store call
	// other than a listing. Default 10 s.
	RequestTimeout time.Duration
	// Logger receives warnings and per-pass summaries. Default: discard.
	Logger *slog.Logger
	// Metrics, if set, counts deletions and passes and reports the last
	// pass's kept objects (NewMetrics).
	Metrics *Metrics
	// now is this process's wall clock (UTC not required). Default
	// time.Now. It ages in-flight objects (the abandon period) and bounds
	// each advance of the domain clock, which etcd's lease timer bounds too,
	// so a clock running ahead cannot age a record (clock.go). Tests and the
	// chaos soak inject another clock (wallclock.With) to age objects
	// without sleeping.
	now func() time.Time
	// leases is the clock witness's lease API; default Etcd. Tests inject
	// one whose leases report more elapsed time.
	leases leases
}

// Collector runs GC passes over the resources of one domain. It is safe for
// concurrent use, and several Collectors (in one or many processes) may run
// passes at once: every deletion is safe on its own (DESIGN.md invariant 7).
type Collector struct {
	cfg  Config
	ns   layout.Namespace
	cli  clientv3.KV // Config.Etcd, its round trips logged at debug level
	st   objstore.Store
	auth *authority.Authority
	log  *slog.Logger
	m    *Metrics
	now  func() time.Time
	// leases serves the domain clock's witness leases.
	leases leases
	// window is allWindow; tests make it smaller.
	window int
	// manifests caches dataset manifests across passes (readNamed).
	manifests *manifest.Cache

	// Test hooks: afterState runs after a resource's snapshot is read and
	// before its listing starts; beforeSeal runs before an abandon seal
	// transaction.
	afterState func(res string)
	beforeSeal func(res string)
	// beforeClockTxn runs before an advance's transaction.
	beforeClockTxn func()
}

// Validate checks c without a network call: Namespace as
// fencepub.NewNamespace checks it, Etcd and Store set, DeleteBatch 0 or
// 1–1000, no negative duration, count or Policy field. Errors:
// fencepub.ErrInvalid naming the field.
func (c Config) Validate() error {
	if _, err := fencepub.NewNamespace(c.Namespace.Prefix, c.Namespace.Domain); err != nil {
		return fmt.Errorf("gc.Config.Namespace: %w", err)
	}
	if c.DeleteBatch < 0 || c.DeleteBatch > maxDeleteBatch {
		return fmt.Errorf("%w: gc.Config.DeleteBatch %d is outside 1..%d", fencepub.ErrInvalid, c.DeleteBatch, maxDeleteBatch)
	}
	return cmp.Or(
		errkind.Nil("gc.Config.Etcd", c.Etcd == nil),
		errkind.Nil("gc.Config.Store", c.Store == nil),
		errkind.Negative("gc.Config.OpRetention", c.OpRetention),
		errkind.Negative("gc.Config.RequestRetention", c.RequestRetention),
		errkind.Negative("gc.Config.RequestTimeout", c.RequestTimeout),
		errkind.Negative("gc.Config.DeleteConcurrency", c.DeleteConcurrency),
		c.Policy.validate(),
	)
}

// New checks cfg (Validate), gives its zero fields their defaults
// (DefaultConfig; an Authority built from Env when Authority is nil) and
// returns a Collector. It makes no network call. Errors:
// fencepub.ErrInvalid naming the field.
func New(cfg Config) (*Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := DefaultConfig()
	cfg.Policy = cfg.Policy.withDefaults()
	cfg.OpRetention = cmp.Or(cfg.OpRetention, d.OpRetention)
	cfg.RequestRetention = cmp.Or(cfg.RequestRetention, d.RequestRetention)
	cfg.DeleteBatch = cmp.Or(cfg.DeleteBatch, d.DeleteBatch)
	cfg.DeleteConcurrency = cmp.Or(cfg.DeleteConcurrency, d.DeleteConcurrency)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, d.RequestTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Authority == nil {
		a, err := authority.New(authority.Config{Env: cfg.Env, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.Authority = a
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.leases == nil {
		cfg.leases = leader.Lease(cfg.Etcd)
	}
	return &Collector{
		cfg: cfg, ns: layout.Namespace(cfg.Namespace), cli: debuglog.KV(leader.KV(cfg.Etcd), cfg.Logger), st: debuglog.Store(cfg.Store, cfg.Logger), auth: cfg.Authority,
		log: cfg.Logger, m: cfg.Metrics, now: cfg.now, leases: cfg.leases, window: allWindow,
		manifests: newManifestCache(),
	}, nil
}

// rctx bounds one request by RequestTimeout.
func (c *Collector) rctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// retryTimeout bounds the retries of one etcd request whose caller's
// context has no deadline.
const retryTimeout = 30 * time.Second

// call runs op, one etcd request that is safe to send twice (a read, or a
// transaction whose compares make a second copy a no-op), each attempt
// bounded by RequestTimeout, again while it fails with etcd unavailable
// (retry.Do, retry.EtcdUnavailable): no leader, a stalled or unreachable
// member, no answer in time. It retries within ctx's deadline or, when ctx
// has none, retryTimeout (DESIGN.md invariant 12). The error is op's last,
// classified by etcdErr naming what; when the caller's deadline ended the
// retries of an unavailable etcd, it wraps both fencepub.ErrUnavailable and
// context.DeadlineExceeded.
func (c *Collector) call(ctx context.Context, what string, op func(context.Context) error) error {
	bctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		bctx, cancel = context.WithTimeout(ctx, retryTimeout)
	}
	defer cancel()
	unavailable := false // an attempt met etcd unavailable before ctx ended
	err := retry.Do(bctx, func(bctx context.Context) error {
		rctx, cancel := c.rctx(bctx)
		defer cancel()
		err := op(rctx)
		unavailable = unavailable || ctx.Err() == nil && retry.EtcdUnavailable(err)
		return err
	}, retry.EtcdUnavailable)
	if err == nil {
		return nil
	}
	if unavailable && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The caller's deadline ended the retries: etcd was unavailable
		// until then, which is what the caller needs to hear.
		return fmt.Errorf("%w: etcd %s: retried until the caller's deadline: %w", fencepub.ErrUnavailable, what, context.Cause(ctx))
	}
	return etcdErr(ctx, what, err)
}

// RunOptions selects what a pass covers.
type RunOptions struct {
	// Resources to collect; with All, every resource that has a pointer or
	// a restored-pointer record (listResources). Exactly one of the two
	// must be given.
	Resources []string
	All       bool
	// DryRun classifies and reports without deleting, sealing or aborting
	// anything; the decisions are the same as a real pass's.
	DryRun bool
	// Progress, if set, is called with the running count of scanned keys
	// after each one, from the goroutines of the resources collected at
	// once, one call at a time and in increasing order; it must not block.
	Progress func(scanned int64)
}

// Run performs one pass and returns its report, in every case (the package
// doc, "A pass"). It first checks the bucket's ownership marker (else nothing
// is touched); a resource that fails does not stop the others. It blocks
// until the pass ends or ctx is cancelled (deletions already sent complete
// or fail on their own). Errors: fencepub.ErrInvalid (options),
// authority.ErrForeignDeployment, ErrNoOwnership, fencepub.ErrNotInitialized,
// authority.ErrForeignHistory (DESIGN.md invariant 9),
// fencepub.ErrUnavailable; ErrIncomplete joining the per-resource errors.
func (c *Collector) Run(ctx context.Context, opts RunOptions) (*Report, error) {
	rep, err := c.runPass(ctx, opts, false)
	return rep.summary(), err
}

// runPass is Run with the detailed report, every decision in it when
// verbose (memory grows with the object count; without it a pass holds
// only counts).
func (c *Collector) runPass(ctx context.Context, opts RunOptions, verbose bool) (*passReport, error) {
	start := time.Now()
	rep := newReport(opts.DryRun, verbose, c.now())
	err := c.run(ctx, opts, rep)
	rep.Duration = time.Since(start).Seconds()
	if err != nil && !errors.Is(err, ErrIncomplete) {
		rep.fail("", err) // ErrIncomplete's parts are in the report already
	}
	if c.m != nil && !opts.DryRun && ctx.Err() == nil {
		// A pass cut short by its context (shutdown, lost lease) is
		// expected, not a failure.
		c.m.pass(time.Since(start), rep, err)
	}
	c.log.Info("gc: pass done", "dry_run", opts.DryRun, "resources", rep.Resources, "scanned", rep.Scanned,
		"deleted", rep.Deleted, "sealed", rep.Sealed, "errors", len(rep.Errors), "outcome", passOutcome(err), "duration_ms", time.Since(start).Milliseconds())
	return rep, err
}

// passOutcome is the outcome attribute of a pass that ended with err.
func passOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrIncomplete):
		return "incomplete"
	}
	return "error"
}

func (c *Collector) run(ctx context.Context, opts RunOptions, rep *passReport) error {
	if opts.All == (len(opts.Resources) > 0) {
		return fmt.Errorf("%w: give either resources or all", fencepub.ErrInvalid)
	}
	for _, r := range opts.Resources {
		if err := layout.ValidateResource(r, false); err != nil {
			return fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
		}
	}
	dep, err := c.checkOwnership(ctx)
	if err != nil {
		return err
	}
	clk, err := c.advanceClock(ctx, opts.DryRun)
	if err != nil {
		return err
	}
	rep.Clock = clk.report(c.cfg.Policy, c.cfg.OpRetention, c.cfg.RequestRetention)
	for _, w := range c.bucketWarnings(ctx) {
		c.log.Warn("gc: " + w)
		rep.warn(w)
	}
	resources := opts.Resources
	if opts.All {
		if resources, err = c.listResources(ctx, rep); err != nil {
			return err
		}
	}
	rep.Resources = len(resources)
	uploads, upErr := c.listUploads(ctx, resources)
	if upErr != nil {
		// Objects are still collected, but no abandon seal is raised: it
		// could cover an upload the failed listing did not show. Uploads
		// and abandoned objects wait for the next pass.
		upErr = fmt.Errorf("listing incomplete uploads: %w", upErr)
		rep.fail("", upErr)
		uploads = nil
	}
	errs := c.collectAll(ctx, resources, dep, clk, uploads, opts, rep)
	if upErr != nil {
		errs = append(errs, upErr)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrIncomplete, errors.Join(errs...))
	}
	return nil
}

// How a pass groups resources. A resource's collection is a chain of
// dependent round trips (snapshot, listing, records), each leaving the
// servers mostly idle; a pass over thousands of resources batches and
// overlaps them. Every step is safe beside any other collector's (DESIGN.md
// invariant 7), the pass's own included.
const (
	// resourceConcurrency is how many named resources (RunOptions.Resources)
	// a pass collects at once, each with its own snapshot and listing.
	resourceConcurrency = 8
	// allWindow is how many resources of an All pass share one window: their
	// snapshots are read in transactions of stateBatch, then ONE listing
	// covers their objects (they are adjacent in key order).
	allWindow = 64
	// windowConcurrency is how many windows an All pass collects at once.
	windowConcurrency = 4
)

// collectAll collects resources in windows (RunOptions.All: up to
// allWindow resources adjacent in object-key order, never spanning the
// metadata directory, windowConcurrency windows at once; named resources:
// one per window, resourceConcurrency at once), with at most
// resourceConcurrency resources finishing (finish) and
// Config.DeleteConcurrency multi-object deletes in flight across all of
// them, and returns the per-resource errors in window order. Once ctx ends
// no window is started; the first resource not started is reported once.
func (c *Collector) collectAll(ctx context.Context, resources []string, dep string, clk *clockReading, uploads map[string][]entry, opts RunOptions, rep *passReport) []error {
	windows := c.windows(resources, opts.All)
	conc := resourceConcurrency
	if opts.All {
		conc = windowConcurrency
	}
	errs := make([][]error, len(windows))
	started := make([]bool, len(windows))
	lim := passLimits{deletes: make(chan struct{}, c.cfg.DeleteConcurrency), finishing: make(chan struct{}, resourceConcurrency)}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, len(windows)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(windows) && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				started[i] = true
				errs[i] = c.collectWindow(ctx, windows[i], opts.All, dep, clk, uploads, lim, opts, rep)
			}
		})
	}
	wg.Wait()
	var out []error
	if i := slices.Index(started, false); i >= 0 {
		err := fmt.Errorf("gc: stopped before %q: %w", windows[i][0], context.Cause(ctx))
		rep.fail("", err)
		out = append(out, err)
	}
	for i, win := range windows {
		for j, err := range errs[i] {
			if err != nil {
				c.log.Warn("gc: resource failed", "resource", win[j], "err", err)
				rep.fail(win[j], err)
				out = append(out, fmt.Errorf("resource %q: %w", win[j], err))
			}
		}
	}
	return out
}

// windows groups resources into a pass's windows: with all, sorted by object
// prefix, in runs of c.window, a run ending where the prefixes pass the
// metadata directory (whose keys a window's listing would otherwise read);
// else one resource each.
func (c *Collector) windows(resources []string, all bool) [][]string {
	if !all {
		return slices.Collect(slices.Chunk(resources, 1))
	}
	sorted := slices.Clone(resources)
	slices.SortFunc(sorted, func(a, b string) int { return strings.Compare(c.ns.ObjectsPrefix(a), c.ns.ObjectsPrefix(b)) })
	meta := c.ns.MetaPrefix()
	split, _ := slices.BinarySearchFunc(sorted, meta, func(r, meta string) int { return strings.Compare(c.ns.ObjectsPrefix(r), meta) })
	var out [][]string
	for _, part := range [][]string{sorted[:split], sorted[split:]} {
		out = slices.AppendSeq(out, slices.Chunk(part, c.window))
	}
	return out
}

// passLimits are the slots a pass's resources share: deletes bounds the
// multi-object deletes in flight, finishing the resources in finish.
type passLimits struct {
	deletes, finishing chan struct{}
}

// checkOwnership returns etcd's deployment id after checking that the
// bucket's ownership marker names it (operator.CheckOwnership; DESIGN.md
// "Object layout": GC refuses to delete under a prefix whose marker names
// another deployment).
func (c *Collector) checkOwnership(ctx context.Context) (string, error) {
	d, err := operator.CheckOwnership(ctx, c.auth)
	return d.DeploymentID, err
}

// bucketWarnings reports bucket settings that defeat or bypass GC: with
// versioning and no lifecycle rule expiring the noncurrent versions under
// the domain root, a delete only adds a delete marker (the bytes stay for
// ever); a lifecycle rule that acts on current objects or uploads may
// expire objects GC keeps. A rule that only expires noncurrent versions
// (and expired delete markers) is the recommended companion of versioning
// (docs/security-object-store.md) and is not reported.
func (c *Collector) bucketWarnings(ctx context.Context) []string {
	var out []string
	rctx, cancel := c.rctx(ctx)
	defer cancel()
	b := c.st.BucketName()
	set, err := c.st.Settings(rctx)
	if err != nil {
		out = append(out, fmt.Sprintf("could not %v", err))
	}
	if _, expiring := set.NoncurrentExpiry(c.ns.Root()); !expiring && (set.Versioning == "Enabled" || set.Versioning == "Suspended") {
		out = append(out, fmt.Sprintf("bucket %q has versioning %s and no lifecycle rule expiring noncurrent versions under %s: deletes only add delete markers and the old versions keep their space; expire noncurrent versions with a lifecycle rule", b, set.Versioning, c.ns.Root()))
	}
	if n := len(set.BypassingRules()); n > 0 {
		out = append(out, fmt.Sprintf("bucket %q has %d lifecycle rule(s) acting on current objects or uploads: they may expire published, retained or in-flight objects behind GC's back (invariant 7 no longer holds for them)", b, n))
	}
	return out
}

// listResources returns every resource that has a pointer key or a
// restored-pointer record, sorted, each once. A resource whose creation a
// restore lost, and every resource `recover --from-bucket` found, has only
// the latter; its quarantined objects are still classified, counted and
// reported (DESIGN.md "Garbage collection"). Names that do not decode or
// validate are reported as warnings.
func (c *Collector) listResources(ctx context.Context, rep *passReport) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, src := range []struct{ prefix, what string }{
		{c.ns.PointersPrefix(), "pointer key"}, {c.ns.RestoredRecordsPrefix(), "restored-pointer record"},
	} {
		err := c.scan(ctx, src.prefix, 0, true, func(kv *mvccKV) error {
			seg, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), src.prefix), "/")
			name, err := url.PathUnescape(seg)
			if err == nil {
				err = layout.ValidateResource(name, false)
			}
			switch {
			case err != nil:
				rep.warn(fmt.Sprintf("skipping %s %q: %v", src.what, kv.Key, err))
			case !seen[name]:
				seen[name] = true
				out = append(out, name)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	return out, nil
}

// listUploads lists the bucket's incomplete multipart uploads once and
// groups those under the given resources' prefixes. The whole bucket is
// listed because MinIO answers ListMultipartUploads only for an empty prefix
// or an exact object key; uploads are few, so they are held in memory.
func (c *Collector) listUploads(ctx context.Context, resources []string) (map[string][]entry, error) {
	want := make(map[string]bool, len(resources))
	for _, r := range resources {
		want[r] = true
	}
	out := make(map[string][]entry)
	root := c.ns.Root()
	for u, err := range c.st.ListUploads(ctx, "") {
		if err != nil {
			return out, storeErr(ctx, "list incomplete uploads", err)
		}
		rest, ok := strings.CutPrefix(u.Key, root)
		if !ok {
			continue
		}
		dir, _, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		res, err := url.PathUnescape(dir)
		if err != nil || !want[res] {
			continue
		}
		out[res] = append(out[res], entry{Key: u.Key, UploadID: u.UploadID, Time: u.Initiated})
	}
	return out, nil
}

// resourcePass is the work of one resource within a pass.
type resourcePass struct {
	c    *Collector
	s    *state
	rep  *passReport
	opts RunOptions
	now  time.Time
	// uploadsListed is false when the pass could not list the incomplete
	// uploads: no abandon seal is raised then (list).
	uploadsListed bool

	mu     sync.Mutex
	failed int // deletions that failed
}

// record counts d (already acted on) in the report and, when verbose, keeps
// it. Safe for concurrent use (deleter workers call it).
func (p *resourcePass) record(d decision, action string, err error) {
	d.Action = action
	if err != nil {
		d.Action, d.Error = "failed", err.Error()
	}
	r := p.rep
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case d.UploadID != "":
		if action == "aborted" || action == "would_delete" {
			r.Uploads.Aborted++
		} else if err == nil {
			r.Uploads.Kept++
		}
	case err != nil:
	case action == "deleted" || action == "would_delete":
		r.Deleted++
		if action == "deleted" && p.c.m != nil {
			p.c.m.deleted(d.Size)
		}
	default:
		r.keep(d.Kind)
	}
	if err != nil {
		p.mu.Lock()
		p.failed++
		p.mu.Unlock()
		r.Errors = append(r.Errors, fmt.Sprintf("%s: %s %s: %v", p.s.Resource, d.Kind, d.Key, err))
	}
	if r.verbose {
		r.Decisions = append(r.Decisions, d)
	}
}

// classified counts a fresh decision (scanned, by decision).
func (p *resourcePass) classified(d decision) {
	r := p.rep
	r.mu.Lock()
	if d.UploadID != "" {
		r.Uploads.Scanned++
		r.mu.Unlock()
		return
	}
	r.Scanned++
	r.ByDecision[d.Kind]++
	if p.opts.Progress != nil {
		p.opts.Progress(r.Scanned) // under the lock: one call at a time, counts in order
	}
	r.mu.Unlock()
}

// collectWindow runs the pass for a window of resources: their snapshots,
// then their listings (shared: one listing of the window's key range, the
// resources sorted in key order; else one per resource), and, as each
// resource's listing ends, the rest of its collection in a goroutine of its
// own (finish, holding a slot of lim.finishing). Every snapshot is read
// before any listing starts (DESIGN.md "Garbage collection"). Ages are
// those of the pass's clock reading clk. Each multi-object delete holds a
// slot of lim.deletes while in flight. It returns one error (nil:
// collected) per resource of win.
func (c *Collector) collectWindow(ctx context.Context, win []string, shared bool, dep string, clk *clockReading, uploads map[string][]entry, lim passLimits, opts RunOptions, rep *passReport) []error {
	states, errs := c.readStates(ctx, win, clk.cutoff(c.cfg.Policy.Grace+c.cfg.Policy.ClockSkew))
	for i, s := range states {
		switch {
		case errs[i] != nil:
		case s.Deployment != dep:
			errs[i] = fmt.Errorf("%w: etcd's deployment changed from %s to %s during the pass", authority.ErrForeignDeployment, dep, s.Deployment)
		case !opts.All && s.Generation == 0 && !s.HasPointer && !s.HasSeal && len(s.Restored) == 0 && len(s.RestoredBad) == 0 && !s.RestoredUnreadable:
			rep.warn(fmt.Sprintf("resource %q was never granted in domain %q (no generation, pointer, seal or restored-pointer record): a typo?", s.Resource, c.ns.Domain))
		}
		if errs[i] == nil && c.afterState != nil {
			c.afterState(s.Resource)
		}
	}
	var window *windowListing
	if shared && slices.Contains(errs, nil) {
		window = c.listWindow(ctx, win)
		defer window.stop()
	}
	var wg sync.WaitGroup
	for i, s := range states {
		if errs[i] != nil {
			continue
		}
		ctx := debuglog.With(ctx, c.log, "resource", s.Resource)
		prefix := c.ns.ObjectsPrefix(s.Resource)
		var objs iter.Seq2[objstore.ObjectInfo, error]
		if shared {
			objs = window.objects(prefix)
		} else {
			objs = c.st.List(ctx, prefix, objstore.ListOptions{})
		}
		p := &resourcePass{c: c, s: s, rep: rep, opts: opts, now: c.now(), uploadsListed: uploads != nil}
		del := c.newDeleter(ctx, opts.DryRun, p, lim.deletes)
		abandoned, aborts, listErr := p.list(ctx, del, objs, uploads[s.Resource])
		wg.Go(func() {
			lim.finishing <- struct{}{}
			defer func() { <-lim.finishing }()
			errs[i] = p.finish(ctx, abandoned, aborts, listErr, del, clk)
		})
	}
	wg.Wait()
	return errs
}

// finish completes a resource's collection once its listing ended:
// seal-then-delete of abandoned objects, the deletions queued on del, the
// aborts of the uploads list classified (aborts), then etcd records (only
// when every object step succeeded, so records go after the objects they
// name).
func (p *resourcePass) finish(ctx context.Context, abandoned, aborts []decision, listErr error, del *deleter, clk *clockReading) error {
	c, s, opts := p.c, p.s, p.opts
	switch {
	case listErr != nil:
		for _, d := range abandoned {
			p.record(d, "skipped", nil)
		}
	case !p.uploadsListed:
		for _, d := range abandoned {
			d.Reason += "; the pass could not list the incomplete uploads, and the seal could cover a kept one: kept until the next pass"
			p.record(d, "skipped", nil)
		}
	default:
		if err := p.abandon(ctx, abandoned, del); err != nil {
			listErr = err
		}
	}
	del.close()
	p.abortUploads(ctx, aborts)
	if listErr != nil {
		return listErr
	}
	if p.failed > 0 {
		return fmt.Errorf("gc: %d deletions failed; etcd records are pruned on a later pass", p.failed)
	}
	counts, err := c.pruneRecords(ctx, s, clk, opts.DryRun)
	p.rep.mu.Lock()
	p.rep.Records.History += counts.History
	p.rep.Records.Ops += counts.Ops
	p.rep.Records.Requests += counts.Requests
	p.rep.Records.Grants += counts.Grants
	p.rep.mu.Unlock()
	if c.m != nil && !opts.DryRun {
		c.m.recordsDeleted(counts)
	}
	return err
}

// windowListing is ONE listing of the bucket from the first to the last
// object prefix of a window of resources (sorted by prefix), handed out
// resource by resource (objects): the store lists keys in byte order, so
// every object prefix is a contiguous run of keys, and a resource's objects
// are the run at its prefix. Keys of other prefixes in between (a resource
// outside the pass) are skipped. A key out of order is an error, not a
// skip: a missed in-flight object could let an abandon seal cover it. It is
// used from one goroutine.
type windowListing struct {
	next func() (objstore.ObjectInfo, error, bool)
	stop func()
	end  string // the key range end of the window's last prefix

	head    objstore.ObjectInfo // the next key, not yet handed out
	headErr error
	done    bool   // no more keys (head is unset)
	last    string // the key before head
}

// listWindow starts the listing of win, sorted by object prefix.
func (c *Collector) listWindow(ctx context.Context, win []string) *windowListing {
	first := c.ns.ObjectsPrefix(win[0])
	l := &windowListing{end: clientv3.GetPrefixRangeEnd(c.ns.ObjectsPrefix(win[len(win)-1]))}
	// Every key of first's prefix sorts after first without its '/'.
	l.next, l.stop = iter.Pull2(c.st.List(ctx, c.ns.Root(), objstore.ListOptions{StartAfter: strings.TrimSuffix(first, "/")}))
	l.advance()
	return l
}

// advance reads the next key into head.
func (l *windowListing) advance() {
	l.last = l.head.Key
	var ok bool
	l.head, l.headErr, ok = l.next()
	switch {
	case !ok || (l.headErr == nil && l.head.Key >= l.end):
		l.done = true
		l.stop()
	case l.headErr == nil && l.last != "" && l.head.Key <= l.last:
		l.headErr = fmt.Errorf("%w: the store listed %q after %q, out of key order", objstore.ErrUnavailable, l.head.Key, l.last)
		l.stop()
	}
}

// objects yields the window's objects under prefix, which must come after
// the prefixes already handed out. A listing error is yielded to this and
// every later prefix.
func (l *windowListing) objects(prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		for !l.done {
			if l.headErr != nil {
				yield(objstore.ObjectInfo{}, l.headErr)
				return
			}
			obj := l.head
			in := strings.HasPrefix(obj.Key, prefix)
			if !in && obj.Key > prefix {
				return // past prefix's run: the next prefix's
			}
			l.advance()
			if in && !yield(obj, nil) {
				return
			}
		}
	}
}

// list streams objs, the listing of the resource's prefix, and classifies
// each key, then each of uploads, the resource's incomplete multipart
// uploads (DESIGN.md "Garbage collection": uploads follow the rules of
// objects). It queues the unpublishable objects for deletion and returns
// the abandoned objects that lie below every kept in-flight object or
// upload (an abandoned object at or above one is kept: raising the seal
// over it would also seal the kept one), and the uploads to abort
// (unpublishable or abandoned: an aborted upload can never be completed,
// so no seal is needed). Every upload is classified here, before any seal
// is raised, so a pass never reports an upload kept in flight that its own
// seal made unpublishable.
func (p *resourcePass) list(ctx context.Context, del *deleter, objs iter.Seq2[objstore.ObjectInfo, error], uploads []entry) (abandoned, aborts []decision, listErr error) {
	c, s := p.c, p.s
	var (
		candidates []decision
		minKept    *layout.Version // lowest kept in-flight version of the current epoch
	)
	keep := func(d decision) {
		if v := d.Version; d.Kind == kindInFlight && v.Epoch == s.Epoch && (minKept == nil || v.Compare(*minKept) < 0) {
			minKept = v
		}
		p.record(d, "kept", nil)
	}
	for obj, err := range objs {
		if err != nil {
			listErr = storeErr(ctx, "list "+c.ns.ObjectsPrefix(s.Resource), err)
			break
		}
		d := classify(s, entry{Key: obj.Key, Size: obj.Size, Time: obj.LastModified}, p.now)
		p.classified(d)
		switch d.Kind {
		case kindUnpublishable:
			del.add(d)
		case kindAbandoned:
			candidates = append(candidates, d)
		default:
			keep(d)
		}
	}
	for _, e := range uploads {
		d := classify(s, e, p.now)
		p.classified(d)
		if deletes(d.Kind) {
			aborts = append(aborts, d)
			continue
		}
		keep(d)
	}
	for _, d := range candidates {
		if minKept != nil && d.Version.Compare(*minKept) >= 0 {
			d.Kind = kindInFlight
			d.Reason = fmt.Sprintf("%s; but it is not below the kept in-flight version %s, so it is not sealed", d.Reason, minKept)
			p.record(d, "kept", nil)
			continue
		}
		abandoned = append(abandoned, d)
	}
	return abandoned, aborts, listErr
}

// abandon raises the seal to the highest abandoned version, then queues the
// abandoned objects for deletion; if the seal transaction finds the state
// changed they are kept until the next pass.
func (p *resourcePass) abandon(ctx context.Context, ds []decision, del *deleter) error {
	if len(ds) == 0 {
		return nil
	}
	target := *ds[0].Version
	for _, d := range ds[1:] {
		target = layout.MaxVersion(target, *d.Version)
	}
	if !p.opts.DryRun {
		if p.c.beforeSeal != nil {
			p.c.beforeSeal(p.s.Resource)
		}
		ok, err := p.c.raiseSeal(ctx, p.s, target, sealReasonAbandoned)
		if err != nil || !ok {
			for _, d := range ds {
				if !ok {
					d.Reason += "; the seal transaction found the pointer, seal or epoch changed since the snapshot: kept until the next pass"
				}
				p.record(d, "skipped", nil)
			}
			return err
		}
		p.c.log.Info("gc: raised seal over abandoned objects", "resource", p.s.Resource, "seal", target.String(), "objects", len(ds))
	}
	p.rep.mu.Lock()
	p.rep.Sealed += int64(len(ds))
	p.rep.SealRaises++
	p.rep.mu.Unlock()
	for _, d := range ds {
		del.add(d)
	}
	return nil
}

// abortUploads aborts the incomplete multipart uploads list classified
// unpublishable or abandoned (a dry run only counts them).
func (p *resourcePass) abortUploads(ctx context.Context, ds []decision) {
	for _, d := range ds {
		if p.opts.DryRun {
			p.record(d, "would_delete", nil)
			continue
		}
		rctx, cancel := p.c.rctx(ctx)
		err := p.c.st.AbortUpload(rctx, d.Key, d.UploadID)
		cancel()
		if errors.Is(err, objstore.ErrNotFound) {
			err = nil // completed or aborted meanwhile
		}
		if err != nil {
			err = storeErr(ctx, "abort upload", err)
		}
		p.record(d, "aborted", err)
	}
}

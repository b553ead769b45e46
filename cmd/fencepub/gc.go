package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/term"
)

// newGCCmd builds `fencepub gc run` and `fencepub gc daemon`.
func newGCCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Collect the objects that can never be published or are no longer retained",
		Long: `gc deletes, for each resource, the objects whose version can never be
published again (at or below max(pointer, seal), or of an older epoch), the
versions no longer retained (older than the last --retain versions and
superseded more than --grace + --clock-skew ago), and in-flight objects of
grants that are no longer live once they are older than --abandon-after —
after raising the resource's seal over them, so a paused worker that resumes
gets stale (reason seal). Keys that do not parse as fencepub object keys are
never deleted. It refuses to delete under a prefix whose bucket ownership
marker names another deployment. etcd records (expired history, op records,
acquire request records, grant records below the pointer's fence) are
pruned after the objects they name.

Ages come from one clock that publishers do not control: every pass that is
not a dry run advances a domain clock kept in etcd (<prefix>/<domain>/clock/)
by the smaller of this process's clock delta and the time etcd's lease timer
says passed, and ages a record (op record, request record, history
supersession, decommission seal) by the revision it was written at. Ages are
lower bounds of real elapsed time: no publisher's clock enters, a GC clock
jumping ahead cannot shorten any record's life, and a leader change, an etcd
restart costs at most one pass interval of clock progress
(pruning happens later, never earlier; one checkpoint an hour is kept past
2 h, so old records may wait up to an hour more). --clock-skew covers the
clock's whole-second steps in the grace, and is the allowance of the one age
still on wall clocks: --abandon-after compares an object's LastModified (the
store's clock) with this process's clock.`,
	}
	cmd.AddCommand(newGCRunCmd(), newGCDaemonCmd())
	cli.AddConnFlags(cmd)
	return cmd
}

// gcFlags are the collector settings shared by `gc run` and `gc daemon`:
// the gc.* configuration keys (internal/config.GC), each overridden by the
// flag of the same name.
type gcFlags struct {
	cfg       config.GC
	resources []string
	all       bool
}

// gcKeyFlags names the flag of each gc.* key that `gc run` and `gc daemon`
// share; the daemon adds interval, lease_ttl and listen.
var gcKeyFlags = map[string]string{
	"retain": "gc.retain", "grace": "gc.grace", "clock-skew": "gc.clock_skew", "abandon-after": "gc.abandon_after",
	"op-retention": "gc.op_retention", "request-retention": "gc.request_retention",
	"delete-batch": "gc.delete_batch", "delete-concurrency": "gc.delete_concurrency",
}

func addGCFlags(cmd *cobra.Command, f *gcFlags) {
	fl := cmd.Flags()
	d := config.DefaultGC
	fl.StringArrayVar(&f.resources, "resource", nil, "resource to collect (repeatable)")
	fl.BoolVar(&f.all, "all", false, "collect every resource that has a pointer or a restored-pointer record (left by 'authority recover'); name any other with --resource")
	fl.Int("retain", d.Retain, "published versions kept per resource, the current one included (gc.retain)")
	fl.Duration("grace", d.Grace, "reader grace: keep versions superseded less than this (plus --clock-skew) ago (gc.grace)")
	fl.Duration("clock-skew", d.ClockSkew, "allowance added to the grace (domain clock steps) and to the abandon period (the store's clock against gc's) (gc.clock_skew)")
	fl.Duration("abandon-after", d.AbandonAfter, "seal and delete in-flight objects of dead grants older than this (gc.abandon_after)")
	fl.Duration("op-retention", d.OpRetention, "keep op (idempotency) records this long after their commit, on the domain clock (gc.op_retention)")
	fl.Duration("request-retention", d.RequestRetention, "keep acquire request records this long (gc.request_retention)")
	fl.Int("delete-batch", d.DeleteBatch, "keys per multi-object delete, 1-1000 (gc.delete_batch)")
	fl.Int("delete-concurrency", d.DeleteConcurrency, "multi-object deletes in flight (gc.delete_concurrency)")
	for name, key := range gcKeyFlags {
		cli.KeyFlag(fl, name, key)
	}
}

// load reads the configuration, with the gc.* settings (flag >
// FENCEPUB_GC_* > config file > default), and validates them and the
// resource selection. Errors carry exit code 2 and name the key and the
// flag; no server is contacted. The result is what connect takes.
func (f *gcFlags) load(cmd *cobra.Command, allowNone bool) (cli.LoadedConfig, error) {
	switch {
	case f.all && len(f.resources) > 0:
		return cli.LoadedConfig{}, exitcode.Usagef("give --resource or --all, not both")
	case !f.all && len(f.resources) == 0 && !allowNone:
		return cli.LoadedConfig{}, exitcode.Usagef("give --resource R (repeatable) or --all")
	}
	lc, err := cli.LoadConfig(cmd)
	if err != nil {
		return cli.LoadedConfig{}, err
	}
	if err := lc.Config.GC.Validate(); err != nil {
		return cli.LoadedConfig{}, exitcode.With(exitcode.Usage, err)
	}
	f.cfg = lc.Config.GC
	return lc, nil
}

// collector builds the Collector of env's domain from the flags.
func (f *gcFlags) collector(env *cli.Env, m *gc.Metrics) (*gc.Collector, error) {
	g := f.cfg
	p := gc.Policy{Retain: g.Retain, Grace: g.Grace, ClockSkew: g.ClockSkew, AbandonAfter: g.AbandonAfter}
	if p.ClockSkew == 0 {
		p.ClockSkew = time.Nanosecond // the library reads 0 as "default"
	}
	return openCollector(env, gc.Config{
		Policy: p, OpRetention: g.OpRetention, RequestRetention: g.RequestRetention,
		DeleteBatch: g.DeleteBatch, DeleteConcurrency: g.DeleteConcurrency, Metrics: m,
	})
}

// openCollector builds a Collector of env's domain: cfg's policy fields
// (zero: the defaults) with env's clients and authority.
// openEnvCollector connects (cli.OpenEnv) and builds a Collector with the
// default policy, for the operator commands that need one; the caller
// closes the Env.
func openEnvCollector(cmd *cobra.Command) (*cli.Env, *gc.Collector, error) {
	env, err := cli.OpenEnv(cmd)
	if err != nil {
		return nil, nil, err
	}
	col, err := openCollector(env, gc.Config{})
	if err != nil {
		env.Close()
		return nil, nil, err
	}
	return env, col, nil
}

func openCollector(env *cli.Env, cfg gc.Config) (*gc.Collector, error) {
	a, err := authority.New(env.AuthorityConfig())
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	cfg.Env, cfg.Authority, cfg.Logger = env.Domain(), a, env.Log
	c, err := gc.New(cfg)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return c, nil
}

// gcExit attaches the exit code of a gc error: 2 for bad input and for a
// prefix that is not this deployment's (a configuration problem), 113 when
// `resource delete` meets a live lease, 115 when a server did not answer,
// 116 when etcd holds no epoch and the bucket holds another history, else 1.
func gcExit(err error) error {
	code := exitcode.Internal
	switch {
	case err == nil:
		return nil
	case errors.Is(err, authority.ErrForeignHistory):
		code = exitcode.NeedRecover
	case errors.Is(err, fencepub.ErrInvalid), errors.Is(err, authority.ErrForeignDeployment), errors.Is(err, gc.ErrNoOwnership), errors.Is(err, fencepub.ErrNotInitialized),
		errors.Is(err, gc.ErrUnknownResource):
		code = exitcode.Usage
	case errors.Is(err, authority.ErrHeld):
		code = exitcode.Held
	case errors.Is(err, fencepub.ErrUnavailable):
		code = exitcode.Unavailable
	}
	return exitcode.With(code, err)
}

func newGCRunCmd() *cobra.Command {
	var (
		f       gcFlags
		dryRun  bool
		verbose bool
		format  = "table"
	)
	cmd := &cobra.Command{
		Use:   "run (--resource R ... | --all)",
		Short: "Run one GC pass",
		Long: `run performs one pass and prints a report: scanned, deleted, kept by decision
(published, retained, in_flight, quarantined, foreign), sealed, uploads,
records and errors; --verbose adds every object's decision and reason.
--dry-run makes the same decisions and changes nothing (it reads the domain
clock without advancing it). On a terminal a progress counter is drawn on
stderr. Several passes may run at once safely. Ages are measured on the
domain clock (see fencepub gc --help): the first pass on a domain starts it,
so records become old on it only after a later pass.

Exit codes: 0 the pass completed; 1 some resources failed (see errors); 2 bad
flags, or the prefix belongs to another deployment; 115 etcd or the object
store did not answer; 116 etcd holds no epoch for the domain while the bucket
holds another etcd's history (see authority recover --from-bucket).`,
		Args: cobra.NoArgs,
	}
	addGCFlags(cmd, &f)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "classify and report; delete, seal and abort nothing")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "include every object's decision, reason and action")
	cmd.Flags().VarP(&choice{value: &format, allowed: []string{"table", "json", "text"}, def: "table"}, "output", "o", "output format: table or json")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		lc, err := f.load(c, false)
		if err != nil {
			return err
		}
		env, err := cli.Connect(c, lc)
		if err != nil {
			return err
		}
		defer env.Close()
		col, err := f.collector(env, nil)
		if err != nil {
			return err
		}
		opts := gc.RunOptions{Resources: f.resources, All: f.all, DryRun: dryRun}
		bar := newProgress(c, env.Stderr)
		if bar != nil {
			opts.Progress = func(n int64) { _ = bar.Set64(n) }
		}
		rep, runErr := operator.RunGC(c.Context(), col, opts, verbose)
		if bar != nil {
			_ = bar.Finish()
			fmt.Fprintln(env.Stderr)
		}
		if format == "json" {
			if err := printJSON(env.Stdout, rep); err != nil {
				return err
			}
		} else {
			printGCTable(env.Stdout, rep, verbose)
		}
		return gcExit(runErr)
	}
	return cmd
}

// progressTerminal returns w as the terminal a progress bar may draw on:
// ok is false unless w is a terminal and c logs text (a bar would break
// JSON lines).
func progressTerminal(c *cobra.Command, w io.Writer) (f *os.File, ok bool) {
	f, ok = cli.File(w)
	return f, ok && term.IsTerminal(int(f.Fd())) && !cli.LogsJSON(c)
}

// newProgress returns a progress counter on w when progressTerminal
// allows, else nil.
func newProgress(c *cobra.Command, w io.Writer) *progressbar.ProgressBar {
	f, ok := progressTerminal(c, w)
	if !ok {
		return nil
	}
	return progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(f),
		progressbar.OptionSetDescription("gc: scanning"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("objects"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSpinnerType(14),
	)
}

// printGCTable writes rep for humans.
func printGCTable(w io.Writer, rep *operator.GCReport, verbose bool) {
	mode := ""
	if rep.DryRun {
		mode = " (dry run: nothing was changed; counts are what a real pass would do)"
	}
	fmt.Fprintf(w, "gc pass%s: %d resource(s) in %.2fs\n", mode, rep.Resources, rep.Duration)
	fmt.Fprintf(w, "  %-12s %d\n  %-12s %d\n  %-12s %d (seal raises %d)\n", "scanned", rep.Scanned, "deleted", rep.Deleted, "sealed", rep.Sealed, rep.SealRaises)
	k := rep.Kept
	fmt.Fprintf(w, "  %-12s published %d, retained %d, in_flight %d, quarantined %d, foreign %d\n", "kept", k.Published, k.Retained, k.InFlight, k.Quarantined, k.Foreign)
	fmt.Fprintf(w, "  %-12s scanned %d, aborted %d, kept %d\n", "uploads", rep.Uploads.Scanned, rep.Uploads.Aborted, rep.Uploads.Kept)
	r := rep.Records
	fmt.Fprintf(w, "  %-12s history %d, ops %d, requests %d, grants %d\n", "records", r.History, r.Ops, r.Requests, r.Grants)
	for _, m := range rep.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", m)
	}
	for _, m := range rep.Errors {
		fmt.Fprintf(w, "  error: %s\n", m)
	}
	if verbose {
		for _, d := range rep.Decisions {
			key := d.Key
			if d.UploadID != "" {
				key += " (upload)"
			}
			fmt.Fprintf(w, "%-13s %-12s %s\n    %s\n", d.Kind, d.Action, key, d.Reason)
		}
	}
}

func newGCDaemonCmd() *cobra.Command {
	var (
		f     gcFlags
		owner string
	)
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run GC passes on a schedule (only the GC lease holder acts)",
		Long: `daemon runs a GC pass every --interval over every resource (or the
--resource ones). Several replicas may run: only the holder of the GC lease
(the reserved resource "_gc") runs passes; a killed holder is replaced within
about one --lease-ttl. Safety never depends on the lease. On --listen it
serves /healthz (liveness: JSON status, 200 while running, even with etcd
down), /readyz (readiness: 503 with the reason while etcd or the object store
does not answer, while the leader's last successful pass is older than 2x
--interval, or before this replica finished a pass as the leader or found
another replica leading; a standby is ready with reason "standby") and
/metrics (Prometheus; every metric: docs/monitoring.md). SIGTERM or SIGINT
stops it: the running pass is cancelled (each deletion is safe on its own)
and the lease released.`,
		Args: cobra.NoArgs,
	}
	addGCFlags(cmd, &f)
	fl := cmd.Flags()
	fl.Duration("interval", config.DefaultGC.Interval, "time between the end of one pass and the start of the next (gc.interval)")
	fl.Duration("lease-ttl", config.DefaultGC.LeaseTTL, "GC lease TTL, whole seconds, at least 2s (gc.lease_ttl)")
	fl.String("listen", config.DefaultGC.Listen, `address of the /healthz, /readyz and /metrics endpoint, "" disables it (gc.listen)`)
	cli.KeyFlag(fl, "interval", "gc.interval")
	cli.KeyFlag(fl, "lease-ttl", "gc.lease_ttl")
	cli.KeyFlag(fl, "listen", "gc.listen")
	cmd.Flags().StringVar(&owner, "owner", "", "this replica's owner id in the GC lease (default gc-<host>-<pid>-<random>)")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		lc, err := f.load(c, true)
		if err != nil {
			return err
		}
		interval, ttl, listen := f.cfg.Interval, f.cfg.LeaseTTL, f.cfg.Listen
		env, err := cli.Connect(c, lc)
		if err != nil {
			return err
		}
		defer env.Close()
		reg, m, err := newGCRegistry(interval, env.Etcd, env.NS.VerifyKey())
		if err != nil {
			return err
		}
		col, err := f.collector(env, m)
		if err != nil {
			return err
		}
		d, err := operator.NewDaemon(operator.DaemonConfig{
			Collector: col, Interval: interval, LeaseTTL: ttl, Owner: owner, Metrics: m,
			Resources: f.resources, All: f.all, Logger: env.Log,
		})
		if err != nil {
			return gcExit(err)
		}
		g := f.cfg
		env.Log.Info("gc daemon: starting", "domain", env.NS.Domain, "all", f.all, "resources", f.resources,
			"interval", interval, "lease_ttl", ttl, "retain", g.Retain, "grace", g.Grace, "clock_skew", g.ClockSkew,
			"abandon_after", g.AbandonAfter, "op_retention", g.OpRetention, "request_retention", g.RequestRetention)
		ctx := c.Context()
		if listen != "" {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return exitcode.With(exitcode.Usage, fmt.Errorf("--listen %s: %w", listen, err))
			}
			srv := &http.Server{Handler: d.Handler(reg), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(env.Log.Handler(), slog.LevelWarn)}
			go func() { _ = srv.Serve(ln) }()
			defer func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			env.Log.Info("gc daemon: serving /healthz, /readyz and /metrics", "addr", ln.Addr().String())
		}
		return d.Run(ctx)
	}
	return cmd
}

// newGCRegistry returns the GC daemon's /metrics registry
// (docs/monitoring.md): the Go runtime and process collectors, gc.NewMetrics,
// fencepub_build_info{version,goversion} (always 1, labelled as `fencepub
// version` prints the build), fencepub_gc_interval_seconds, the pass interval, so that an alert can
// count missed passes in intervals (deploy/monitoring), and
// fencepub_gc_last_clean_verify_timestamp_seconds read from verifyKey in
// etcd (0 when cli is nil). Errors: the registry's.
func newGCRegistry(interval time.Duration, cli *clientv3.Client, verifyKey string) (*prometheus.Registry, *gc.Metrics, error) {
	reg := prometheus.NewRegistry()
	iv := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fencepub_gc_interval_seconds", Help: "The GC daemon's interval between passes (gc.interval)."})
	iv.Set(interval.Seconds())
	b := currentBuild()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencepub_build_info", Help: "Always 1; the labels name the fencepub build.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(b.Version, b.GoVersion).Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), iv, build,
		&verifyCollector{cli: cli, key: verifyKey, desc: prometheus.NewDesc("fencepub_gc_last_clean_verify_timestamp_seconds",
			"Unix time of the last 'fencepub verify --all' that found nothing (0: none recorded).", nil, nil)})
	m, err := gc.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	return reg, m, nil
}

// verifyCacheFor is how long verifyCollector reuses what it read.
const verifyCacheFor = 30 * time.Second

// verifyCollector exports the time `fencepub verify --all` last came out
// clean, which verify writes to the domain's VerifyKey: a scrape reads
// etcd at most every verifyCacheFor, each read bounded by one second, and
// a failed read keeps the last value. Safe for concurrent scrapes.
type verifyCollector struct {
	cli  *clientv3.Client
	key  string
	desc *prometheus.Desc

	mu      sync.Mutex
	at      time.Time
	checked time.Time
}

func (v *verifyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

func (v *verifyCollector) Collect(ch chan<- prometheus.Metric) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cli != nil && time.Since(v.checked) >= verifyCacheFor {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := v.cli.Get(ctx, v.key)
		cancel()
		if err == nil {
			v.checked = time.Now()
			if len(resp.Kvs) == 1 {
				if at, perr := time.Parse(time.RFC3339Nano, string(resp.Kvs[0].Value)); perr == nil {
					v.at = at
				}
			}
		}
	}
	val := 0.0
	if !v.at.IsZero() {
		val = float64(v.at.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(v.desc, prometheus.GaugeValue, val)
}

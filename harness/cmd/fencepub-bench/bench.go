package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/harness/bench/suite"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/spf13/cobra"
)

// defaultBenchOut is the default --out: a directory in the working
// directory that is not committed (.gitignore), so a run from the checkout
// never overwrites bench/results; `make bench` writes there explicitly. It
// is not the binary's own name, which `go build ./cmd/fencepub-bench`
// leaves in the working directory.
const defaultBenchOut = "fencepub-bench-results"

// maxBenchScale bounds --scale: 100 times the default counts is already a
// run of many hours.
const maxBenchScale = 100

// minBenchGCObjects and maxBenchGCObjects bound --gc-objects: the GC
// workload's small set is a tenth of it, and 10M one-byte PUTs already take
// hours.
const (
	minBenchGCObjects = 10
	maxBenchGCObjects = 10_000_000
)

// maxWrkDuration bounds --wrk-duration.
const maxWrkDuration = 10 * time.Minute

// newBenchCmd builds the fencepub-bench command: the benchmark suite
// (harness/bench/suite; docs/benchmarks.md), against the configured servers or, with --local, a
// single-member etcd and a single-drive MinIO or one SeaweedFS (--store) it
// starts itself. Flags and
// --out are checked before any server is started or contacted; an
// interrupted run writes no report.
// benchCmdOptions are fencepub-bench's flags (addFlags); Complete keeps
// which were given, Validate checks them before any server is started or
// contacted, Run runs the suite and writes the report.
type benchCmdOptions struct {
	local, quick  bool
	store         string // --store: the object store --local starts
	out           string
	workloads     []string
	scale         float64
	gcObjects     int
	wrkDuration   time.Duration
	readerService string
	scaleFiles    []int
	changed       func(flag string) bool // set by Complete
}

func newBenchCmd() *cobra.Command {
	o := &benchCmdOptions{}
	cmd := &cobra.Command{
		Use:   "fencepub-bench",
		Short: "Measure fencepub side by side with its baselines on real etcd and MinIO",
		Long: `fencepub-bench runs fencepub's benchmark suite and writes latest.json, latest.md,
latest.png (and pipeline.png, footprint.png, scale.png when those workloads
ran) to --out
(default ./` + defaultBenchOut + `, created if missing; make bench writes the
committed bench/results). Every number is a ratio to a baseline
measured in the same run on the same servers: the physical floor of a
publish (sha256 + one create-only PUT + one bare etcd compare-and-put), what
users write today (an etcd lock per publish, a held lease without a fence),
a bare lease grant and keepalive, a bare watch, a bare GET, a plain HTTP
server (driven by wrk, if installed), a bare listing and a bare
multi-object delete.

Workloads: ` + strings.Join(suite.Workloads(), ", ") + `.

--local starts a single-member etcd and, by --store, a single-drive MinIO
(default) or one SeaweedFS process; with --store seaweedfs the default
workloads are publish and reader, every row next to its floor measured on
the same SeaweedFS in the same run.

Without --local the suite runs against the configured servers (flags,
FENCEPUB_* environment, config file) in a throwaway domain
"<domain>-bench-<random>" it deletes at the end; it names the servers and
the domain on stderr when it starts. While it runs it writes about 145k
small objects (130k of them in the GC workload: 1.3 x --gc-objects),
another 100k of 1 KiB in the scale workload (10k resources x 10 versions,
x --scale) and up to a few GiB of large ones. The default run takes 20
to 30 minutes on 2 cores; --quick runs in a few minutes (numbers not
meaningful). An interrupted run
(Ctrl-C) writes no report.

Exit status: 0 when every workload ran (missed targets are reported, not
failures), 1 when a workload failed, 2 for bad flags, an --out that is not
a writable directory or a missing server binary (all checked before any
server is started or contacted), 115 when the configured servers cannot be
reached, 130 when interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Complete(c)
			opts, err := o.Validate()
			if err != nil {
				return err
			}
			return o.Run(c, opts)
		},
	}
	cli.AddConnFlags(cmd)
	o.addFlags(cmd)
	return cmd
}

// addFlags registers fencepub-bench's own flags on cmd.
func (o *benchCmdOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&o.local, "local", false, "start a local etcd and object store (--store) from ./bin (make deps) instead of using the configured servers")
	f.StringVar(&o.store, "store", devstack.StoreMinIO, "object store --local starts: "+strings.Join(devstack.StoreKinds, "|")+" (seaweedfs: default --workloads publish,reader)")
	f.BoolVar(&o.quick, "quick", false, "tiny counts: a smoke run in seconds (numbers not meaningful)")
	f.StringVar(&o.out, "out", defaultBenchOut, "directory for latest.json, latest.md and latest.png (created if missing)")
	f.StringSliceVar(&o.workloads, "workloads", nil, "workloads to run, comma-separated (default all: "+strings.Join(suite.Workloads(), ",")+")")
	f.Float64Var(&o.scale, "scale", 1, fmt.Sprintf("multiply every operation count: > 0, at most %d (e.g. 0.5 for a shorter run; ignored with --quick)", maxBenchScale))
	f.IntVar(&o.gcObjects, "gc-objects", 100_000, fmt.Sprintf("objects in the GC workload's large set, at least %d; the small set is a tenth (--quick: 1000 unless given)", minBenchGCObjects))
	f.DurationVar(&o.wrkDuration, "wrk-duration", 3*time.Second, "length of each wrk run, at least 1s, rounded to whole seconds (--quick: 1s unless given)")
	f.IntSliceVar(&o.scaleFiles, "scale-files", nil, "the dataset workload's two scale file counts, comma-separated, e.g. 100000,1000000 (default 100000,300000 x --scale)")
	f.StringVar(&o.readerService, "reader-service", "", "path of the examples/reader-service binary (default: reader-service in ./bin, built by make build)")
}

// Complete keeps c's record of which flags were given.
func (o *benchCmdOptions) Complete(c *cobra.Command) { o.changed = c.Flags().Changed }

// Run checks the server binaries (--local) and --out, starts or connects to
// the servers, runs the suite with opts (from Validate) and writes the
// report to --out.
func (o *benchCmdOptions) Run(c *cobra.Command, opts suite.Options) error {
	opts.Log = slog.New(slog.NewTextHandler(c.ErrOrStderr(), nil))
	var binDir string
	if o.local { // a missing binary fails now, not after --out is made
		for _, name := range []string{"etcd", storeBinary(o.store)} {
			p, err := devstack.Binary(name)
			if err != nil {
				return exitcode.With(exitcode.Usage, err)
			}
			binDir = filepath.Dir(p)
		}
	}
	undoOut, err := prepareBenchOut(o.out)
	if err != nil {
		return err
	}
	wrote := false
	defer func() {
		if !wrote {
			undoOut() // only what it created, only if still empty
		}
	}()
	ctx := c.Context()
	var env suite.Env
	if o.local {
		dir, err := os.MkdirTemp("", "fencepub-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		ns, err := layout.NewNamespace("fencepub-bench", "bench")
		if err != nil {
			return err
		}
		fmt.Fprintf(c.ErrOrStderr(), "bench: starting a local etcd and %s from %s, data in %s (removed at the end); domain %q of prefix %q; report to %s\n",
			storeNames[o.store], binDir, dir, ns.Domain, ns.Prefix, o.out)
		l, err := suite.StartLocal(ctx, dir, o.store)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return benchInterrupted(ctx, o.out)
			case errors.Is(err, devstack.ErrNoBinary):
				return exitcode.With(exitcode.Usage, err)
			}
			return exitcode.With(exitcode.Unavailable, err)
		}
		defer l.Close()
		if env, err = l.Env(ns); err != nil {
			return err
		}
	} else {
		e, err := cli.OpenEnv(c)
		if err != nil {
			if ctx.Err() != nil {
				return benchInterrupted(ctx, o.out)
			}
			return err
		}
		defer e.Close()
		if err := e.Store.CheckBucket(ctx); err != nil {
			if ctx.Err() != nil {
				return benchInterrupted(ctx, o.out)
			}
			return exitcode.With(exitcode.Unavailable, err)
		}
		var b [3]byte
		_, _ = rand.Read(b[:])
		ns, err := layout.NewNamespace(e.NS.Prefix, e.NS.Domain+"-bench-"+hex.EncodeToString(b[:]))
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		servers := fmt.Sprintf("etcd %s, S3 %s bucket %q", strings.Join(e.Config.Etcd.Endpoints, ","), e.Config.S3.Endpoint, e.Config.S3.Bucket)
		fmt.Fprintf(c.ErrOrStderr(), "bench: %s; throwaway domain %q of prefix %q (deleted at the end); report to %s\n",
			servers, ns.Domain, ns.Prefix, o.out)
		env = suite.Env{
			Target:  bench.Target{Etcd: e.Etcd, Store: e.Store, NS: ns},
			Config:  e.Config,
			NewEtcd: e.Config.EtcdClient,
			Servers: "configured: " + servers,
		}
	}
	rep, runErr := suite.Run(ctx, env, opts)
	if ctx.Err() != nil {
		// The rows of an interrupted run are partial or failed with
		// the cancellation: not a report.
		return benchInterrupted(ctx, o.out)
	}
	if errors.Is(runErr, suite.ErrUnknownWorkload) || errors.Is(runErr, suite.ErrInvalid) {
		return exitcode.With(exitcode.Usage, runErr)
	}
	wrote = true
	if err := rep.Write(o.out); err != nil {
		return errors.Join(runErr, err)
	}
	if err := rep.Chart(filepath.Join(o.out, "latest.png"), suite.WorkloadPublish, suite.WorkloadScaling); err != nil {
		return errors.Join(runErr, err)
	}
	written := []string{filepath.Join(o.out, "latest.json"), filepath.Join(o.out, "latest.md"), filepath.Join(o.out, "latest.png")}
	// A workload's chart is drawn whenever it measured a row.
	charts := []struct {
		workload, file string
		draw           func(path string) error
	}{
		{suite.WorkloadPipeline, "pipeline.png", func(p string) error { return rep.RatioChart(p, suite.WorkloadPipeline) }},
		{suite.WorkloadFootprint, "footprint.png", func(p string) error {
			return rep.BytesChart(p, suite.WorkloadFootprint, "compact", "JSON forms before")
		}},
		{suite.WorkloadScale, "scale.png", func(p string) error { return rep.RatioChart(p, suite.WorkloadScale) }},
	}
	for _, ch := range charts {
		if !slices.ContainsFunc(rep.Rows, func(r bench.Row) bool { return r.Workload == ch.workload && r.Skipped == "" }) {
			continue
		}
		path := filepath.Join(o.out, ch.file)
		if err := ch.draw(path); err != nil {
			return errors.Join(runErr, err)
		}
		written = append(written, path)
	}
	w := c.OutOrStdout()
	met, targets := 0, 0
	for _, r := range rep.Rows {
		if r.Target == "" {
			continue
		}
		verdict := "skipped"
		if r.Met != nil {
			targets++
			verdict = "no"
			if *r.Met {
				met++
				verdict = "yes"
			}
		}
		fmt.Fprintf(w, "%-7s %-9s %-55s %-34s %s\n", verdict, r.Workload, r.Config, r.Target, r.Measured())
	}
	fmt.Fprintf(w, "\n%d of %d targets met; wrote %s\n", met, targets, strings.Join(written, ", "))
	return runErr
}

// Validate checks the flags and returns the suite options they give
// (without Log). Every error is a usage error naming the flag and its valid
// range; nothing has been started or contacted yet. With --quick,
// --gc-objects and --wrk-duration not given keep the suite's quick values.
func (o *benchCmdOptions) Validate() (suite.Options, error) {
	changed := o.changed
	scale, gcObjects, wrkDuration, readerService := o.scale, o.gcObjects, o.wrkDuration, o.readerService
	quick, workloads := o.quick, o.workloads
	switch {
	case !slices.Contains(devstack.StoreKinds, o.store):
		return suite.Options{}, exitcode.Usagef("--store %q: want one of %s", o.store, strings.Join(devstack.StoreKinds, ", "))
	case changed("store") && !o.local:
		return suite.Options{}, exitcode.Usagef("--store is for --local; without it the suite runs on the configured S3 store")
	case !(scale > 0 && scale <= maxBenchScale): // NaN fails too
		return suite.Options{}, exitcode.Usagef("--scale %g: want a number > 0 and at most %d (1 is the default run, 0.5 a shorter one)", scale, maxBenchScale)
	case gcObjects < minBenchGCObjects || gcObjects > maxBenchGCObjects:
		return suite.Options{}, exitcode.Usagef("--gc-objects %d: want %d to %d (the GC workload's small set is a tenth of it)", gcObjects, minBenchGCObjects, maxBenchGCObjects)
	case wrkDuration < time.Second || wrkDuration > maxWrkDuration:
		return suite.Options{}, exitcode.Usagef("--wrk-duration %s: want 1s to %s (wrk runs whole seconds)", wrkDuration, maxWrkDuration)
	}
	if o.store == devstack.StoreSeaweedFS && !changed("workloads") {
		workloads = seaweedFSWorkloads
	}
	if quick && !changed("gc-objects") {
		gcObjects = 0 // the suite's quick count
	}
	if quick && !changed("wrk-duration") {
		wrkDuration = 0 // the suite's quick duration
	}
	if readerService != "" { // the service runs in a temporary directory
		abs, err := filepath.Abs(readerService)
		if err != nil {
			return suite.Options{}, exitcode.Usagef("--reader-service %q: %v", readerService, err)
		}
		readerService = abs
	}
	opts := suite.Options{
		Workloads: workloads, Quick: quick, Scale: scale, GCObjects: gcObjects,
		WrkDuration: wrkDuration, ReaderService: readerService, ScaleFiles: o.scaleFiles,
	}
	if err := opts.Validate(); err != nil {
		if errors.Is(err, suite.ErrUnknownWorkload) {
			return suite.Options{}, exitcode.Usagef("--workloads: %v", err)
		}
		if len(o.scaleFiles) > 0 && errors.Is(err, suite.ErrInvalid) {
			return suite.Options{}, exitcode.Usagef("--scale-files: %v", err)
		}
		return suite.Options{}, exitcode.With(exitcode.Usage, err)
	}
	return opts, nil
}

// seaweedFSWorkloads are the workloads `--store seaweedfs` runs unless
// --workloads says otherwise: the object store's share of fencepub's cost
// (docs/object-stores.md).
var seaweedFSWorkloads = []string{suite.WorkloadPublish, suite.WorkloadReader}

// storeNames are the object stores' names as the start line gives them.
var storeNames = map[string]string{devstack.StoreMinIO: "MinIO", devstack.StoreSeaweedFS: "SeaweedFS"}

// storeBinary returns the server binary of the object store kind.
func storeBinary(kind string) string {
	if kind == devstack.StoreSeaweedFS {
		return "weed"
	}
	return "minio"
}

// prepareBenchOut makes sure dir, bench's --out, is a directory the report
// can be written to, creating it if missing, so a bad --out fails before
// the run rather than after it. It returns undo, which removes what it
// created (dir and any missing parents, if still empty) for a run that
// writes no report. Errors are usage errors naming --out.
func prepareBenchOut(dir string) (undo func(), err error) {
	undo = func() {}
	if dir == "" {
		return undo, exitcode.Usagef("--out is empty; give a directory for the report")
	}
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		top := filepath.Clean(dir) // the outermost directory MkdirAll creates
		for p := filepath.Dir(top); p != top; top, p = p, filepath.Dir(p) {
			if _, err := os.Stat(p); err == nil {
				break
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return undo, exitcode.Usagef("--out %s: cannot create the directory: %v", dir, err)
		}
		undo = func() {
			for d := filepath.Clean(dir); os.Remove(d) == nil && d != top; d = filepath.Dir(d) {
			}
		}
	case err != nil:
		return undo, exitcode.Usagef("--out %s: %v", dir, err)
	case !fi.IsDir():
		return undo, exitcode.Usagef("--out %s is not a directory; give a directory for the report", dir)
	}
	fail := func(err error) (func(), error) {
		undo()
		return func() {}, exitcode.Usagef("--out %s is not writable: %v", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".fencepub-bench-probe-*")
	if err != nil {
		return fail(err)
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	for _, name := range []string{"latest.json", "latest.md", "latest.png"} {
		// Open without truncating: an existing report stays as it is.
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fail(err)
		}
		_ = f.Close()
	}
	return undo, nil
}

// benchInterrupted is bench's error when ctx ended (SIGINT, SIGTERM) before
// the report was written: exit 130, and no report.
func benchInterrupted(ctx context.Context, out string) error {
	return exitcode.With(exitcode.Interrupted, fmt.Errorf("bench interrupted (%w): no report written, %s left as it was", context.Cause(ctx), out))
}

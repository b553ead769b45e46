package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencepub/fencepub/internal/bench"
	"github.com/fencepub/fencepub/internal/bench/suite"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/localstack"
	"github.com/spf13/cobra"
)

// newBenchCmd builds `fencepub bench`: the benchmark suite of issue 8
// (internal/bench/suite), against the configured servers or, with --local, a
// single-member etcd and a single-drive MinIO it starts itself.
func newBenchCmd() *cobra.Command {
	var (
		local, quick  bool
		out           string
		workloads     []string
		scale         float64
		gcObjects     int
		wrkDuration   time.Duration
		readerService string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure fencepub side by side with its baselines on real etcd and MinIO",
		Long: `bench runs fencepub's benchmark suite and writes latest.json, latest.md and
latest.png to --out. Every number is a ratio to a baseline measured in the
same run on the same servers: the physical floor of a publish (sha256 + one
create-only PUT + one bare etcd compare-and-put), what users write today
(an etcd lock per publish, a held lease without a fence), a bare lease
grant and keepalive, a bare watch, a bare GET, a plain HTTP server (driven
by wrk, if installed), a bare listing and a bare multi-object delete.

Workloads: ` + strings.Join(suite.Workloads(), ", ") + `.

Without --local the suite runs against the configured servers (flags,
FENCEPUB_* environment, config file) in a throwaway domain
"<domain>-bench-<random>" it deletes at the end; it writes about 100k small
objects and up to a few GiB of large ones while it runs. The default run
takes about 5-10 minutes on 2 cores; --quick runs in seconds (numbers not
meaningful) and writes to bench/results/tmp unless --out is given.

Exit status: 0 when every workload ran (missed targets are reported, not
failures), 1 when a workload failed, 2 for bad flags or a missing server
binary, 115 when the configured servers cannot be reached.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if !c.Flags().Changed("out") && quick {
				out = filepath.Join("bench", "results", "tmp")
			}
			if readerService != "" { // the service runs in a temporary directory
				abs, err := filepath.Abs(readerService)
				if err != nil {
					return exitcode.Usagef("--reader-service %q: %v", readerService, err)
				}
				readerService = abs
			}
			opts := suite.Options{
				Workloads: workloads, Quick: quick, Scale: scale, GCObjects: gcObjects,
				WrkDuration: wrkDuration, ReaderService: readerService,
				Log: slog.New(slog.NewTextHandler(c.ErrOrStderr(), nil)),
			}
			ctx := c.Context()
			var env suite.Env
			if local {
				dir, err := os.MkdirTemp("", "fencepub-bench-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				fmt.Fprintln(c.ErrOrStderr(), "bench: starting local etcd and MinIO ...")
				l, err := suite.StartLocal(ctx, dir)
				if err != nil {
					if errors.Is(err, localstack.ErrNoBinary) {
						return exitcode.With(exitcode.Usage, err)
					}
					return exitcode.With(exitcode.Unavailable, err)
				}
				defer l.Close()
				ns, err := layout.NewNamespace("fencepub-bench", "bench")
				if err != nil {
					return err
				}
				if env, err = l.Env(ns); err != nil {
					return err
				}
			} else {
				e, err := openEnv(c)
				if err != nil {
					return err
				}
				defer e.Close()
				if err := e.Store.CheckBucket(ctx); err != nil {
					return exitcode.With(exitcode.Unavailable, err)
				}
				var b [3]byte
				_, _ = rand.Read(b[:])
				ns, err := layout.NewNamespace(e.NS.Prefix, e.NS.Domain+"-bench-"+hex.EncodeToString(b[:]))
				if err != nil {
					return exitcode.With(exitcode.Usage, err)
				}
				env = suite.Env{
					Target:  bench.Target{Etcd: e.Etcd, Store: e.Store, NS: ns},
					Config:  e.Config,
					NewEtcd: e.Config.EtcdClient,
					Servers: fmt.Sprintf("configured: etcd %s, S3 %s bucket %q", strings.Join(e.Config.Etcd.Endpoints, ","), e.Config.S3.Endpoint, e.Config.S3.Bucket),
				}
			}
			rep, runErr := suite.Run(ctx, env, opts)
			if errors.Is(runErr, suite.ErrUnknownWorkload) {
				return exitcode.With(exitcode.Usage, runErr)
			}
			if err := rep.Write(out); err != nil {
				return errors.Join(runErr, err)
			}
			if err := rep.Chart(filepath.Join(out, "latest.png"), suite.WorkloadPublish, suite.WorkloadScaling); err != nil {
				return errors.Join(runErr, err)
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
			fmt.Fprintf(w, "\n%d of %d targets met; wrote %s\n", met, targets, strings.Join([]string{
				filepath.Join(out, "latest.json"), filepath.Join(out, "latest.md"), filepath.Join(out, "latest.png")}, ", "))
			return runErr
		},
	}
	addConnFlags(cmd)
	f := cmd.Flags()
	f.BoolVar(&local, "local", false, "start a local etcd and MinIO from ./bin (make deps) instead of using the configured servers")
	f.BoolVar(&quick, "quick", false, "tiny counts: a smoke run in seconds (numbers not meaningful)")
	f.StringVar(&out, "out", filepath.Join("bench", "results"), "directory for latest.json, latest.md and latest.png")
	f.StringSliceVar(&workloads, "workloads", nil, "workloads to run, comma-separated (default all: "+strings.Join(suite.Workloads(), ",")+")")
	f.Float64Var(&scale, "scale", 1, "multiply every operation count (e.g. 0.5 for a shorter run)")
	f.IntVar(&gcObjects, "gc-objects", 0, "objects in the GC workload's large set (default 100000; the small set is a tenth)")
	f.DurationVar(&wrkDuration, "wrk-duration", 0, "length of each wrk run (default 3s)")
	f.StringVar(&readerService, "reader-service", "", "path of the examples/reader-service binary (default: reader-service in ./bin, built by make build)")
	return cmd
}

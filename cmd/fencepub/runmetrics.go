package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/google/renameio/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
)

// Metrics of a `run` or `publish` (docs/monitoring.md), written with
// --metrics-textfile and --pushgateway.
const (
	metricRunLastSuccess = "fencepub_run_last_success_timestamp_seconds"
	metricRunLastOutcome = "fencepub_run_last_outcome_timestamp_seconds"
	metricRunDuration    = "fencepub_run_duration_seconds"
	// pushJob is the pushgateway job label of these metrics.
	pushJob = "fencepub_run"
	// pushTimeout bounds each push to the pushgateway.
	pushTimeout = 10 * time.Second
)

// runOutcomes names each exit code of run and publish in the outcome label;
// any other code (run passing CMD's own through) is "command_failed".
var runOutcomes = map[int]string{
	exitcode.OK: "published", exitcode.Internal: "error", exitcode.Usage: "usage",
	exitcode.Stale: "stale", exitcode.Conflict: "conflict", exitcode.Unknown: "unknown",
	exitcode.Held: "lease_held", exitcode.LeaseLost: "lease_lost", exitcode.Unavailable: "unavailable",
	exitcode.NeedRecover: "needs_recover", exitcode.Interrupted: "interrupted",
}

// runMetrics holds the --metrics-textfile and --pushgateway flags.
type runMetrics struct {
	textfile, pushgateway string
}

// addRunMetrics adds --metrics-textfile and --pushgateway to cmd and wraps
// its RunE (set before this call) so that, once it returns, the outcome of
// the run is written to the textfile and pushed for each resource that
// resources returns then (one, or every member of a group).
// A metrics write that fails is logged as a warning and leaves the exit
// code alone: the result was published or not whatever the monitoring
// says. Bad flag values are usage errors (exit 2) before anything runs.
func addRunMetrics(cmd *cobra.Command, resources func() []string) {
	m := &runMetrics{}
	cmd.Flags().StringVar(&m.textfile, "metrics-textfile", "", "after the run, write its metrics to this node_exporter textfile (NAME.prom; replaced atomically, keeping other resources' and outcomes' series)")
	cmd.Flags().StringVar(&m.pushgateway, "pushgateway", "", "after the run, push its metrics to this Prometheus pushgateway URL (job "+pushJob+")")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := m.validate(); err != nil {
			return err
		}
		start := time.Now()
		err := run(c, args)
		if m.textfile != "" || m.pushgateway != "" {
			code := cli.ExitCode(err, c.Context().Err() != nil)
			m.record(c, resources(), code, start, time.Now())
		}
		return err
	}
}

// validate checks the flags before any I/O.
func (m *runMetrics) validate() error {
	if m.textfile != "" && filepath.Ext(m.textfile) != ".prom" {
		return exitcode.Usagef("--metrics-textfile %s: node_exporter reads only files named *.prom", m.textfile)
	}
	if m.pushgateway != "" {
		u, err := url.Parse(m.pushgateway)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return exitcode.Usagef("--pushgateway %q: want a URL like http://pushgateway:9091", m.pushgateway)
		}
	}
	return nil
}

// record writes and pushes the metrics of a run of resources that ended
// with exit code code, each resource's series as a run of it alone (the
// textfile written once), logging failures as warnings.
func (m *runMetrics) record(c *cobra.Command, resources []string, code int, start, end time.Time) {
	log := cli.Logger(c)
	outcome, ok := runOutcomes[code]
	if !ok {
		outcome = "command_failed"
	}
	published, took := code == exitcode.OK, end.Sub(start)
	if m.textfile != "" {
		var gs []prometheus.Gatherer
		for _, r := range resources {
			success, per := runRegistries(r, outcome, published, took, end, true)
			gs = append(gs, success, per)
		}
		if err := writeTextfile(m.textfile, gs...); err != nil {
			log.Warn("metrics textfile not written", "path", m.textfile, "err", err)
		}
	}
	if m.pushgateway != "" {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context()), pushTimeout)
		defer cancel()
		for _, r := range resources {
			success, per := runRegistries(r, outcome, published, took, end, false)
			if err := pushRun(ctx, m.pushgateway, r, outcome, success, per); err != nil {
				log.Warn("metrics not pushed", "pushgateway", m.pushgateway, "resource", r, "err", err)
			}
		}
	}
}

// runRegistries returns the run's metrics as two gatherers: success holds
// fencepub_run_last_success_timestamp_seconds{resource} (nil unless the
// run published: applied or duplicate), per the outcome's
// fencepub_run_last_outcome_timestamp_seconds and
// fencepub_run_duration_seconds, labelled {resource, outcome}. They are
// kept apart because the pushgateway replaces a whole group per push: the
// last success must survive a failed run, and each outcome its own time.
// Without labelled the series carry no labels: the pushgateway adds its
// grouping labels, and refuses series that already have them.
func runRegistries(resource, outcome string, published bool, took time.Duration, end time.Time, labelled bool) (success, per prometheus.Gatherer) {
	labels, resLabel := prometheus.Labels{"resource": resource, "outcome": outcome}, prometheus.Labels{"resource": resource}
	if !labelled {
		labels, resLabel = nil, nil
	}
	reg := prometheus.NewRegistry()
	last := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricRunLastOutcome, Help: "Unix time of the last run or publish of the resource that ended with this outcome.", ConstLabels: labels})
	dur := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricRunDuration, Help: "Wall time in seconds of the last run or publish of the resource that ended with this outcome.", ConstLabels: labels})
	reg.MustRegister(last, dur)
	last.Set(float64(end.UnixNano()) / 1e9)
	dur.Set(took.Seconds())
	if !published {
		return nil, reg
	}
	okReg := prometheus.NewRegistry()
	ok := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricRunLastSuccess, Help: "Unix time of the last run or publish of the resource that published (applied or duplicate).", ConstLabels: resLabel})
	okReg.MustRegister(ok)
	ok.Set(float64(end.UnixNano()) / 1e9)
	return okReg, reg
}

// pushRun pushes success (when non-nil) to the group {job, resource} and
// per to {job, resource, outcome} of the pushgateway at base, each push
// replacing its group (HTTP PUT).
func pushRun(ctx context.Context, base, resource, outcome string, success, per prometheus.Gatherer) error {
	if success != nil {
		if err := push.New(base, pushJob).Grouping("resource", resource).Gatherer(success).PushContext(ctx); err != nil {
			return err
		}
	}
	return push.New(base, pushJob).Grouping("resource", resource).Grouping("outcome", outcome).Gatherer(per).PushContext(ctx)
}

// writeTextfile merges the gathered families into the textfile at path and
// replaces it atomically (a temporary file in its directory, then a
// rename), so node_exporter never reads half a file. Series already in the
// file (other resources, other outcomes, the last success of an earlier
// run) are kept unless a gathered series has the same name and labels; a
// file that does not parse is replaced. Errors: gathering, reading or
// writing the file.
func writeTextfile(path string, gatherers ...prometheus.Gatherer) error {
	fams := map[string]*dto.MetricFamily{}
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		p := expfmt.NewTextParser(model.UTF8Validation)
		if parsed, perr := p.TextToMetricFamilies(bytes.NewReader(old)); perr == nil {
			fams = parsed
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	for _, g := range gatherers {
		if g == nil {
			continue
		}
		got, err := g.Gather()
		if err != nil {
			return err
		}
		for _, f := range got {
			prev, ok := fams[f.GetName()]
			if !ok {
				fams[f.GetName()] = f
				continue
			}
			for _, m := range f.Metric {
				prev.Metric = slices.DeleteFunc(prev.Metric, func(o *dto.Metric) bool { return sameLabels(o, m) })
				prev.Metric = append(prev.Metric, m)
			}
		}
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, n := range names {
		if _, err := expfmt.MetricFamilyToText(&b, fams[n]); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return renameio.WriteFile(path, b.Bytes(), 0o644)
}

// sameLabels reports whether a and b have the same label pairs.
func sameLabels(a, b *dto.Metric) bool {
	pairs := func(m *dto.Metric) string {
		var s []string
		for _, l := range m.GetLabel() {
			s = append(s, l.GetName()+"\x00"+l.GetValue())
		}
		slices.Sort(s)
		return strings.Join(s, "\x01")
	}
	return pairs(a) == pairs(b)
}

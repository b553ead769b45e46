package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// servedMetrics returns the names of every metric fencepub exposes: the GC
// daemon's /metrics registry and the metrics `run` and `publish` write,
// with a histogram's _bucket, _sum and _count series.
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg, _, err := newGCRegistry(5*time.Minute, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	success, per := runRegistries("r", "published", true, time.Second, time.Now(), true)
	names := map[string]bool{}
	for _, g := range []prometheus.Gatherer{reg, success, per} {
		fams, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			names[f.GetName()] = true
			if f.GetType().String() == "HISTOGRAM" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[f.GetName()+s] = true
				}
			}
		}
	}
	return names
}

// TestMonitoringMetricsExist: every fencepub_* metric the alert rules and
// the dashboard of deploy/monitoring name is one fencepub exposes, so a
// renamed metric cannot leave an alert that never fires. (That the files
// parse is deploy/monitoring's own test, in its own module.)
func TestMonitoringMetricsExist(t *testing.T) {
	served := servedMetrics(t)
	for _, f := range []string{"monitoring/fencepub-alerts.yaml", "monitoring/fencepub-dashboard.json"} {
		named := regexp.MustCompile(`\bfencepub_[a-z0-9_]+`).FindAllString(string(deployFile(t, f)), -1)
		if len(named) == 0 {
			t.Fatalf("%s names no fencepub metric", f)
		}
		for _, n := range named {
			if !served[n] {
				have := make([]string, 0, len(served))
				for k := range served {
					if strings.HasPrefix(k, "fencepub_") {
						have = append(have, k)
					}
				}
				slices.Sort(have)
				t.Errorf("%s names %s, which fencepub does not expose (it has %v)", f, n, have)
			}
		}
	}
}

// TestBuildInfoMetric: the GC daemon's /metrics has fencepub_build_info = 1
// labelled with the build `fencepub version` prints.
func TestBuildInfoMetric(t *testing.T) {
	reg, _, err := newGCRegistry(time.Minute, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	b := currentBuild()
	for _, f := range fams {
		if f.GetName() != "fencepub_build_info" {
			continue
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("fencepub_build_info has %d series", len(f.GetMetric()))
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["version"] != b.Version || labels["goversion"] != b.GoVersion {
			t.Fatalf("fencepub_build_info %v = %v; want version %q, goversion %q = 1", labels, m.GetGauge().GetValue(), b.Version, b.GoVersion)
		}
		return
	}
	t.Fatal("no fencepub_build_info")
}

// Package monitoring holds no code: its tests check the Prometheus rules and
// the Grafana dashboard of this directory with Prometheus's own parsers. It
// is a module of its own so that github.com/prometheus/prometheus, a large
// dependency, stays out of fencepub's go.mod (`make test` runs it). That
// every metric named here exists is checked by cmd/fencepub's
// TestMonitoringMetricsExist against the real registries.
package monitoring

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// TestAlertRules parses fencepub-alerts.yaml as Prometheus does (unknown
// fields are errors, every expression must parse) and checks that the
// alerts docs/monitoring.md promises are there, each with a summary.
func TestAlertRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile("fencepub-alerts.yaml", false)
	if len(errs) > 0 {
		t.Fatalf("fencepub-alerts.yaml: %v", errs)
	}
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Fatalf("group %s: a rule that is not an alert: %+v", g.Name, r)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no summary", r.Alert)
			}
			names = append(names, r.Alert)
		}
	}
	for _, want := range []string{"FencepubGCNoLeader", "FencepubGCNotSucceeding", "FencepubQuarantinedObjects", "FencepubResourceNotPublished", "FencepubStalePublishesRising"} {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s (have %v)", want, names)
		}
	}
}

// TestDashboard decodes fencepub-dashboard.json and parses every panel's
// PromQL, with Grafana's $__rate_interval replaced by a duration.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("fencepub-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard without uid or panels")
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if _, err := parser.ParseExpr(strings.ReplaceAll(q.Expr, "$__rate_interval", "5m")); err != nil {
				t.Errorf("panel %q: %q: %v", p.Title, q.Expr, err)
			}
		}
	}
}

// TestGCNotSucceedingAllowsSlowPasses evaluates FencepubGCNotSucceeding's
// expression, as written in fencepub-alerts.yaml, on two histories of a
// daemon with a 60 s interval whose passes take 300 s: a healthy one, where
// the last success is one cycle (interval + pass) old when the next pass
// ends, must not match; a stuck one, where no pass has succeeded for 35
// minutes, must.
func TestGCNotSucceedingAllowsSlowPasses(t *testing.T) {
	groups, errs := rulefmt.ParseFile("fencepub-alerts.yaml", false)
	if len(errs) > 0 {
		t.Fatalf("fencepub-alerts.yaml: %v", errs)
	}
	var expr string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "FencepubGCNotSucceeding" {
				expr = strings.Join(strings.Fields(r.Expr), " ")
			}
		}
	}
	if expr == "" {
		t.Fatal("no alert FencepubGCNotSucceeding")
	}
	// One sample a minute (axN repeats a for N more minutes). Passes end at
	// 0, 5m and 11m (a 300 s pass, a 60 s wait, the next 300 s pass); the
	// stuck history has no success after 5m.
	promqltest.RunTest(t, `
load 1m
  fencepub_gc_interval_seconds 60x40
  fencepub_gc_last_success_duration_seconds 300x40
  fencepub_gc_last_success_timestamp_seconds 0x4 300x5 660x5
  stuck_last_success_timestamp_seconds 0x4 300x35

eval instant at 10m `+expr+`

eval instant at 40m `+strings.ReplaceAll(expr, "fencepub_gc_last_success_timestamp_seconds", "stuck_last_success_timestamp_seconds")+`
  {} 2100
`, promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery))
}

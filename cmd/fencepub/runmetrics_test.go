//go:build !unit

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// pushRecorder stands in for a Prometheus pushgateway: it records each
// push's method, path and body.
type pushRecorder struct {
	mu     sync.Mutex
	pushes []string // "METHOD PATH\nBODY"
}

func (p *pushRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.pushes = append(p.pushes, r.Method+" "+r.URL.Path+"\n"+string(b))
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (p *pushRecorder) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pushes
	p.pushes = nil
	return out
}

// readTextfile parses a node_exporter textfile.
func readTextfile(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return fams
}

// gaugeOf returns the value of family name's series with labels, and
// whether it exists.
func gaugeOf(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		match := len(got) == len(labels)
		for k, v := range labels {
			match = match && got[k] == v
		}
		if match {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestRunMetrics: `run` and `publish` write their outcome to a
// node_exporter textfile (kept across runs: a failed run leaves the last
// success in place) and push it to a pushgateway, whose groups keep the
// last success apart from each outcome; a group publish records each
// member. Bad flag values exit 2 before anything runs.
func TestRunMetrics(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "runmetrics")
	gw := &pushRecorder{}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	dir := t.TempDir()
	prom := filepath.Join(dir, "fencepub.prom")
	body := filepath.Join(dir, "body")
	if err := os.WriteFile(body, []byte("metrics"), 0o644); err != nil {
		t.Fatal(err)
	}
	mflags := []string{"--metrics-textfile", prom, "--pushgateway", srv.URL}
	runJob := func(want int, script string) {
		t.Helper()
		args := append(append([]string{"run", "--resource", "nightly", "--owner", "me", "--ttl", "10s", "--run-id", script}, mflags...), conn...)
		runWant(t, want, append(args, "--", "sh", "-c", script)...)
	}

	before := float64(time.Now().Unix())
	runJob(0, "echo ok")
	fams := readTextfile(t, prom)
	okAt, ok := gaugeOf(fams, metricRunLastSuccess, map[string]string{"resource": "nightly"})
	if !ok || okAt < before {
		t.Fatalf("last success %v (%v) after a published run:\n%v", okAt, ok, fams)
	}
	if _, ok := gaugeOf(fams, metricRunDuration, map[string]string{"resource": "nightly", "outcome": "published"}); !ok {
		t.Fatalf("no duration of the published run: %v", fams)
	}
	pushes := gw.take()
	if len(pushes) != 2 || !strings.HasPrefix(pushes[0], "PUT /metrics/job/fencepub_run/resource/nightly\n") ||
		!strings.Contains(pushes[0], metricRunLastSuccess) ||
		!pushedTo(pushes[1], "resource", "nightly", "outcome", "published") {
		t.Fatalf("pushes after a published run: %q", pushes)
	}

	runJob(7, "exit 7")
	fams = readTextfile(t, prom)
	if again, ok := gaugeOf(fams, metricRunLastSuccess, map[string]string{"resource": "nightly"}); !ok || again != okAt {
		t.Fatalf("a failed run changed the last success: %v (%v), was %v", again, ok, okAt)
	}
	if _, ok := gaugeOf(fams, metricRunLastOutcome, map[string]string{"resource": "nightly", "outcome": "command_failed"}); !ok {
		t.Fatalf("no command_failed outcome: %v", fams)
	}
	if _, ok := gaugeOf(fams, metricRunLastOutcome, map[string]string{"resource": "nightly", "outcome": "published"}); !ok {
		t.Fatalf("the published outcome's series went away: %v", fams)
	}
	if pushes := gw.take(); len(pushes) != 1 || !pushedTo(pushes[0], "resource", "nightly", "outcome", "command_failed") {
		t.Fatalf("pushes after a failed run (the success group must stay): %q", pushes)
	}

	// publish with a fence never granted: stale.
	runWant(t, exitcode.Stale, append(append([]string{"publish", "--resource", "nightly", "--owner", "ghost", "--epoch", "1", "--fence", "9", "--seq", "1", "--key", "k", "--file", body}, mflags...), conn...)...)
	if _, ok := gaugeOf(readTextfile(t, prom), metricRunLastOutcome, map[string]string{"resource": "nightly", "outcome": "stale"}); !ok {
		t.Fatal("no stale outcome after a stale publish")
	}
	gw.take()

	// A group publish records each member as a resource of its own.
	runWant(t, exitcode.OK, append(append([]string{"publish", "--set", "daily=" + body, "--set", "breakdown=" + body, "--owner", "me", "--ttl", "10s", "--key", "g1"}, mflags...), conn...)...)
	fams = readTextfile(t, prom)
	for _, r := range []string{"daily", "breakdown"} {
		if _, ok := gaugeOf(fams, metricRunLastSuccess, map[string]string{"resource": r}); !ok {
			t.Fatalf("no last success of group member %s: %v", r, fams)
		}
	}
	if _, ok := gaugeOf(fams, metricRunLastSuccess, map[string]string{"resource": ""}); ok {
		t.Fatalf("a group publish recorded a series without a resource: %v", fams)
	}
	if pushes := gw.take(); len(pushes) != 4 || !pushedTo(pushes[1], "resource", "daily", "outcome", "published") || !pushedTo(pushes[3], "resource", "breakdown", "outcome", "published") {
		t.Fatalf("pushes after a group publish: %q", pushes)
	}

	for _, bad := range [][]string{{"--metrics-textfile", filepath.Join(dir, "x.txt")}, {"--pushgateway", "gateway:9091"}} {
		args := append(append([]string{"publish", "--resource", "nightly", "--owner", "me", "--ttl", "10s", "--key", "k9", "--file", body}, bad...), conn...)
		runWant(t, exitcode.Usage, args...)
	}
	if pushes := gw.take(); len(pushes) != 0 {
		t.Fatalf("refused flags pushed: %q", pushes)
	}
}

// pushedTo reports whether push (a recorded request: method, path, newline,
// body) is a PUT to job fencepub_run grouped by exactly the label pairs kv,
// in any order: the pushgateway's grouping key is a set.
func pushedTo(push string, kv ...string) bool {
	path, _, _ := strings.Cut(push, "\n")
	rest, ok := strings.CutPrefix(path, "PUT /metrics/job/fencepub_run/")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != len(kv) {
		return false
	}
	got := map[string]string{}
	for i := 0; i+1 < len(parts); i += 2 {
		got[parts[i]] = parts[i+1]
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if got[kv[i]] != kv[i+1] {
			return false
		}
	}
	return true
}

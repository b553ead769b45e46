//go:build !unit

package gc

import (
	"github.com/fencepub/fencepub/internal/recovery"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/prometheus/client_golang/prometheus"
)

// scrape GETs /metrics of h and returns the value of each sample by its
// series ("name" or "name{label=\"v\"}").
func scrape(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// A pass that deletes an orphan and quarantines an old-epoch object shows in
// /metrics: the deletion counters grow by what the report deleted, the kept
// gauges and the quarantined gauge hold the last pass's counts (a second
// pass does not add to them).
func TestMetricsAfterPass(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := e.collector(func(c *Config) { c.Metrics = m })
	d, err := newDaemon(daemonConfig{Collector: c, Owner: "gc-metrics"})
	if err != nil {
		t.Fatal(err)
	}
	h := d.Handler(reg)
	before := scrape(t, h)
	for _, s := range []string{"fencepub_gc_deleted_objects_total", "fencepub_gc_deleted_bytes_total",
		"fencepub_gc_quarantined_objects", `fencepub_gc_kept_objects{decision="quarantined"}`} {
		if v, ok := before[s]; !ok || v != 0 {
			t.Fatalf("before any pass: %s = %v (present %v), want 0", s, v, ok)
		}
	}

	const res = "metered"
	g, pa := e.worker(res, "a")
	e.publish(pa, "1", publisher.Applied)
	e.release(g)
	e.publish(e.bind(e.pub, e.acquire(res, "b", 0)), "2", publisher.Applied)
	orphan := e.publish(pa, "3", publisher.Stale)
	// recover moves the epoch: an object of the old epoch above the pointer
	// it recorded may be a lost publish's only copy, and is quarantined.
	if _, err := recovery.Recover(ctxT(t, time.Minute), e.auth, recovery.Options{}); err != nil {
		t.Fatal(err)
	}
	pv := e.Pointer(res).Version
	quarantined := e.NS.ObjectKey(res, layout.Version{Epoch: pv.Epoch, Fence: pv.Fence, Seq: pv.Seq + 1}, "00000000000000aa")
	e.put(quarantined, "lost publish")

	rep := e.run(c, res)
	mustDecide(t, rep, orphan.Attempt.Object.Key, kindUnpublishable, "deleted", "")
	mustDecide(t, rep, quarantined, kindQuarantined, "kept", "")
	var bytes int64
	for _, dec := range rep.Decisions {
		if dec.Action == "deleted" {
			bytes += dec.Size
		}
	}
	want := map[string]float64{
		"fencepub_gc_deleted_objects_total":                float64(rep.Deleted),
		"fencepub_gc_deleted_bytes_total":                  float64(bytes),
		"fencepub_gc_quarantined_objects":                  1,
		`fencepub_gc_kept_objects{decision="quarantined"}`: 1,
		`fencepub_gc_kept_objects{decision="published"}`:   float64(rep.Kept.Published),
		`fencepub_gc_kept_objects{decision="retained"}`:    float64(rep.Kept.Retained),
		`fencepub_gc_kept_objects{decision="in_flight"}`:   0,
		`fencepub_gc_passes_total{result="ok"}`:            1,
		`fencepub_gc_passes_total{result="error"}`:         0,
	}
	check := func(when string) {
		t.Helper()
		got := scrape(t, h)
		for s, v := range want {
			if g, ok := got[s]; !ok || g != v {
				t.Errorf("%s: %s = %v (present %v), want %v", when, s, g, ok, v)
			}
		}
	}
	if rep.Deleted < 1 || bytes < int64(len("3")) || rep.Kept.Published != 1 {
		t.Fatalf("pass deleted %d (%d bytes), kept %+v", rep.Deleted, bytes, rep.Kept)
	}
	check("after the first pass")

	// A second pass deletes nothing and keeps the same objects: the
	// counters stay, the gauges are set again, not added to.
	if rep2 := e.run(c, res); rep2.Deleted != 0 {
		t.Fatalf("second pass deleted %d", rep2.Deleted)
	}
	want[`fencepub_gc_passes_total{result="ok"}`] = 2
	check("after the second pass")

	// A dry run changes none of them.
	if _, err := c.Run(ctxT(t, time.Minute), RunOptions{Resources: []string{res}, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	check("after a dry run")
}

package gc

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the collector's and daemon's Prometheus metrics, registered on
// an injected registry (never the global default):
//
//   - fencepub_gc_objects_total{decision}: objects classified by real
//     passes, by decision (published, retained, unpublishable, in_flight,
//     abandoned, quarantined, foreign);
//   - fencepub_gc_pass_duration_seconds: wall time of each pass;
//   - fencepub_gc_last_success_timestamp_seconds: Unix time of the last pass
//     that finished without errors;
//   - fencepub_gc_passes_total{result}: passes by result ("ok", "error");
//   - fencepub_gc_records_deleted_total{kind}: etcd records pruned (history,
//     ops, requests, grants);
//   - fencepub_gc_leader: 1 while this daemon holds the GC lease.
type Metrics struct {
	objects      *prometheus.CounterVec
	passDuration prometheus.Histogram
	lastSuccess  prometheus.Gauge
	passes       *prometheus.CounterVec
	records      *prometheus.CounterVec
	leader       prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg. Errors: the
// registry's (e.g. registering twice on one registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencepub_gc_objects_total", Help: "Objects classified by GC passes, by decision.",
		}, []string{"decision"}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencepub_gc_pass_duration_seconds", Help: "Wall time of GC passes.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10), // 10 ms .. ~43 min
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencepub_gc_last_success_timestamp_seconds", Help: "Unix time of the last GC pass without errors.",
		}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencepub_gc_passes_total", Help: "GC passes by result.",
		}, []string{"result"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencepub_gc_records_deleted_total", Help: "etcd records pruned by GC, by kind.",
		}, []string{"kind"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencepub_gc_leader", Help: "1 while this GC daemon holds the GC lease.",
		}),
	}
	for _, k := range AllKinds() {
		m.objects.WithLabelValues(string(k))
	}
	for _, r := range []string{"ok", "error"} {
		m.passes.WithLabelValues(r)
	}
	for _, k := range []string{"history", "ops", "requests", "grants"} {
		m.records.WithLabelValues(k)
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.objects, m.passDuration, m.lastSuccess, m.passes, m.records, m.leader} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// pass records one finished pass.
func (m *Metrics) pass(d time.Duration, err error) {
	m.passDuration.Observe(d.Seconds())
	if err != nil {
		m.passes.WithLabelValues("error").Inc()
		return
	}
	m.passes.WithLabelValues("ok").Inc()
	m.lastSuccess.SetToCurrentTime()
}

func (m *Metrics) recordsDeleted(c RecordCounts) {
	m.records.WithLabelValues("history").Add(float64(c.History))
	m.records.WithLabelValues("ops").Add(float64(c.Ops))
	m.records.WithLabelValues("requests").Add(float64(c.Requests))
	m.records.WithLabelValues("grants").Add(float64(c.Grants))
}

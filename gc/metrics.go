package gc

import (
	"errors"
	"time"

	"github.com/fencepub/fencepub/internal/operator"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the collector's and daemon's Prometheus metrics, registered on
// an injected registry (never the global default):
// fencepub_gc_deleted_objects_total, fencepub_gc_deleted_bytes_total,
// fencepub_gc_kept_objects{decision}, fencepub_gc_quarantined_objects,
// fencepub_gc_pass_duration_seconds,
// fencepub_gc_last_success_timestamp_seconds (Unix time),
// fencepub_gc_last_success_duration_seconds,
// fencepub_gc_passes_total{result}, fencepub_gc_records_deleted_total{kind}
// and fencepub_gc_leader. The package doc, "Probes and metrics", says what
// each counts. Dry runs change none of them. Safe for concurrent use.
type Metrics struct {
	deletedObjects prometheus.Counter
	deletedBytes   prometheus.Counter
	kept           *prometheus.GaugeVec
	quarantined    prometheus.Gauge
	passDuration   prometheus.Histogram
	lastSuccess    prometheus.Gauge
	lastSuccessDur prometheus.Gauge
	passes         *prometheus.CounterVec
	records        *prometheus.CounterVec
	leader         prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg. Errors: the
// registry's (e.g. registering twice on one registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		deletedObjects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencepub_gc_deleted_objects_total", Help: "Objects deleted by GC passes.",
		}),
		deletedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencepub_gc_deleted_bytes_total", Help: "Bytes of the objects deleted by GC passes.",
		}),
		kept: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencepub_gc_kept_objects", Help: "Objects the last complete GC pass kept, by decision.",
		}, []string{"decision"}),
		quarantined: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencepub_gc_quarantined_objects", Help: "Objects the last complete GC pass quarantined (see fencepub authority recover).",
		}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencepub_gc_pass_duration_seconds", Help: "Wall time of GC passes.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10), // 10 ms .. ~43 min
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencepub_gc_last_success_timestamp_seconds", Help: "Unix time of the last GC pass without errors.",
		}),
		lastSuccessDur: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencepub_gc_last_success_duration_seconds", Help: "Wall time of the last GC pass without errors.",
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
	m.setKept(operator.GCKept{})
	for _, r := range []string{"ok", "error"} {
		m.passes.WithLabelValues(r)
	}
	for _, k := range []string{"history", "ops", "requests", "grants"} {
		m.records.WithLabelValues(k)
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.deletedObjects, m.deletedBytes, m.kept, m.quarantined,
		m.passDuration, m.lastSuccess, m.lastSuccessDur, m.passes, m.records, m.leader} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// pass records one finished pass and its report: the kept gauges are set
// only by a pass without errors (a partial pass would under-count).
func (m *Metrics) pass(d time.Duration, rep *passReport, err error) {
	m.passDuration.Observe(d.Seconds())
	if err != nil {
		m.passes.WithLabelValues("error").Inc()
		return
	}
	m.passes.WithLabelValues("ok").Inc()
	m.lastSuccess.SetToCurrentTime()
	m.lastSuccessDur.Set(d.Seconds())
	rep.mu.Lock()
	k := rep.Kept
	rep.mu.Unlock()
	m.setKept(k)
}

func (m *Metrics) setKept(k operator.GCKept) {
	for d, n := range map[kind]int64{kindPublished: k.Published, kindRetained: k.Retained, kindInFlight: k.InFlight, kindQuarantined: k.Quarantined, kindForeign: k.Foreign} {
		m.kept.WithLabelValues(string(d)).Set(float64(n))
	}
	m.quarantined.Set(float64(k.Quarantined))
}

// deleted counts one object a real pass deleted.
func (m *Metrics) deleted(size int64) {
	m.deletedObjects.Inc()
	m.deletedBytes.Add(float64(size))
}

func (m *Metrics) recordsDeleted(c operator.GCRecordCounts) {
	m.records.WithLabelValues("history").Add(float64(c.History))
	m.records.WithLabelValues("ops").Add(float64(c.Ops))
	m.records.WithLabelValues("requests").Add(float64(c.Requests))
	m.records.WithLabelValues("grants").Add(float64(c.Grants))
}

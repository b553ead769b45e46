package publisher

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the publisher's Prometheus collectors:
//
//	fencepub_publish_total{outcome,reason}          publishes that reached an outcome
//	fencepub_publish_failures_total{stage}          publishes that reached none (stage:
//	                                                validate, base, object, history, txn, classify)
//	fencepub_publish_object_write_duration_seconds  object write (PUT, multipart or copy)
//	fencepub_publish_txn_duration_seconds           first send to answer, re-sends included
//	fencepub_publish_txn_resends_total              transaction re-sends after no answer
//	fencepub_publish_bytes_written_total            body bytes written to the store
//	fencepub_resolve_total{outcome}                 Resolve answers
//
// Stale, duplicate and conflict are outcomes, not failures: under fencing a
// stale publish is expected.
type metrics struct {
	publishes *prometheus.CounterVec
	failures  *prometheus.CounterVec
	objectDur prometheus.Histogram
	txnDur    prometheus.Histogram
	resends   prometheus.Counter
	bytes     prometheus.Counter
	resolves  *prometheus.CounterVec
}

// newMetrics builds the collectors and registers them with reg (nil: not
// registered). It fails when reg already holds them.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 16) // 1 ms .. 33 s
	m := &metrics{
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencepub_publish_total", Help: "Publishes by outcome (applied, duplicate, conflict, stale, unknown) and stale reason.",
		}, []string{"outcome", "reason"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencepub_publish_failures_total", Help: "Publishes that ended in an error before reaching an outcome, by stage.",
		}, []string{"stage"}),
		objectDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencepub_publish_object_write_duration_seconds", Help: "Time to write a publish's object to the store.", Buckets: buckets,
		}),
		txnDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fencepub_publish_txn_duration_seconds", Help: "Time from the first send of a publish transaction to its answer, re-sends included.", Buckets: buckets,
		}),
		resends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencepub_publish_txn_resends_total", Help: "Publish transactions re-sent after a send got no answer.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencepub_publish_bytes_written_total", Help: "Body bytes written to the object store by publishes.",
		}),
		resolves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencepub_resolve_total", Help: "Resolve answers by outcome.",
		}, []string{"outcome"}),
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{m.publishes, m.failures, m.objectDur, m.txnDur, m.resends, m.bytes, m.resolves} {
			if err := reg.Register(col); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) outcome(o Outcome, r Reason) {
	m.publishes.WithLabelValues(string(o), string(r)).Inc()
}
func (m *metrics) failure(stage string) { m.failures.WithLabelValues(stage).Inc() }
func (m *metrics) resolved(o Outcome)   { m.resolves.WithLabelValues(string(o)).Inc() }

func (m *metrics) objectWritten(d time.Duration, n int64) {
	m.objectDur.Observe(d.Seconds())
	m.bytes.Add(float64(n))
}

func (m *metrics) txnDone(d time.Duration, sends int) {
	m.txnDur.Observe(d.Seconds())
	m.resends.Add(float64(sends - 1))
}

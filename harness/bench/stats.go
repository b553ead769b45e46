// Package bench holds the measuring tools of fencepub's benchmarks: a
// runner that measures operations (Run, Series, Compare, Interleave) into
// latency percentiles and throughput (Stats), the baselines fencepub is
// compared with (Target: the physical floor of a publish and of a grant;
// Peer: what users write today without fencepub), and the report (Row,
// Report: latest.json, latest.md, and a PNG chart). Results are ratios of
// two measurements of the same run on the same servers, because the
// machines they run on are shared and noisy.
//
// It imports no fencepub package but layout and objstore, so every
// package's own benchmarks can use it; the suite of `fencepub-bench` lives
// in harness/bench/suite.
package bench

import (
	"context"
	"math"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Stats summarises one side of a measurement. Latencies are per operation.
type Stats struct {
	Ops        int           `json:"ops"`    // operations that succeeded
	Errors     int           `json:"errors"` // operations that failed (not in the latencies)
	P50        time.Duration `json:"p50_ns"`
	P95        time.Duration `json:"p95_ns,omitempty"`
	P99        time.Duration `json:"p99_ns"`
	Mean       time.Duration `json:"mean_ns"`
	Wall       time.Duration `json:"wall_ns"`   // measured time, summed over rounds
	Throughput float64       `json:"ops_per_s"` // Ops / Wall (or as the row's Unit says)
	// AllocsPerOp is the process's heap allocations during the measurement
	// divided by Ops (client side: etcd and MinIO clients included).
	AllocsPerOp float64 `json:"allocs_per_op,omitempty"`
	// PeakRSS is the process's peak resident set during the measurement,
	// in bytes, when measured (GC workload).
	PeakRSS int64 `json:"peak_rss_bytes,omitempty"`
	// PeakHeap is the Go heap in use at its sampled peak, in bytes, when
	// measured.
	PeakHeap   int64  `json:"peak_heap_bytes,omitempty"`
	FirstError string `json:"first_error,omitempty"`
}

// Op is one measured operation; worker is 0..concurrency-1 and i counts the
// worker's own operations from 0 across every round of a Series.
type Op func(ctx context.Context, worker, i int) error

// Recorder collects operation latencies from concurrent goroutines. The
// zero value is ready; it is safe for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	lat      []time.Duration
	errs     int
	firstErr string
}

// Time runs f, records its latency (or its error) and returns its error.
func (r *Recorder) Time(f func() error) error {
	t0 := time.Now()
	err := f()
	r.Add(time.Since(t0), err)
	return err
}

// Add records one operation of latency d; a non-nil err counts as an error
// and d is dropped.
func (r *Recorder) Add(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.errs == 0 {
			r.firstErr = err.Error()
		}
		r.errs++
		return
	}
	r.lat = append(r.lat, d)
}

// Stats summarises the recorded operations over wall time wall.
func (r *Recorder) Stats(wall time.Duration) Stats {
	r.mu.Lock()
	lat := append([]time.Duration(nil), r.lat...)
	s := Stats{Ops: len(lat), Errors: r.errs, Wall: wall, FirstError: r.firstErr}
	r.mu.Unlock()
	if len(lat) == 0 {
		return s
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	s.P50 = Percentile(lat, 0.50)
	s.P95 = Percentile(lat, 0.95)
	s.P99 = Percentile(lat, 0.99)
	s.Mean = sum / time.Duration(len(lat))
	if wall > 0 {
		s.Throughput = float64(len(lat)) / wall.Seconds()
	}
	return s
}

// Series accumulates one side of a comparison over several rounds, so two
// sides can be interleaved and drift on a shared machine hits both alike.
// It is not safe for concurrent use (a round runs its own workers).
type Series struct {
	rec    Recorder
	wall   time.Duration
	next   []int // per worker: operations started so far, across rounds
	allocs uint64
}

// Run executes one round: ops operations of op spread over concurrency
// workers. It blocks until every operation ended or ctx is done. A failing
// operation counts as an error and is excluded from the latencies.
func (s *Series) Run(ctx context.Context, ops, concurrency int, op Op) {
	concurrency = max(concurrency, 1)
	for len(s.next) < concurrency {
		s.next = append(s.next, 0)
	}
	var taken atomic.Int64
	m0 := Mallocs()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			for taken.Add(1) <= int64(ops) && ctx.Err() == nil {
				i := s.next[w]
				s.next[w]++
				_ = s.rec.Time(func() error { return op(ctx, w, i) })
			}
		})
	}
	wg.Wait()
	s.wall += time.Since(start)
	s.allocs += Mallocs() - m0
}

// Custom runs one round of a custom shape: f runs the round's operations,
// recording each in rec, and returns the round's measured wall time.
func (s *Series) Custom(f func(rec *Recorder) time.Duration) {
	m0 := Mallocs()
	s.wall += f(&s.rec)
	s.allocs += Mallocs() - m0
}

// Stats summarises every round run so far.
func (s *Series) Stats() Stats {
	st := s.rec.Stats(s.wall)
	if st.Ops > 0 {
		st.AllocsPerOp = float64(s.allocs) / float64(st.Ops)
	}
	return st
}

// Run executes ops operations of op spread over concurrency workers and
// returns their latency percentiles and throughput (one round of a Series).
func Run(ctx context.Context, ops, concurrency int, op Op) Stats {
	var s Series
	s.Run(ctx, ops, concurrency, op)
	return s.Stats()
}

// Compare measures subject and base alternately in rounds, ops operations
// each in all, at the given concurrency, and returns both summaries
// (Interleave of two Series.Run sides).
func Compare(ctx context.Context, rounds, ops, concurrency int, subject, base Op) (Stats, Stats) {
	st := Interleave(ctx, rounds, ops,
		func(s *Series, n int) { s.Run(ctx, n, concurrency, subject) },
		func(s *Series, n int) { s.Run(ctx, n, concurrency, base) })
	return st[0], st[1]
}

// Interleave runs every side once per round, ops operations per side in
// all (split evenly over the rounds: side(s, n) runs n operations into its
// own Series s), rotating which side goes first from round to round, and
// returns each side's summary in order. Interleaving makes the ratios of
// the sides robust to the load of a shared machine drifting. It stops
// early when ctx ends.
func Interleave(ctx context.Context, rounds, ops int, sides ...func(s *Series, n int)) []Stats {
	rounds = max(min(rounds, ops), 1)
	series := make([]Series, len(sides))
	for r := range rounds {
		n := ops/rounds + btoi(r < ops%rounds)
		for k := range sides {
			if ctx.Err() != nil {
				break
			}
			j := (r + k) % len(sides)
			sides[j](&series[j], n)
		}
	}
	out := make([]Stats, len(sides))
	for i := range series {
		out[i] = series[i].Stats()
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Mallocs returns the process's cumulative heap allocation count
// (runtime.MemStats.Mallocs; it briefly stops the world).
func Mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// Percentile returns the q-quantile (0..1) of sorted latencies by the
// nearest-rank method.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// Ratio returns a/b, or 0 when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

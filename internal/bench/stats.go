// Package bench measures fencepub against baselines measured in the same
// run on the same servers: the physical floor of a publish (sha256 + one
// create-only PUT + one bare etcd compare-and-put), and what users write
// today (an etcd lock per publish). Results are ratios, because the machines
// they run on are shared and noisy (issue "Benchmarks side by side").
package bench

import (
	"context"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Stats summarises one workload run. Latencies are per operation.
type Stats struct {
	Ops        int           `json:"ops"`
	Errors     int           `json:"errors"`
	P50        time.Duration `json:"p50_ns"`
	P99        time.Duration `json:"p99_ns"`
	Mean       time.Duration `json:"mean_ns"`
	Wall       time.Duration `json:"wall_ns"`
	Throughput float64       `json:"ops_per_s"`
	FirstError string        `json:"first_error,omitempty"`
}

// Op is one measured operation; worker is 0..concurrency-1 and i counts the
// worker's own operations from 0.
type Op func(ctx context.Context, worker, i int) error

// Run executes ops operations of op spread over concurrency workers and
// returns their latency percentiles and throughput. It blocks until every
// operation ended or ctx is done. A failing operation counts as an error
// and is excluded from the latencies.
func Run(ctx context.Context, ops, concurrency int, op Op) Stats {
	concurrency = max(concurrency, 1)
	var (
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, ops)
		errs     int
		firstErr string
		next     atomic.Int64
	)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if next.Add(1) > int64(ops) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := op(ctx, w, i)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if errs == 0 {
						firstErr = err.Error()
					}
					errs++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	s := Stats{Ops: len(lat), Errors: errs, Wall: wall, FirstError: firstErr}
	if len(lat) == 0 {
		return s
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	s.P50 = Percentile(lat, 0.50)
	s.P99 = Percentile(lat, 0.99)
	s.Mean = sum / time.Duration(len(lat))
	s.Throughput = float64(len(lat)) / wall.Seconds()
	return s
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

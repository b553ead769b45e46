package authority

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/harness/bench"
)

// BenchmarkAuthority measures, in one run on the same servers, Acquire next
// to its physical floor (bench.Target.FloorAcquire: a lease grant + one bare
// transaction creating a leased key + one create-only marker PUT) and Renew
// next to a bare lease keepalive. `fencepub-bench` (workload authority)
// measures the same through the public API. Acquires are uncontended: one resource, released between
// acquires outside the timed section (the warm path: one lease grant, one
// grant transaction, the marker PUT and the marker listing). Run with
//
//	go test -run '^$' -bench Authority -benchtime 1x ./authority
//
// Each b.N iteration is one full measurement of benchOps operations per
// kind; the percentiles are reported as metrics (ms).
func BenchmarkAuthority(b *testing.B) {
	const benchOps = 300
	a := shared(b)
	ctx := context.Background()
	target := bench.Target{Etcd: a.cli, Store: a.st, NS: a.ns}
	for b.Loop() {
		var acq, floor, renew, keepalive []time.Duration
		// Interleave the subject and its floor so drift hits both alike.
		var g Grant
		for i := range benchOps {
			if g.LeaseID != 0 {
				if err := a.Release(ctx, g); err != nil {
					b.Fatal(err)
				}
			}
			t0 := time.Now()
			var err error
			g, err = a.Acquire(ctx, AcquireRequest{Resource: "bench", Owner: "bench", TTL: 10 * time.Second})
			acq = append(acq, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			t0 = time.Now()
			if err := target.FloorAcquire(ctx, uint64(i), 10*time.Second); err != nil {
				b.Fatal(err)
			}
			floor = append(floor, time.Since(t0))
		}
		for range benchOps {
			t0 := time.Now()
			if err := a.Renew(ctx, g); err != nil {
				b.Fatal(err)
			}
			renew = append(renew, time.Since(t0))
			t0 = time.Now()
			if _, err := a.cli.KeepAliveOnce(ctx, g.LeaseID); err != nil {
				b.Fatal(err)
			}
			keepalive = append(keepalive, time.Since(t0))
		}
		report := func(name string, d []time.Duration) (p50, p99 time.Duration) {
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			p50, p99 = bench.Percentile(d, 0.50), bench.Percentile(d, 0.99)
			b.ReportMetric(float64(p50.Microseconds())/1000, name+"-p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, name+"-p99-ms")
			return p50, p99
		}
		ap50, ap99 := report("acquire", acq)
		fp50, fp99 := report("acquire-floor", floor)
		rp50, rp99 := report("renew", renew)
		kp50, kp99 := report("keepalive", keepalive)
		b.Logf("acquire p50 %s p99 %s | floor p50 %s p99 %s | ratio p50 %.2f", ap50, ap99, fp50, fp99, bench.Ratio(float64(ap50), float64(fp50)))
		b.Logf("renew   p50 %s p99 %s | keepalive p50 %s p99 %s | ratio p50 %.2f", rp50, rp99, kp50, kp99, bench.Ratio(float64(rp50), float64(kp50)))
	}
}

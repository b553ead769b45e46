//go:build !unit

package gc

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/minio/minio-go/v7"
)

// Benchmarks, not part of `make test`:
//
//	go test -run '^$' -bench . -benchtime 1x ./gc/
//
// FENCEPUB_GC_BENCH_OBJECTS sets the scan size (default 100000) and
// FENCEPUB_GC_BENCH_DELETE the delete size (default 20000). The bulk
// objects are written with bare PUTs (not through the publisher, which
// would take minutes and grow etcd): they are keys of a stale fence below
// the pointer, i.e. unpublishable orphans.

func benchSize(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// fill writes n one-byte objects: keyOf(i) for i in [0, n), 64 at a time.
func (e *env) fill(n int, keyOf func(int) string) {
	e.t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if _, err := e.Store.Client.PutObject(context.Background(), e.Store.Bucket, keyOf(i), strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		e.t.Fatal(err)
	}
}

// stalePrefix publishes twice on res (fences 1 and 2) and returns a key
// maker for unpublishable objects of fence 1.
func (e *env) stalePrefix(res string) func(int) string {
	e.t.Helper()
	a := e.acquire(res, "a", 0)
	e.publish(e.bind(e.pub, a), "1", publisher.Applied)
	e.release(a)
	b := e.acquire(res, "b", 0)
	e.publish(e.bind(e.pub, b), "2", publisher.Applied)
	e.release(b)
	return func(i int) string {
		return e.NS.ObjectKey(res, layout.Version{Epoch: a.Epoch, Fence: a.Generation, Seq: uint64(i) + 2}, layout.NewNonce())
	}
}

// peakHeap samples the heap in use every 5 ms while f runs and returns the
// peak in bytes.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak.Load()
}

// BenchmarkScan compares a dry-run pass (snapshot, listing,
// classification) over one resource with a bare ListObjects of the same
// prefix, and its peak heap at a tenth and at the full object count.
func BenchmarkScan(b *testing.B) {
	n := benchSize("FENCEPUB_GC_BENCH_OBJECTS", 100000)
	e := newEnv(b)
	sizes := []int{n / 10, n}
	res := make([]string, len(sizes))
	for i, sz := range sizes {
		res[i] = fmt.Sprintf("scan%d", sz)
		e.fill(sz, e.stalePrefix(res[i]))
	}
	c := e.collector(nil)
	b.ResetTimer()
	for range b.N {
		for i, sz := range sizes {
			start := time.Now()
			listed := 0
			for o := range e.Store.Client.ListObjects(context.Background(), e.Store.Bucket, minio.ListObjectsOptions{Prefix: e.NS.ObjectsPrefix(res[i]), Recursive: true}) {
				if o.Err != nil {
					b.Fatal(o.Err)
				}
				listed++
			}
			bare := time.Since(start)
			var rep *Report
			var err error
			var took time.Duration
			peak := peakHeap(func() {
				start = time.Now()
				rep, err = c.Run(context.Background(), RunOptions{Resources: []string{res[i]}, DryRun: true})
				took = time.Since(start)
			})
			if err != nil || rep.Scanned != int64(sz+2) || listed != sz+2 {
				b.Fatalf("scan of %d: %v, scanned %d, listed %d", sz, err, rep.Scanned, listed)
			}
			b.Logf("%7d objects: gc dry-run pass %6.0f objects/s (%s), bare ListObjects %6.0f objects/s (%s), ratio %.2f, peak heap %.1f MiB",
				sz, float64(sz)/took.Seconds(), took.Round(time.Millisecond), float64(sz)/bare.Seconds(), bare.Round(time.Millisecond),
				bare.Seconds()/took.Seconds(), float64(peak)/(1<<20))
			if i == len(sizes)-1 {
				b.ReportMetric(float64(sz)/took.Seconds(), "gc-objects/s")
				b.ReportMetric(float64(sz)/bare.Seconds(), "list-objects/s")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			}
		}
	}
}

// BenchmarkDelete compares a real pass deleting n unpublishable objects
// with a bare multi-object delete (RemoveObjects) of n other objects.
func BenchmarkDelete(b *testing.B) {
	n := benchSize("FENCEPUB_GC_BENCH_DELETE", 20000)
	e := newEnv(b)
	c := e.collector(nil)
	for i := range b.N {
		b.StopTimer()
		res := fmt.Sprintf("del%d", i)
		e.fill(n, e.stalePrefix(res))
		barePrefix := e.NS.Root() + fmt.Sprintf("bare%d/", i)
		e.fill(n, func(j int) string { return barePrefix + strconv.Itoa(j) })
		b.StartTimer()
		start := time.Now()
		rep, err := c.Run(context.Background(), RunOptions{Resources: []string{res}})
		took := time.Since(start)
		if err != nil || rep.Deleted != int64(n) {
			b.Fatalf("gc deleted %d of %d: %v", rep.Deleted, n, err)
		}
		start = time.Now()
		keys := make(chan minio.ObjectInfo, 1000)
		go func() {
			defer close(keys)
			for j := range n {
				keys <- minio.ObjectInfo{Key: barePrefix + strconv.Itoa(j)}
			}
		}()
		for r := range e.Store.Client.RemoveObjects(context.Background(), e.Store.Bucket, keys, minio.RemoveObjectsOptions{}) {
			b.Fatal(r.Err)
		}
		bare := time.Since(start)
		b.Logf("%d objects: gc pass deletes %.0f objects/s (%s incl. listing and classification), bare RemoveObjects %.0f objects/s (%s), ratio %.2f",
			n, float64(n)/took.Seconds(), took.Round(time.Millisecond), float64(n)/bare.Seconds(), bare.Round(time.Millisecond), bare.Seconds()/took.Seconds())
		b.ReportMetric(float64(n)/took.Seconds(), "gc-deletes/s")
		b.ReportMetric(float64(n)/bare.Seconds(), "bare-deletes/s")
	}
}

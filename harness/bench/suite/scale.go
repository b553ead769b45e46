package suite

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// Sizes of the scale workload.
const (
	scaleVersions   = 10   // versions published per seeded resource
	scaleSeeders    = 64   // concurrent seeding workers
	scalePublishers = 100  // resources publishing while every one is watched
	scaleSpread     = 1024 // distinct resources of the acquire and publish rows (quick: 128)
	scaleConc       = 64   // concurrency of the acquire and publish rows
	scalePage       = 500  // page size of the bare etcd range: GC's own
)

// scaleWorkload is workload 9: fencepub with many resources. It seeds 10k
// resources (× Options.Scale; quick 200) with scaleVersions 1 KiB versions
// each through
// the product (64 concurrent holders), then measures a GC pass over every
// resource (gc --all) against a bare listing of the same keys, a reader
// watch on every resource (memory per watch, and watch lag while
// scalePublishers of them publish) against bare etcd watches, and acquire
// and publish across scaleSpread resources at c=scaleConc against their
// floors.
func (s *runner) scaleWorkload(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadScale)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	res := make([]string, s.n(10_000, 200))
	for i := range res {
		res[i] = fmt.Sprintf("r-%05d", i)
	}
	t0 := time.Now()
	if err := st.seed(ctx, res, scaleVersions); err != nil {
		return err
	}
	took := time.Since(t0)
	n := len(res) * scaleVersions
	s.log.Info("bench: scale seeded", "resources", len(res), "publishes", n, "seconds", took.Seconds())
	seeded := fmt.Sprintf("seeding took %.1f s: %d acquires, %d publishes of 1 KiB (%.0f/s) and %d releases by %d holders",
		took.Seconds(), len(res), n, float64(n)/took.Seconds(), len(res), scaleSeeders)
	if err := s.scaleGC(ctx, st, len(res), seeded); err != nil {
		return err
	}
	if err := s.scaleWatch(ctx, st, res); err != nil {
		return err
	}
	spread := scaleSpread
	if s.opts.Quick {
		spread = 2 * scaleConc
	}
	if err := s.scaleAcquire(ctx, st, spread); err != nil {
		return err
	}
	row, err := s.publishRow(ctx, st, 1<<10, scaleConc, spread, s.n(4*spread, 2*scaleConc))
	if err != nil {
		return err
	}
	row.Workload = WorkloadScale
	s.add(row)
	return nil
}

// seed publishes versions 1 KiB versions on each of res: scaleSeeders
// workers each take a resource, acquire it, publish its versions one after
// another and release it. It returns the first error.
func (st *stack) seed(ctx context.Context, res []string, versions int) error {
	b := body(1 << 10)
	var next atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range scaleSeeders {
		g.Go(func() error {
			for i := int(next.Add(1) - 1); i < len(res); i = int(next.Add(1) - 1) {
				p, grant, err := st.bind(ctx, res[i])
				if err != nil {
					return err
				}
				for v := range versions {
					if _, err = p.Publish(ctx, publisher.Operation{IdempotencyKey: strconv.Itoa(v), Body: bytes.NewReader(b)}); err != nil {
						break
					}
				}
				if rerr := st.auth.Release(ctx, grant); err == nil {
					err = rerr
				}
				if err != nil {
					return fmt.Errorf("seed %s: %w", res[i], err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// scaleGC compares real GC passes over every resource of the domain
// (RunOptions.All, as `fencepub gc --all`) with a bare listing of the keys
// they read: a paged etcd range of the domain's keys and, at the same time,
// a listing of the prepared resources' objects. Both sides' peak RSS is
// measured (measureMemory).
func (s *runner) scaleGC(ctx context.Context, st *stack, nres int, seeded string) error {
	coll, err := gc.New(gc.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(st.NS), Etcd: st.Etcd, Store: st.Store}, Authority: st.auth})
	if err != nil {
		return err
	}
	var (
		passWall, bareWall time.Duration
		scanned, listed    int64
		keys               int64
		deleted            int64
		peaks              [2]memPeak
	)
	pass := func() error {
		var rep *gc.Report
		var err error
		peak := measureMemory(func() {
			t0 := time.Now()
			rep, err = coll.Run(ctx, gc.RunOptions{All: true})
			passWall += time.Since(t0)
		})
		peaks[0] = maxPeak(peaks[0], peak)
		if err != nil {
			return err
		}
		if rep.Resources != nres {
			return fmt.Errorf("gc --all pass covered %d resources, want %d", rep.Resources, nres)
		}
		scanned += rep.Scanned
		deleted += rep.Deleted
		return nil
	}
	bare := func() error {
		var k, o int64
		var err error
		peak := measureMemory(func() {
			t0 := time.Now()
			k, o, err = st.bareListing(ctx)
			bareWall += time.Since(t0)
		})
		peaks[1] = maxPeak(peaks[1], peak)
		keys, listed = keys+k, listed+o
		return err
	}
	rounds := s.slowRounds()
	for r := range rounds {
		first, second := pass, bare
		if r%2 == 1 {
			first, second = bare, pass
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	sub := bench.Stats{Ops: int(scanned), Wall: passWall, Throughput: float64(scanned) / passWall.Seconds(), PeakRSS: peaks[0].RSS, PeakHeap: peaks[0].Heap}
	base := bench.Stats{Ops: int(listed), Wall: bareWall, Throughput: float64(listed) / bareWall.Seconds(), PeakRSS: peaks[1].RSS, PeakHeap: peaks[1].Heap}
	row := bench.NewRow(WorkloadScale, fmt.Sprintf("gc --all: %d resources, %d objects (real passes)", nres, scanned/int64(rounds)), 0, 1,
		sub, "bare etcd range ∥ ListObjects", base)
	row.Unit = "objects/s"
	s.add(row.WithTarget("throughput >= 0.8x", func(x bench.Row) bool { return x.RatioThroughput >= 0.8 }).
		WithNote(seeded).WithNote(fmt.Sprintf("%d rounds, alternating; a pass %.2f s, the bare listing %.2f s (%d etcd keys in pages of %d while the objects are listed); %d objects deleted; peak RSS %.1f MiB (heap %.1f MiB) vs the bare listing's %.1f MiB (heap %.1f MiB)",
		rounds, passWall.Seconds()/float64(rounds), bareWall.Seconds()/float64(rounds), keys/int64(rounds), scalePage, deleted,
		bench.MiB(peaks[0].RSS), bench.MiB(peaks[0].Heap), bench.MiB(peaks[1].RSS), bench.MiB(peaks[1].Heap))))
	rss := bench.NewRow(WorkloadScale, fmt.Sprintf("gc --all: peak RSS of a pass, %d resources", nres), 0, 1,
		bench.Stats{Ops: sub.Ops, PeakRSS: peaks[0].RSS, PeakHeap: peaks[0].Heap}, "the bare listing's", bench.Stats{Ops: base.Ops, PeakRSS: peaks[1].RSS, PeakHeap: peaks[1].Heap})
	rss.Unit = "-"
	s.add(rss.WithNote(fmt.Sprintf("peak RSS %.1f MiB vs %.1f MiB; peak Go heap %.1f MiB vs %.1f MiB (whole process: clients and runtime included)",
		bench.MiB(peaks[0].RSS), bench.MiB(peaks[1].RSS), bench.MiB(peaks[0].Heap), bench.MiB(peaks[1].Heap))))
	return nil
}

// maxPeak returns the larger of each high-water mark.
func maxPeak(a, b memPeak) memPeak { return memPeak{RSS: max(a.RSS, b.RSS), Heap: max(a.Heap, b.Heap)} }

// bareListing reads, at once, every etcd key of the domain in pages of
// scalePage (values included) and lists the prepared resources' objects. It
// returns the key and object counts.
func (st *stack) bareListing(ctx context.Context) (keys, objects int64, err error) {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		root := st.NS.Root()
		key, end := root, clientv3.GetPrefixRangeEnd(root)
		var rev int64
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(scalePage)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := st.Etcd.Get(ctx, key, opts...)
			if err != nil {
				return err
			}
			rev, keys = resp.Header.Revision, keys+int64(len(resp.Kvs))
			if !resp.More || len(resp.Kvs) == 0 {
				return nil
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	})
	g.Go(func() (err error) {
		objects, err = st.count(ctx, st.NS.Root()+"r-")
		return err
	})
	err = g.Wait()
	return keys, objects, err
}

// watchSide is one side of the watch rows: it starts a watch on every
// resource and returns, once each has delivered its first answer, the
// arrivals of the publishing resources (by index into the publishers) and
// a stop function that ends the watches and waits for their goroutines.
type watchSide func(ctx context.Context) ([]*arrivals, func(), error)

// scaleWatch measures watches on every resource of res: reader.Watch (one
// Reader per resource, on a second etcd client, as a reader service would)
// against bare etcd watches of as many keys. Per round and side it starts
// every watch and measures the heap and RSS they added; then
// scalePublishers resources publish concurrently (bare: as many floor PUTs, each followed by a bare put)
// and each update's lag is recorded. Sides alternate in slowRounds rounds.
func (s *runner) scaleWatch(ctx context.Context, st *stack, res []string) error {
	rcli, closeCli, err := s.otherEtcd()
	if err != nil {
		return err
	}
	defer closeCli()
	npub := min(scalePublishers, len(res))
	pubIdx := make([]int, npub) // the publishing resources, spread over res
	pubRes := make([]string, npub)
	for i := range pubIdx {
		pubIdx[i] = i * len(res) / npub
		pubRes[i] = res[pubIdx[i]]
	}
	pubs, grants, err := st.bindAll(ctx, pubRes)
	if err != nil {
		return err
	}
	defer st.releaseAll(ctx, grants)
	bareKeys := make([]string, len(res))
	for i := range bareKeys {
		bareKeys[i] = st.NS.Root() + "bare-watch/" + res[i]
	}
	sentinel := st.NS.Root() + "bare-watch-sentinel"
	cfg := reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(st.NS), Etcd: rcli, Store: st.Store}}
	fencepubSide := func(ctx context.Context) ([]*arrivals, func(), error) {
		return watchAll(ctx, rcli, sentinel, len(res), pubIdx, func(ctx context.Context, wg *sync.WaitGroup, i int, ready func(), arrived func(uint64)) error {
			rd, err := reader.New(cfg, res[i])
			if err != nil {
				return err
			}
			updates := rd.Watch(ctx)
			wg.Go(func() {
				first := true
				for u := range updates {
					if u.Err != nil {
						continue
					}
					if first {
						first = false
						ready()
					}
					arrived(u.Pointer.Version.Seq)
				}
			})
			return nil
		})
	}
	bareSide := func(ctx context.Context) ([]*arrivals, func(), error) {
		return watchAll(ctx, rcli, sentinel, len(res), pubIdx, func(ctx context.Context, wg *sync.WaitGroup, i int, ready func(), arrived func(uint64)) error {
			events := rcli.Watch(clientv3.WithRequireLeader(ctx), bareKeys[i], clientv3.WithCreatedNotify())
			wg.Go(func() {
				for wr := range events {
					if wr.Created {
						ready()
					}
					for _, ev := range wr.Events {
						if n, err := strconv.ParseUint(string(ev.Kv.Value), 10, 64); err == nil {
							arrived(n)
						}
					}
				}
			})
			return nil
		})
	}
	per := s.n(20, 2) // measured updates per publishing resource and round
	b := body(1 << 10)
	var seqs = make([]uint64, npub) // bare puts: per publishing resource
	var ik atomic.Int64
	fencepubLag := func(ctx context.Context, w int, arr *arrivals) (time.Duration, error) {
		r, err := pubs[w].Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprint("lag-", ik.Add(1)), Body: bytes.NewReader(b)})
		if err != nil {
			return 0, err
		}
		return lagOf(ctx, arr, r.Version.Seq, time.Now())
	}
	bareLag := func(ctx context.Context, w int, arr *arrivals) (time.Duration, error) {
		seqs[w]++ // worker w alone touches its key
		// The object half of the floor's publish first, so the servers and
		// this process carry the load the fencepub side's publishes put on
		// them while the watches deliver.
		if _, err := st.FloorPut(ctx, pubRes[w], seqs[w], b); err != nil {
			return 0, err
		}
		if _, err := st.Etcd.Put(ctx, bareKeys[pubIdx[w]], strconv.FormatUint(seqs[w], 10)); err != nil {
			return 0, err
		}
		return lagOf(ctx, arr, seqs[w], time.Now())
	}
	type side struct {
		start watchSide
		lag   func(context.Context, int, *arrivals) (time.Duration, error)
		heap  int64 // summed over rounds
		rss   int64
		setup time.Duration
		lags  bench.Series
	}
	sides := []*side{{start: fencepubSide, lag: fencepubLag}, {start: bareSide, lag: bareLag}}
	rounds := s.slowRounds()
	for r := range rounds {
		for k := range sides {
			sd := sides[(r+k)%len(sides)]
			heap0, rss0 := settledMemory()
			t0 := time.Now()
			wctx, cancel := context.WithCancel(ctx)
			arr, stop, err := sd.start(wctx)
			if err != nil {
				cancel()
				stop()
				return err
			}
			sd.setup += time.Since(t0)
			heap1, rss1 := settledMemory()
			sd.heap += heap1 - heap0
			sd.rss += rss1 - rss0
			var lagErr error
			sd.lags.Custom(func(rec *bench.Recorder) time.Duration {
				t0 := time.Now()
				g, gctx := errgroup.WithContext(ctx)
				for w := range npub {
					g.Go(func() error {
						for i := range per + 1 { // the first is a warm-up
							d, err := sd.lag(gctx, w, arr[w])
							if i > 0 {
								rec.Add(d, err)
							}
							if err != nil {
								return err
							}
						}
						return nil
					})
				}
				lagErr = g.Wait()
				return time.Since(t0)
			})
			cancel()
			stop()
			if lagErr != nil {
				return lagErr
			}
		}
	}
	n := int64(len(res) * rounds)
	fp, bw := sides[0], sides[1]
	mem := func(what string, sub, base int64) {
		row := bench.NewRow(WorkloadScale, fmt.Sprintf("watch %d resources: %s per watched resource", len(res), what), 0, len(res),
			bench.Stats{Ops: len(res), Throughput: float64(sub) / float64(n)}, "bare etcd watch per key", bench.Stats{Ops: len(res), Throughput: float64(base) / float64(n)})
		row.Unit = "B/watch"
		s.add(row.WithNote("lower is better; the process's growth with every watch started and delivering, after a GC, averaged over rounds; " +
			"fencepub: a reader.Reader + Watch per resource (a Get, then an etcd watch) on one etcd client; bare: clientv3.Watch per key on the same client"))
	}
	mem("Go heap", fp.heap, bw.heap)
	mem("RSS", fp.rss, bw.rss)
	lag := bench.NewRow(WorkloadScale, fmt.Sprintf("watch lag: %d watched, %d publishing at once, 1 KiB", len(res), npub), 1<<10, npub,
		fp.lags.Stats(), "floor PUT + bare put → bare watch, same counts", bw.lags.Stats())
	s.add(lag.WithTarget("p99 <= 2x the bare watch's", func(x bench.Row) bool { return x.Subject.P99 <= 2*x.Base.P99 }).
		WithNote(fmt.Sprintf("%d rounds; per round and side %d updates per publishing resource after one warm-up; an update that arrived before the write returned counts as 0; starting every watch took %.2f s (bare %.2f s) per round",
			rounds, per, fp.setup.Seconds()/float64(rounds), bw.setup.Seconds()/float64(rounds))))
	return nil
}

// watchAll starts n watches with start (i: the watch's index; it calls
// ready once the watch has given its first answer, and arrived for every
// sequence number it delivers; its goroutines run in wg), waits until each
// is ready and the client has created every watch, and returns the
// arrivals of the watches pubIdx names and a stop function. The watches end
// when ctx does; stop waits for their goroutines.
func watchAll(ctx context.Context, cli *clientv3.Client, sentinel string, n int, pubIdx []int, start func(ctx context.Context, wg *sync.WaitGroup, i int, ready func(), arrived func(uint64)) error) ([]*arrivals, func(), error) {
	arr := make([]*arrivals, n)
	for _, i := range pubIdx {
		arr[i] = newArrivals()
	}
	var wg sync.WaitGroup
	pending := atomic.Int64{}
	pending.Store(int64(n))
	done := make(chan struct{})
	for i := range n {
		var once sync.Once
		ready := func() {
			once.Do(func() {
				if pending.Add(-1) == 0 {
					close(done)
				}
			})
		}
		arrived := func(uint64) {}
		if a := arr[i]; a != nil {
			arrived = a.arrived
		}
		if err := start(ctx, &wg, i, ready, arrived); err != nil {
			return nil, wg.Wait, err
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, wg.Wait, ctx.Err()
	}
	// The client creates a stream's watches one at a time, in order: once
	// this one is created, so is every watch started before it.
	for wr := range cli.Watch(clientv3.WithRequireLeader(ctx), sentinel, clientv3.WithCreatedNotify()) {
		if wr.Created {
			break
		}
	}
	out := make([]*arrivals, len(pubIdx))
	for k, i := range pubIdx {
		out[k] = arr[i]
	}
	return out, wg.Wait, nil
}

// lagOf waits for seq's arrival in a (lagTimeout at most) and returns its
// lag after returned (0 when it arrived first).
func lagOf(ctx context.Context, a *arrivals, seq uint64, returned time.Time) (time.Duration, error) {
	at, ok := a.await(ctx, seq, lagTimeout)
	if !ok {
		return 0, fmt.Errorf("no watch update for seq %d within %s", seq, lagTimeout)
	}
	return max(at.Sub(returned), 0), nil
}

// settledMemory collects garbage and returns the live Go heap and the
// process's RSS, in bytes.
func settledMemory() (heap, rss int64) {
	runtime.GC()
	debug.FreeOSMemory()
	sm := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sm)
	return int64(sm[0].Value.Uint64()), procStatusKB("VmRSS") << 10
}

// scaleAcquire compares Acquire across spread distinct resources at
// c=scaleConc with its floor (bench.Target.FloorAcquire) at the same
// concurrency: each round acquires fresh or released resources, one per
// operation, and releases them after the round, outside the timed section.
func (s *runner) scaleAcquire(ctx context.Context, st *stack, spread int) error {
	res := names("a", spread)
	const ttl = 10 * time.Second
	var (
		next, floorNext atomic.Uint64
		mu              sync.Mutex
		held            []authority.Grant
	)
	acquire := func(ctx context.Context, _, _ int) error {
		g, err := st.auth.Acquire(ctx, authority.AcquireRequest{Resource: res[(next.Add(1)-1)%uint64(spread)], Owner: "bench", TTL: ttl})
		if err == nil {
			mu.Lock()
			held = append(held, g)
			mu.Unlock()
		}
		return err
	}
	floor := func(ctx context.Context, _, _ int) error {
		return st.FloorAcquire(ctx, floorNext.Add(1), ttl)
	}
	ops := s.n(4*spread, 2*scaleConc)
	rounds := max(s.rounds(ops, scaleConc), (ops+spread-1)/spread) // at most spread a round: each resource once
	stats := bench.Interleave(ctx, rounds, ops,
		func(sr *bench.Series, n int) {
			sr.Run(ctx, n, scaleConc, acquire)
			st.releaseAll(ctx, held)
			held = held[:0]
		},
		func(sr *bench.Series, n int) { sr.Run(ctx, n, scaleConc, floor) })
	s.add(bench.NewRow(WorkloadScale, fmt.Sprintf("acquire, %d resources, c=%d", spread, scaleConc), 0, scaleConc, stats[0], "lease grant + bare txn + marker PUT", stats[1]).
		WithNote(fmt.Sprintf("%d rounds; each acquire takes a resource not held (released after its round, untimed); acquire also lists the resource's grant markers (DESIGN.md invariant 3)", rounds)))
	return nil
}

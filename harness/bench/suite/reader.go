package suite

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// readerWorkload is workload 5: watch lag, Open vs a bare GET, and the reader
// service vs a plain HTTP server under wrk.
func (s *runner) readerWorkload(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadReader)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	// Readers and watchers use their own etcd connection, as a reader
	// service in another process would.
	rcli, closeCli, err := s.otherEtcd()
	if err != nil {
		return err
	}
	defer closeCli()
	if err := s.watchLag(ctx, st, rcli); err != nil {
		return err
	}
	if err := s.openVsGet(ctx, st, rcli); err != nil {
		return err
	}
	return s.service(ctx, st)
}

// otherEtcd returns a second client of the suite's etcd (Env.NewEtcd) and
// its closer, or the shared client when there is no NewEtcd.
func (s *runner) otherEtcd() (*clientv3.Client, func(), error) {
	if s.env.NewEtcd == nil {
		return s.env.Etcd, func() {}, nil
	}
	c, err := s.env.NewEtcd()
	if err != nil {
		return nil, nil, err
	}
	return c, func() { _ = c.Close() }, nil
}

// arrivals records when each awaited sequence number arrived. Safe for
// concurrent use.
type arrivals struct {
	mu   sync.Mutex
	at   map[uint64]time.Time
	wake chan struct{}
}

func newArrivals() *arrivals {
	return &arrivals{at: map[uint64]time.Time{}, wake: make(chan struct{}, 1)}
}

func (a *arrivals) arrived(seq uint64) {
	now := time.Now()
	a.mu.Lock()
	if _, ok := a.at[seq]; !ok {
		a.at[seq] = now
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// follow records the arrival of every version updates delivers, in a
// goroutine of wg that ends when updates closes.
func (a *arrivals) follow(wg *sync.WaitGroup, updates <-chan reader.Update) {
	wg.Go(func() {
		for u := range updates {
			if u.Err == nil {
				a.arrived(u.Pointer.Version.Seq)
			}
		}
	})
}

// await blocks until seq arrived or the timeout passed, and returns when
// it arrived.
func (a *arrivals) await(ctx context.Context, seq uint64, timeout time.Duration) (time.Time, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		t, ok := a.at[seq]
		a.mu.Unlock()
		if ok {
			return t, true
		}
		select {
		case <-a.wake:
		case <-deadline.C:
			return time.Time{}, false
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
}

// lagTimeout bounds the wait for one update; a missing update is an error.
const lagTimeout = 10 * time.Second

// watchLag measures the time from a publish returning applied to the
// reader's watch delivering that version, next to a bare etcd put and a
// bare watch of the same key, one publish and one put at a time,
// alternating.
func (s *runner) watchLag(ctx context.Context, st *stack, rcli *clientv3.Client) error {
	p, g, err := st.bind(ctx, "lag")
	if err != nil {
		return err
	}
	defer st.auth.Release(context.WithoutCancel(ctx), g)
	rd, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(st.NS), Etcd: rcli, Store: st.Store}}, "lag")
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fp, bare := newArrivals(), newArrivals()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	fp.follow(&wg, rd.Watch(wctx))
	bareKey := st.NS.Root() + "bare-watch"
	rev, err := st.Etcd.Put(ctx, bareKey, "0")
	if err != nil {
		return err
	}
	events := rcli.Watch(wctx, bareKey, clientv3.WithRev(rev.Header.Revision+1))
	wg.Go(func() {
		for wr := range events {
			for _, ev := range wr.Events {
				var n uint64
				if _, err := fmt.Sscan(string(ev.Kv.Value), &n); err == nil {
					bare.arrived(n)
				}
			}
		}
	})
	b := body(1 << 10)
	var fpRec, bareRec bench.Recorder
	early := map[*bench.Recorder]int{} // updates that arrived before the write returned
	lag := func(a *arrivals, rec *bench.Recorder, seq uint64, returned time.Time) error {
		at, ok := a.await(ctx, seq, lagTimeout)
		if !ok {
			err := fmt.Errorf("no watch update for seq %d within %s", seq, lagTimeout)
			rec.Add(0, err)
			return err
		}
		if at.Before(returned) {
			early[rec]++
		}
		rec.Add(max(at.Sub(returned), 0), nil)
		return nil
	}
	ops := s.n(200, 20)
	for i := range ops + 1 { // the first of each is a warm-up, not recorded
		res, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprint("lag-", i), Body: bytes.NewReader(b)})
		returned := time.Now()
		if err != nil {
			return err
		}
		if i == 0 {
			fp.await(ctx, res.Version.Seq, lagTimeout)
		} else if err := lag(fp, &fpRec, res.Version.Seq, returned); err != nil {
			return err
		}
		seq := uint64(i + 1)
		if _, err := st.Etcd.Put(ctx, bareKey, fmt.Sprint(seq)); err != nil {
			return err
		}
		returned = time.Now()
		if i == 0 {
			bare.await(ctx, seq, lagTimeout)
		} else if err := lag(bare, &bareRec, seq, returned); err != nil {
			return err
		}
	}
	s.add(bench.NewRow(WorkloadReader, "watch lag: publish applied → reader update, 1 KiB", 1<<10, 1, fpRec.Stats(0), "bare put → bare watch", bareRec.Stats(0)).
		WithTarget("p99 < 20 ms", func(x bench.Row) bool { return x.Subject.P99 < 20*time.Millisecond }).
		WithNote(fmt.Sprintf("latencies are lags; an update that arrived before the write returned counts as 0 (fencepub %d of %d, bare %d of %d)",
			early[&fpRec], ops, early[&bareRec], ops)))
	return nil
}

// openOps is the operation count and concurrency of an Open row. Large
// objects still get enough operations for several interleaved rounds
// (rounds needs 2*conc per round): with one round the sides run one after
// the other, not interleaved.
func (s *runner) openOps(size int) (ops, conc int) {
	switch {
	case size <= 64<<10:
		return s.n(800, 64), 16
	case size <= 4<<20:
		return s.n(160, 32), 16
	default:
		return s.n(48, 4), 4
	}
}

// openVsGet measures reader.Open read to EOF (linearizable and
// serializable pointer reads) vs a verifying GET (the floor), a bare GET
// and, at 1 KiB, an etcd read followed by a GET of the same object, per size.
func (s *runner) openVsGet(ctx context.Context, st *stack, rcli *clientv3.Client) error {
	for _, size := range s.opts.Sizes {
		res := fmt.Sprintf("open-%d", size)
		p, g, err := st.bind(ctx, res)
		if err != nil {
			return err
		}
		r, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: "v1", Body: bytes.NewReader(body(size))})
		_ = st.auth.Release(context.WithoutCancel(ctx), g)
		if err != nil {
			return err
		}
		cfg := reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(st.NS), Etcd: rcli, Store: st.Store}}
		lin, err := reader.New(cfg, res)
		if err != nil {
			return err
		}
		cfg.Serializable = true
		ser, err := reader.New(cfg, res)
		if err != nil {
			return err
		}
		open := func(rd *reader.Reader) bench.Op {
			return func(ctx context.Context, _, _ int) error {
				b, err := rd.Open(ctx)
				if err != nil {
					return err
				}
				defer b.Close()
				_, err = io.Copy(io.Discard, b) // the digest is checked at EOF
				return err
			}
		}
		// watched opens the pointer a Watch would deliver (the publish's):
		// no etcd read per Open.
		watched := func(ctx context.Context, _, _ int) error {
			b, err := lin.OpenPointer(ctx, *r.Pointer)
			if err != nil {
				return err
			}
			defer b.Close()
			_, err = io.Copy(io.Discard, b)
			return err
		}
		// get is the bare GET, read to EOF.
		get := func(ctx context.Context, _, _ int) error {
			_, err := st.BareGet(ctx, r.Object.Key, io.Discard, nil)
			return err
		}
		// verifying is the GET that hashes the bytes and checks them
		// against the pointer's digest, as Open must: the honest floor.
		verifying := func(ctx context.Context, _, _ int) error {
			_, err := st.VerifyingGet(ctx, r.Object.Key, r.Object.SHA256)
			return err
		}
		// readThenGet is a linearizable etcd read of the pointer followed
		// by a bare GET, one after the other.
		readThenGet := func(ctx context.Context, _, _ int) error {
			_, err := st.ReadThenGet(ctx, st.NS.PointerKey(res), r.Object.Key)
			return err
		}
		ops, conc := s.openOps(size)
		sides := []func(*bench.Series, int){
			func(sr *bench.Series, n int) { sr.Run(ctx, n, conc, open(lin)) },
			func(sr *bench.Series, n int) { sr.Run(ctx, n, conc, open(ser)) },
			func(sr *bench.Series, n int) { sr.Run(ctx, n, conc, get) },
			func(sr *bench.Series, n int) { sr.Run(ctx, n, conc, verifying) },
			func(sr *bench.Series, n int) { sr.Run(ctx, n, conc, watched) },
		}
		small := size <= 1<<10
		if small {
			sides = append(sides, func(sr *bench.Series, n int) { sr.Run(ctx, n, conc, readThenGet) })
		}
		stats := bench.Interleave(ctx, s.rounds(ops, conc), ops, sides...)
		cfgName := fmt.Sprintf("Open, %s, c=%d", sizeName(size), conc)
		s.add(bench.NewRow(WorkloadReader, cfgName, size, conc, stats[0], "verifying GET (sha256 checked)", stats[3]).
			WithTarget("throughput >= 0.95x", func(x bench.Row) bool { return x.RatioThroughput >= 0.95 }).
			WithNote("linearizable pointer read (the default) + GET If-Match + sha256; the GET of the object opened last is sent while the pointer is read; the baseline GETs and checks the bytes against the digest, as Open must"))
		if small {
			s.add(bench.NewRow(WorkloadReader, cfgName, size, conc, stats[0], "linearizable etcd read, then GET", stats[5]).
				WithTarget("throughput >= 0.9x", func(x bench.Row) bool { return x.RatioThroughput >= 0.9 }).
				WithNote("the baseline reads the pointer key (linearizable Get) and then GETs the object, without decoding or hashing"))
		}
		s.add(bench.NewRow(WorkloadReader, cfgName, size, conc, stats[0], "bare GET", stats[2]).
			WithNote("information: a GET that neither reads the pointer nor checks the bytes"))
		s.add(bench.NewRow(WorkloadReader, cfgName+", serializable", size, conc, stats[1], "bare GET", stats[2]).
			WithNote("Config.Serializable: the pointer is read from the local member without a quorum round"))
		s.add(bench.NewRow(WorkloadReader, cfgName+", watched pointer", size, conc, stats[4], "bare GET", stats[2]).
			WithNote("OpenPointer with the pointer a Watch delivered (as examples/reader-service does): no etcd read; GET If-Match + sha256"))
	}
	return nil
}

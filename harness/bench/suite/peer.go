package suite

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/publisher"
)

// peerNote goes on every peer row: the comparison is not like for like.
const peerNote = "the peer has NO fence: a holder paused past its lease overwrites a newer pointer (fencepub refuses it)"

// peer is workload 3: fencepub vs the lock-per-publish and the
// lease-holding peers at 1 KiB, uncontended (16 publishers on 16
// resources) and HA (16 replicas on 4 resources), and HA at the largest
// size, where all of them are bound by the PUT.
func (s *runner) peer(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadPeer)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	const replicas = 16
	peers := make([]*bench.Peer, replicas)
	for i := range peers {
		if peers[i], err = st.NewPeer(ctx); err != nil {
			return err
		}
		defer peers[i].Close()
	}
	if err := s.peerUncontended(ctx, st, peers, 1<<10, s.n(800, 64)); err != nil {
		return err
	}
	if err := s.peerHA(ctx, st, peers, 1<<10, s.n(800, 64)); err != nil {
		return err
	}
	// At a large size the PUT dominates; HA only (uncontended, 16 large
	// publishes at once, is the publish workload's c=16 row).
	if large := slices.Max(s.opts.Sizes); large > 64<<10 {
		return s.peerHA(ctx, st, peers, large, s.n(8, 8))
	}
	return nil
}

// peerUncontended: 16 publishers, each on its own resource.
func (s *runner) peerUncontended(ctx context.Context, st *stack, peers []*bench.Peer, size, ops int) error {
	conc := len(peers)
	b := body(size)
	res := names(fmt.Sprintf("u%d", size), conc)
	lockRes := lockNames(res)
	pubs, grants, err := st.bindAll(ctx, res)
	if err != nil {
		return err
	}
	defer st.releaseAll(ctx, grants)
	defer s.dropObjects(ctx, st.Target, append(slices.Clone(res), lockRes...))
	// The lease-holding peer takes each resource's lock once, for the whole
	// measurement.
	for w, p := range peers {
		m := p.Mutex(res[w])
		if err := m.Lock(ctx); err != nil {
			return err
		}
		defer m.Unlock(context.WithoutCancel(ctx))
	}
	var seq atomic.Uint64
	stats := bench.Interleave(ctx, s.rounds(ops, conc), ops,
		func(sr *bench.Series, n int) {
			sr.Run(ctx, n, conc, func(ctx context.Context, w, i int) error {
				_, err := pubs[w].Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprintf("k%d", i), Body: bytes.NewReader(b)})
				return err
			})
		},
		func(sr *bench.Series, n int) {
			sr.Run(ctx, n, conc, func(ctx context.Context, w, _ int) error {
				return peers[w].LockPublish(ctx, lockRes[w], seq.Add(1), b)
			})
		},
		func(sr *bench.Series, n int) {
			sr.Run(ctx, n, conc, func(ctx context.Context, w, _ int) error {
				return peers[w].LeasePublish(ctx, res[w], seq.Add(1), b)
			})
		})
	s.addPeerRows(fmt.Sprintf("%s, uncontended: 16 publishers, 16 resources", sizeName(size)), size, conc, stats, false)
	return nil
}

// peerHA: 16 replicas on 4 resources. fencepub's replicas and the
// lease-holding peer's wait for the lease (Acquire with Wait, Mutex.Lock),
// then the holder publishes; the lock-per-publish peer's replicas take the
// lock for every publish. Each round gives every resource an equal budget
// of publishes; its wall time ends with the last publish (standbys that
// win the lease after the budget is spent are not timed).
func (s *runner) peerHA(ctx context.Context, st *stack, peers []*bench.Peer, size, ops int) error {
	const nres = 4
	b := body(size)
	res := names(fmt.Sprintf("ha%d", size), nres)
	lockRes := lockNames(res)
	defer s.dropObjects(ctx, st.Target, append(slices.Clone(res), lockRes...))
	var seq atomic.Uint64
	fencepub := func(rec *bench.Recorder, budget []atomic.Int64, done *lastDone) {
		var wg sync.WaitGroup
		for j := range peers {
			r := j % nres
			wg.Go(func() {
				for budget[r].Load() > 0 && ctx.Err() == nil {
					g, err := st.auth.Acquire(ctx, authority.AcquireRequest{Resource: res[r], Owner: fmt.Sprintf("replica-%d", j), TTL: grantTTL, Wait: true})
					if err != nil {
						rec.Add(0, err)
						return
					}
					p, err := st.pub.Bind(ctx, publisher.GrantTerm(g, false))
					if err != nil {
						rec.Add(0, err)
					}
					var perr error // recorded by rec.Time
					for err == nil && perr == nil && budget[r].Add(-1) >= 0 {
						perr = rec.Time(func() error {
							_, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprintf("r%d-%d", j, seq.Add(1)), Body: bytes.NewReader(b)})
							return err
						})
						done.mark()
					}
					if rerr := st.auth.Release(context.WithoutCancel(ctx), g); rerr != nil {
						rec.Add(0, rerr)
						return
					}
					if err != nil || perr != nil {
						return
					}
				}
			})
		}
		wg.Wait()
	}
	lockPer := func(rec *bench.Recorder, budget []atomic.Int64, done *lastDone) {
		var wg sync.WaitGroup
		for j, p := range peers {
			r := j % nres
			wg.Go(func() {
				for budget[r].Add(-1) >= 0 && ctx.Err() == nil {
					if rec.Time(func() error { return p.LockPublish(ctx, lockRes[r], seq.Add(1), b) }) != nil {
						return
					}
					done.mark()
				}
			})
		}
		wg.Wait()
	}
	leaseHold := func(rec *bench.Recorder, budget []atomic.Int64, done *lastDone) {
		var wg sync.WaitGroup
		for j, p := range peers {
			r := j % nres
			wg.Go(func() {
				for budget[r].Load() > 0 && ctx.Err() == nil {
					m := p.Mutex(res[r])
					if err := m.Lock(ctx); err != nil {
						rec.Add(0, err)
						return
					}
					var err error
					for err == nil && budget[r].Add(-1) >= 0 {
						err = rec.Time(func() error { return p.LeasePublish(ctx, res[r], seq.Add(1), b) })
						done.mark()
					}
					if uerr := m.Unlock(context.WithoutCancel(ctx)); err == nil && uerr != nil {
						rec.Add(0, uerr)
						return
					}
					if err != nil {
						return // recorded by rec.Time
					}
				}
			})
		}
		wg.Wait()
	}
	side := func(run func(*bench.Recorder, []atomic.Int64, *lastDone)) func(*bench.Series, int) {
		return func(sr *bench.Series, n int) {
			sr.Custom(func(rec *bench.Recorder) time.Duration {
				budget := make([]atomic.Int64, nres)
				for r := range budget {
					budget[r].Store(int64(n/nres + btoi(r < n%nres)))
				}
				done := &lastDone{start: time.Now()}
				run(rec, budget, done)
				return done.wall()
			})
		}
	}
	sides := []func(*bench.Series, int){side(fencepub), side(lockPer), side(leaseHold)}
	if size > 64<<10 {
		// The PUT alone, as many at once as there are active writers.
		sides = append(sides, func(sr *bench.Series, n int) {
			sr.Run(ctx, n, nres, func(ctx context.Context, w, _ int) error {
				_, err := st.PutCreateOnly(ctx, st.NS.Root()+"floor/"+res[w]+"/put-"+fmt.Sprint(seq.Add(1)), b)
				return err
			})
		})
	}
	stats := bench.Interleave(ctx, s.rounds(ops, len(peers)), ops, sides...)
	s.addPeerRows(fmt.Sprintf("%s, HA: 16 replicas, 4 resources", sizeName(size)), size, len(peers), stats, true)
	return nil
}

// addPeerRows adds fencepub vs each peer (stats: fencepub, lock-per-publish,
// lease-holding[, bare PUT]). The targets (2x the lock-per-publish peer,
// 0.9x the lease-holding one) apply to HA at 1 KiB.
func (s *runner) addPeerRows(config string, size, conc int, stats []bench.Stats, ha bool) {
	lock := bench.NewRow(WorkloadPeer, config, size, conc, stats[0], "peer lock-per-publish", stats[1]).WithNote(peerNote)
	lease := bench.NewRow(WorkloadPeer, config, size, conc, stats[0], "peer lease-holding", stats[2]).WithNote(peerNote)
	if len(stats) > 3 {
		put := fmt.Sprintf("bound by the PUT: a bare create-only PUT of %s alone, as many at once as active writers, runs %s ops/s (p50 %s ms)",
			sizeName(size), bench.Num(stats[3].Throughput), ms(stats[3].P50))
		lock, lease = lock.WithNote(put), lease.WithNote(put)
	}
	if ha && size <= 64<<10 {
		lock = lock.WithTarget("throughput >= 2x", func(x bench.Row) bool { return x.RatioThroughput >= 2 })
		lease = lease.WithTarget("throughput >= 0.9x", func(x bench.Row) bool { return x.RatioThroughput >= 0.9 })
	}
	s.add(lock)
	s.add(lease)
}

// lockNames returns the resource names the lock-per-publish peer uses for
// res (its own, so its locks never meet the lease-holding peer's).
func lockNames(res []string) []string {
	out := make([]string, len(res))
	for i, r := range res {
		out[i] = r + "-lock"
	}
	return out
}

// lastDone tracks when a round's last operation completed. Safe for
// concurrent use.
type lastDone struct {
	start time.Time
	mu    sync.Mutex
	last  time.Time
}

func (d *lastDone) mark() {
	now := time.Now()
	d.mu.Lock()
	if now.After(d.last) {
		d.last = now
	}
	d.mu.Unlock()
}

// wall is the time from start to the last completion (or to now if none).
func (d *lastDone) wall() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last.IsZero() {
		return time.Since(d.start)
	}
	return d.last.Sub(d.start)
}

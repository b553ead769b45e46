package suite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/publisher"
)

// publishOps is the operation count per side of a publish row: sized so a
// row takes seconds at every size.
func (s *runner) publishOps(size, conc int) int {
	switch {
	case size <= 64<<10 && conc == 1:
		return s.n(200, 10)
	case size <= 64<<10:
		return s.n(800, 32)
	case size <= 4<<20 && conc == 1:
		return s.n(40, 4)
	case size <= 4<<20:
		return s.n(160, 16)
	case conc == 1:
		return s.n(6, 2)
	default:
		return s.n(32, 32)
	}
}

// publish is workloads 1 and 2: first two A/A rows (the floor against
// itself) that show the run's noise, then fencepub publish vs its floor at
// every size, sequentially and at concurrency 16, over 1 and 64 resources.
func (s *runner) publish(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadPublish)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	for _, c := range []struct{ size, conc int }{{1 << 10, 1}, {min(slices.Max(s.opts.Sizes), 1<<20), 16}} {
		if err := s.calibrate(ctx, st, c.size, c.conc); err != nil {
			return err
		}
	}
	for _, size := range s.opts.Sizes {
		for _, conc := range []int{1, 16} {
			for _, nres := range []int{1, 64} {
				row, err := s.publishRow(ctx, st, size, conc, nres, s.publishOps(size, conc))
				if err != nil {
					return err
				}
				s.add(row.WithTarget("p50 <= 1.10x, throughput >= 0.9x", func(x bench.Row) bool {
					return x.RatioP50 <= 1.10 && x.RatioThroughput >= 0.9
				}))
			}
		}
	}
	return nil
}

// calibrate adds an A/A row: the floor against itself, interleaved exactly
// like a publish row (on 64 resources each), so the report shows how far
// apart two measurements of the same thing land in this run: ratios within
// that band of 1.0 are noise.
func (s *runner) calibrate(ctx context.Context, st *stack, size, conc int) error {
	const nres = 64
	b := body(size)
	res := [2][]string{names(fmt.Sprintf("aa%d-c%d-a", size, conc), nres), names(fmt.Sprintf("aa%d-c%d-b", size, conc), nres)}
	defer s.dropObjects(ctx, st.Target, append(slices.Clone(res[0]), res[1]...))
	for _, set := range res {
		for _, r := range set {
			if err := st.InitFloor(ctx, r); err != nil {
				return err
			}
		}
	}
	var seqs [2][nres]atomic.Uint64
	floor := func(k int) bench.Op {
		return func(ctx context.Context, w, i int) error {
			r := resOf(w, i, conc, nres)
			return st.FloorPublish(ctx, res[k][r], seqs[k][r].Add(1), b)
		}
	}
	ops := s.publishOps(size, conc)
	a, bb := bench.Compare(ctx, s.rounds(ops, conc), ops, conc, floor(0), floor(1))
	row := bench.NewRow(WorkloadPublish, fmt.Sprintf("A/A calibration: floor vs floor, %s, c=%d, %d resources", sizeName(size), conc, nres), size, conc, a, "floor", bb)
	row.Resources, row.Calibration = nres, true
	s.add(row.WithNote("the same operation measured twice: how far from 1.00x this lands is the run's noise"))
	return nil
}

// resOf maps a worker's i-th operation to a resource index: with at least
// as many resources as workers each worker cycles over its own resources
// (so no two workers share one); with fewer, workers share them.
func resOf(w, i, conc, nres int) int {
	if nres >= conc {
		return w + conc*(i%(nres/conc))
	}
	return w % nres
}

// publishRow measures fencepub publish and the floor, interleaved, at one
// size, concurrency and resource count, on fresh resources of st, and
// deletes their objects afterwards. Stale outcomes (only when workers share
// a resource) count as completed operations on both sides and are noted.
func (s *runner) publishRow(ctx context.Context, st *stack, size, conc, nres, ops int) (bench.Row, error) {
	b := body(size)
	res := names(fmt.Sprintf("p%d-c%d-r%d", size, conc, nres), nres)
	pubs, grants, err := st.bindAll(ctx, res)
	if err != nil {
		return bench.Row{}, err
	}
	defer st.releaseAll(ctx, grants)
	defer s.dropObjects(ctx, st.Target, res)
	for _, r := range res {
		if err := st.InitFloor(ctx, r); err != nil {
			return bench.Row{}, err
		}
	}
	seqs := make([]atomic.Uint64, nres)
	var stale, floorStale atomic.Int64
	var floorTime floorTimes
	before, err := st.phases()
	if err != nil {
		return bench.Row{}, err
	}
	subject := func(ctx context.Context, w, i int) error {
		_, err := pubs[resOf(w, i, conc, nres)].Publish(ctx, publisher.Operation{
			IdempotencyKey: fmt.Sprintf("w%d-%d", w, i), Body: bytes.NewReader(b)})
		if errors.Is(err, publisher.ErrStale) {
			stale.Add(1)
			return nil
		}
		return err
	}
	base := func(ctx context.Context, w, i int) error {
		r := resOf(w, i, conc, nres)
		err := floorTime.publish(ctx, st, res[r], seqs[r].Add(1), b)
		if errors.Is(err, bench.ErrFloorStale) {
			floorStale.Add(1)
			return nil
		}
		return err
	}
	sub, bas := bench.Compare(ctx, s.rounds(ops, conc), ops, conc, subject, base)
	row := bench.NewRow(WorkloadPublish, fmt.Sprintf("%s, c=%d, %d resource(s)", sizeName(size), conc, nres), size, conc, sub, "floor", bas)
	row.Resources = nres
	if n := stale.Load() + floorStale.Load(); n > 0 {
		row = row.WithNote(fmt.Sprintf("stale (newer state wins): fencepub %d/%d, floor %d/%d", stale.Load(), sub.Ops, floorStale.Load(), bas.Ops))
	}
	after, err := st.phases()
	if err != nil {
		return bench.Row{}, err
	}
	obj, txn := after.sub(before).means()
	fput, ftxn := floorTime.means(bas)
	return row.WithNote(fmt.Sprintf("mean object write / etcd txn: fencepub %s / %s ms, floor %s / %s ms; allocs/publish %.0f (floor %.0f)",
		ms(obj), ms(txn), ms(fput), ms(ftxn), sub.AllocsPerOp, bas.AllocsPerOp)), nil
}

// floorTimes sums the time floor publishes spent in their PUT and in their
// compare-and-put. Safe for concurrent use.
type floorTimes struct{ put, txn atomic.Int64 } // ns

// publish is st.FloorPublish of body at seq on res, timing its two halves.
func (f *floorTimes) publish(ctx context.Context, st *stack, res string, seq uint64, body []byte) error {
	t0 := time.Now()
	sum, err := st.FloorPut(ctx, res, seq, body)
	t1 := time.Now()
	f.put.Add(int64(t1.Sub(t0)))
	if err != nil {
		return err
	}
	err = st.FloorCommit(ctx, res, seq, sum)
	f.txn.Add(int64(time.Since(t1)))
	return err
}

// means returns the mean PUT and compare-and-put time over the operations
// of s (failed ones included).
func (f *floorTimes) means(s bench.Stats) (put, txn time.Duration) {
	n := time.Duration(max(s.Ops+s.Errors, 1))
	return time.Duration(f.put.Load()) / n, time.Duration(f.txn.Load()) / n
}

// releaseAll releases grants; a failure is ignored (the lease expires by
// its TTL).
func (st *stack) releaseAll(ctx context.Context, grants []authority.Grant) {
	for _, g := range grants {
		_ = st.auth.Release(context.WithoutCancel(ctx), g)
	}
}

// dropObjects deletes the objects of resources res (fencepub's and the
// floor's and the peer's), to keep the disk from filling between rows.
func (s *runner) dropObjects(ctx context.Context, t bench.Target, res []string) {
	ctx = context.WithoutCancel(ctx)
	for _, r := range res {
		for _, prefix := range []string{t.NS.ObjectsPrefix(r), t.NS.Root() + "floor/" + r + "/", t.NS.Root() + "peer/" + r + "/"} {
			if err := removePrefix(ctx, t, prefix, deleteParallel); err != nil {
				s.log.Warn("bench: drop objects", "prefix", prefix, "err", err)
			}
		}
	}
}

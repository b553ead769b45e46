package suite

import (
	"bytes"
	"context"
	"fmt"

	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/publisher"
)

// scalingConcurrency is the publisher counts of the scaling workload.
var scalingConcurrency = []int{1, 4, 16, 64}

// scaling is workload 7: publish throughput (1 KiB) with 1, 4, 16 and 64
// publishers on distinct resources vs the floor.
func (s *runner) scaling(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadScaling)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	var one float64 // fencepub throughput at c=1
	for _, c := range scalingConcurrency {
		row, err := s.publishRow(ctx, st, 1<<10, c, c, s.n(max(200, 20*c), 2*c))
		if err != nil {
			return err
		}
		row.Workload = WorkloadScaling
		row.Config = fmt.Sprintf("1 KiB, %d publishers, %d resources", c, c)
		if c == 1 {
			one = row.Subject.Throughput
		}
		s.add(row.WithNote(fmt.Sprintf("%.1fx fencepub's 1-publisher throughput", bench.Ratio(row.Subject.Throughput, one))))
	}
	return nil
}

// cluster is workload 7b: fencepub and the floor on a dedicated 3-member
// etcd cluster vs the same on a dedicated single member (same MinIO), at 1
// and 16 publishers, all four measured in interleaved rounds.
func (s *runner) cluster(ctx context.Context) error {
	concs := []int{1, 16}
	if s.env.StartEtcd == nil {
		for _, c := range concs {
			s.add(bench.SkippedRow(WorkloadCluster, fmt.Sprintf("1 KiB, %d publishers, etcd 3 members vs 1", c), "same on 1 member", "",
				"needs dedicated etcd clusters (fencepub-bench --local)"))
		}
		return nil
	}
	stacks := make([]*stack, 2)
	for i, members := range []int{1, 3} {
		cli, stop, err := s.env.StartEtcd(ctx, members)
		if err != nil {
			return err
		}
		defer stop()
		t := s.env.Target
		t.Etcd = cli
		if stacks[i], err = s.newStack(ctx, t, fmt.Sprintf("cluster%d", members)); err != nil {
			return err
		}
		defer s.cleanup(ctx, stacks[i].Target)
	}
	b := body(1 << 10)
	for _, c := range concs {
		type side struct {
			pubs []*publisher.Publisher
			res  []string
			seq  []uint64
		}
		sides := make([]side, 2)
		for i, st := range stacks {
			res := names(fmt.Sprintf("cl-c%d", c), c)
			pubs, grants, err := st.bindAll(ctx, res)
			if err != nil {
				return err
			}
			defer st.releaseAll(ctx, grants)
			defer s.dropObjects(ctx, st.Target, res)
			for _, r := range res {
				if err := st.InitFloor(ctx, r); err != nil {
					return err
				}
			}
			sides[i] = side{pubs: pubs, res: res, seq: make([]uint64, c)}
		}
		fencepub := func(i int) func(*bench.Series, int) {
			return func(sr *bench.Series, n int) {
				sr.Run(ctx, n, c, func(ctx context.Context, w, k int) error {
					_, err := sides[i].pubs[w].Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprint(k), Body: bytes.NewReader(b)})
					return err
				})
			}
		}
		floor := func(i int) func(*bench.Series, int) {
			return func(sr *bench.Series, n int) {
				sr.Run(ctx, n, c, func(ctx context.Context, w, _ int) error {
					sides[i].seq[w]++ // worker w alone touches its resource
					return stacks[i].FloorPublish(ctx, sides[i].res[w], sides[i].seq[w], b)
				})
			}
		}
		ops := s.n(max(200, 20*c), 2*c)
		st := bench.Interleave(ctx, s.rounds(ops, c), ops, fencepub(0), floor(0), fencepub(1), floor(1))
		config := fmt.Sprintf("1 KiB, %d publishers, etcd 3 members vs 1", c)
		s.add(bench.NewRow(WorkloadCluster, config, 1<<10, c, st[2], "fencepub on 1 member", st[0]).
			WithNote(fmt.Sprintf("fencepub/floor throughput: %.2fx on 3 members, %.2fx on 1", bench.Ratio(st[2].Throughput, st[3].Throughput), bench.Ratio(st[0].Throughput, st[1].Throughput))))
		s.add(bench.NewRow(WorkloadCluster, config+" (floor)", 1<<10, c, st[3], "floor on 1 member", st[1]))
	}
	return nil
}

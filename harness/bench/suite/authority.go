package suite

import (
	"context"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/harness/bench"
)

// authorityWorkload is workload 4: Acquire vs its floor and Renew vs a bare
// keepalive, sequential, each operation interleaved with its baseline's so
// drift hits both alike (the approach of authority's BenchmarkAuthority),
// the two taking turns to go first (as bench.Interleave rotates).
func (s *runner) authorityWorkload(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadAuthority)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	ops := s.n(200, 20)
	var acq, floor, renew, keepalive bench.Recorder
	var acqWall, floorWall, renewWall, kaWall time.Duration
	timed := func(rec *bench.Recorder, wall *time.Duration, f func() error) error {
		t0 := time.Now()
		err := f()
		d := time.Since(t0)
		*wall += d
		rec.Add(d, err)
		return err
	}
	// pair runs a and b, b first on odd i.
	pair := func(i int, a, b func() error) error {
		if i%2 == 1 {
			a, b = b, a
		}
		if err := a(); err != nil {
			return err
		}
		return b()
	}
	const ttl = 10 * time.Second
	var g authority.Grant
	for i := range ops {
		if g.LeaseID != 0 {
			if err := st.auth.Release(ctx, g); err != nil {
				return err
			}
		}
		if err := pair(i,
			func() error {
				return timed(&acq, &acqWall, func() (err error) {
					g, err = st.auth.Acquire(ctx, authority.AcquireRequest{Resource: "acq", Owner: "bench", TTL: ttl})
					return err
				})
			},
			func() error {
				return timed(&floor, &floorWall, func() error { return st.FloorAcquire(ctx, uint64(i), ttl) })
			},
		); err != nil {
			return err
		}
	}
	defer st.auth.Release(context.WithoutCancel(ctx), g)
	for i := range ops {
		if err := pair(i,
			func() error { return timed(&renew, &renewWall, func() error { return st.auth.Renew(ctx, g) }) },
			func() error {
				return timed(&keepalive, &kaWall, func() error {
					_, err := st.Etcd.KeepAliveOnce(ctx, g.LeaseID)
					return err
				})
			},
		); err != nil {
			return err
		}
	}
	p50 := func(x bench.Row) bool { return x.RatioP50 <= 1.2 }
	s.add(bench.NewRow(WorkloadAuthority, "acquire, uncontended, sequential", 0, 1, acq.Stats(acqWall), "lease grant + bare txn + marker PUT", floor.Stats(floorWall)).
		WithTarget("p50 <= 1.1x", func(x bench.Row) bool { return x.RatioP50 <= 1.1 }).
		WithNote("acquire also lists the resource's grant markers (rollback detection, DESIGN.md invariant 3), sent with the lease grant; the floor does not"))
	s.add(bench.NewRow(WorkloadAuthority, "renew, sequential", 0, 1, renew.Stats(renewWall), "bare KeepAliveOnce", keepalive.Stats(kaWall)).
		WithTarget("p50 <= 1.2x", p50).
		WithNote("Renew is one keepalive of the grant's lease (the holder key lives exactly as long as the lease)"))
	return nil
}

package suite

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/wait"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// leaderStallHold is how long the recovery workload keeps the raft leader
// stopped: the stall of the leader-stall scenario (docs/cluster.md).
const leaderStallHold = 8 * time.Second

// recovery is workload 8: on a dedicated multi-node cluster
// (Env.StartCluster), the time an operation takes when a fault hits just
// before it, next to the same operation with no fault, measured in
// alternation in the same run. The etcd clients use the CLI's keepalive
// defaults (config.DefaultDialKeepAliveTime, DefaultDialKeepAliveTimeout),
// and the authority's and publisher's per-attempt timeouts are their
// defaults, equal to config.DefaultRequestTimeout, so the figures are what
// a user gets.
func (s *runner) recovery(ctx context.Context) error {
	if s.env.StartCluster == nil {
		s.add(bench.SkippedRow(WorkloadRecovery, "(whole workload)", "", "", "needs a dedicated multi-node MinIO cluster (fencepub-bench --local --store minio)"))
		return nil
	}
	cl, stop, err := s.env.StartCluster(ctx)
	if err != nil {
		return err
	}
	defer stop()
	newClient := func(endpoints []string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second,
			DialKeepAliveTime: config.DefaultDialKeepAliveTime, DialKeepAliveTimeout: config.DefaultDialKeepAliveTimeout, Logger: zap.NewNop()})
	}
	cli, err := newClient(cl.Etcd.Endpoints())
	if err != nil {
		return err
	}
	defer cli.Close()
	store, err := cl.MinIO.Store()
	if err != nil {
		return err
	}
	st, err := s.newStack(ctx, bench.Target{Etcd: cli, Store: store, NS: s.env.NS}, WorkloadRecovery)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	samples := s.n(10, 2)
	if err := s.acquireAfterLeaderStall(ctx, st, cl, samples); err != nil {
		return err
	}
	if err := s.publishAfterNodeLoss(ctx, st, cl, samples); err != nil {
		return err
	}
	return s.watchLagAcrossLeaderChange(ctx, st, cl, newClient, samples)
}

// acquireAfterLeaderStall times Acquire sent right after the raft leader
// was stopped (SIGSTOP, held leaderStallHold) next to Acquire with every
// member running.
func (s *runner) acquireAfterLeaderStall(ctx context.Context, st *stack, cl *devstack.Cluster, samples int) error {
	var fault, base bench.Recorder
	acquire := func(rec *bench.Recorder, i int, kind string) error {
		var g authority.Grant
		err := rec.Time(func() (err error) {
			g, err = st.auth.Acquire(ctx, authority.AcquireRequest{Resource: fmt.Sprintf("%s-%d", kind, i), Owner: "bench", TTL: grantTTL})
			return err
		})
		if err != nil {
			return err
		}
		return st.auth.Release(ctx, g)
	}
	for i := range samples {
		if err := acquire(&base, i, "acq"); err != nil {
			return err
		}
		leader, err := cl.Etcd.Leader(ctx)
		if err != nil {
			return err
		}
		if err := leader.Pause(); err != nil {
			return err
		}
		stalled := time.Now()
		err = acquire(&fault, i, "stall")
		wait.Sleep(ctx, leaderStallHold-time.Since(stalled))
		if rerr := leader.Resume(); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
		if err := leader.WaitReady(ctx, time.Minute); err != nil {
			return err
		}
	}
	s.add(recoveryRow(fmt.Sprintf("acquire sent as the leader stalls (%s)", leaderStallHold), 0, &fault, "acquire, no fault", &base,
		"3-member etcd; each attempt bounded by etcd.request_timeout (5 s), then retried on another member"))
	return nil
}

// publishAfterNodeLoss times a 1 KiB publish sent right after one MinIO
// node of four (not the one the client talks to) was killed (kill -9),
// next to a publish with every node running; the node is restarted
// between samples.
func (s *runner) publishAfterNodeLoss(ctx context.Context, st *stack, cl *devstack.Cluster, samples int) error {
	p, g, err := st.bind(ctx, "node-loss")
	if err != nil {
		return err
	}
	defer st.auth.Release(context.WithoutCancel(ctx), g)
	defer s.dropObjects(ctx, st.Target, []string{"node-loss"})
	b := body(1 << 10)
	var fault, base bench.Recorder
	publish := func(rec *bench.Recorder, key string) error {
		return rec.Time(func() error {
			_, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: key, Body: bytes.NewReader(b)})
			return err
		})
	}
	node := cl.MinIO.Nodes[len(cl.MinIO.Nodes)-1]
	for i := range samples {
		if err := publish(&base, fmt.Sprint("base-", i)); err != nil {
			return err
		}
		node.Kill()
		err := publish(&fault, fmt.Sprint("loss-", i))
		if serr := node.Start(); err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		if err := cl.MinIO.WaitReady(ctx, time.Minute); err != nil {
			return err
		}
	}
	s.add(recoveryRow("publish 1 KiB sent as one MinIO node of 4 is killed", 1<<10, &fault, "publish, every node up", &base,
		"4-node distributed MinIO, 2 drives per node; the client talks to the first node"))
	return nil
}

// watchLagAcrossLeaderChange times the lag from a publish returning
// applied to the reader's watch update, for a publish sent right after the
// raft leader was killed (kill -9; a new leader is elected, and a watch on
// the dead member moves to another), next to the lag with a steady leader.
// The member is restarted between samples.
func (s *runner) watchLagAcrossLeaderChange(ctx context.Context, st *stack, cl *devstack.Cluster,
	newClient func([]string) (*clientv3.Client, error), samples int) error {
	p, g, err := st.bind(ctx, "lag-leader")
	if err != nil {
		return err
	}
	defer st.auth.Release(context.WithoutCancel(ctx), g)
	defer s.dropObjects(ctx, st.Target, []string{"lag-leader"})
	rcli, err := newClient(cl.Etcd.Endpoints())
	if err != nil {
		return err
	}
	defer rcli.Close()
	rd, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(st.NS), Etcd: rcli, Store: st.Store}}, "lag-leader")
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	arr := newArrivals()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	arr.follow(&wg, rd.Watch(wctx))
	b := body(1 << 10)
	var fault, base bench.Recorder
	lag := func(rec *bench.Recorder, key string) error {
		res, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: key, Body: bytes.NewReader(b)})
		returned := time.Now()
		if err != nil {
			return err
		}
		at, ok := arr.await(ctx, res.Version.Seq, lagTimeout)
		if !ok {
			err := fmt.Errorf("no watch update for seq %d within %s", res.Version.Seq, lagTimeout)
			rec.Add(0, err)
			return err
		}
		rec.Add(max(at.Sub(returned), 0), nil)
		return nil
	}
	if err := lag(&bench.Recorder{}, "warm-up"); err != nil {
		return err
	}
	for i := range samples {
		if err := lag(&base, fmt.Sprint("base-", i)); err != nil {
			return err
		}
		leader, err := cl.Etcd.Leader(ctx)
		if err != nil {
			return err
		}
		leader.Kill()
		err = lag(&fault, fmt.Sprint("killed-", i))
		if rerr := leader.Restart(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return err
		}
	}
	s.add(recoveryRow("watch lag: publish sent as the leader is killed → reader update, 1 KiB", 1<<10, &fault, "watch lag, steady leader", &base,
		"a lag counts from the publish's return (an update that came first counts as 0); the killed leader is restarted between samples"))
	return nil
}

// recoveryRow is a row of the recovery workload: the faulted operation
// against the same operation with no fault, with the p99 ratio in the note
// (RatioP50 holds the p50 one).
func recoveryRow(config string, size int, fault *bench.Recorder, baseline string, base *bench.Recorder, note string) bench.Row {
	f, b := fault.Stats(0), base.Stats(0)
	return bench.NewRow(WorkloadRecovery, config, size, 1, f, baseline, b).
		WithNote(fmt.Sprintf("p99 ratio %.1fx; %s", bench.Ratio(float64(f.P99), float64(b.P99)), note))
}

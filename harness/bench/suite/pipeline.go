package suite

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/publisher"
)

// pipelineDepths are the depths of the pipeline workload's rows.
var pipelineDepths = []int{1, 4, 16}

// pipelineOps is the operation count per side of a pipeline row, and the
// rounds they are interleaved in: at least 4 times the largest depth per
// round, so filling and draining the pipeline is a small part of a round.
func (s *runner) pipelineOps(size int) (ops, rounds int) {
	ops = s.n(640, 32)
	if size > 64<<10 {
		ops = s.n(160, 16)
	}
	return ops, max(min(s.opts.Rounds, ops/(4*slices.Max(pipelineDepths))), 1)
}

// pipeline is workload 1b: one holder publishing a stream into one
// resource through publisher.Pipeline at depths 1, 4 and 16 vs the
// sequential floor (a create-only PUT, then a bare compare-and-put, one
// after another), at 1 KiB and 1 MiB, all four sides interleaved in the
// same rounds.
func (s *runner) pipeline(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadPipeline)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	for _, size := range []int{1 << 10, 1 << 20} {
		if err := s.pipelineRows(ctx, st, size); err != nil {
			return err
		}
	}
	return nil
}

// pipelineRows measures one size: the floor on a resource of its own and
// each depth on its own resource and grant, and adds a row per depth.
func (s *runner) pipelineRows(ctx context.Context, st *stack, size int) error {
	b := body(size)
	res := names(fmt.Sprintf("pl%d", size), len(pipelineDepths)+1) // the last is the floor's
	pubs, grants, err := st.bindAll(ctx, res[:len(pipelineDepths)])
	if err != nil {
		return err
	}
	defer st.releaseAll(ctx, grants)
	defer s.dropObjects(ctx, st.Target, res)
	floorRes := res[len(pipelineDepths)]
	if err := st.InitFloor(ctx, floorRes); err != nil {
		return err
	}
	var (
		floorSeq  uint64
		floorTime floorTimes
		split     = make([]phases, len(pipelineDepths)) // each depth's object writes and transactions
		failed    error                                 // of the publisher's metrics
	)
	floor := func(ctx context.Context, _, _ int) error {
		floorSeq++
		return floorTime.publish(ctx, st, floorRes, floorSeq, b)
	}
	sides := []func(*bench.Series, int){func(sr *bench.Series, n int) { sr.Run(ctx, n, 1, floor) }}
	for k, d := range pipelineDepths {
		next := 0 // idempotency keys, across rounds
		sides = append(sides, func(sr *bench.Series, n int) {
			before, err := st.phases()
			sr.Custom(func(rec *bench.Recorder) time.Duration {
				wall := streamRound(ctx, pubs[k], d, next, n, b, rec)
				next += n
				return wall
			})
			after, err2 := st.phases()
			if failed = cmp.Or(failed, err, err2); failed == nil {
				split[k] = split[k].add(after.sub(before))
			}
		})
	}
	ops, rounds := s.pipelineOps(size)
	stats := bench.Interleave(ctx, rounds, ops, sides...)
	if failed != nil {
		return failed
	}
	fput, ftxn := floorTime.means(stats[0])
	for k, d := range pipelineDepths {
		row := bench.NewRow(WorkloadPipeline, fmt.Sprintf("%s, depth %d, 1 holder, 1 resource", sizeName(size), d), size, 1, stats[k+1], "sequential floor", stats[0])
		row.Resources = 1
		obj, txn := split[k].means()
		row = row.WithNote(fmt.Sprintf("mean object write / etcd txn: fencepub %s / %s ms, floor %s / %s ms (one transaction at a time: at most %s ops/s)",
			ms(obj), ms(txn), ms(fput), ms(ftxn), bench.Num(1/max(txn.Seconds(), 1e-9))))
		switch {
		case d == 1:
			row = row.WithNote("depth 1 publishes as successive Publish calls do (the publish workload's 1-resource c=1 row)")
		case size <= 64<<10:
			row = row.WithTarget("throughput >= 1.5x", func(x bench.Row) bool { return x.RatioThroughput >= 1.5 })
		default:
			row = row.WithTarget("throughput >= 1.2x", func(x bench.Row) bool { return x.RatioThroughput >= 1.2 })
		}
		s.add(row.WithNote("p50: from Submit's return to the answer, so at depth > 1 it includes the wait behind the operations ahead"))
	}
	return nil
}

// streamRound submits n operations (keys from first on) of body b into a
// Pipeline of p at depth, records each one's latency from its Submit's
// return (the operation accepted) to its answer (anything but applied is a
// failed operation), and returns the
// round's wall time, from the first Submit to the last answer.
func streamRound(ctx context.Context, p *publisher.Publisher, depth, first, n int, b []byte, rec *bench.Recorder) time.Duration {
	type submitted struct {
		at time.Time
		ch <-chan publisher.PipelineResult
	}
	queue := make(chan submitted, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sub := range queue {
			r := <-sub.ch
			err := r.Err
			if err == nil && r.Result.Outcome != publisher.Applied {
				err = fmt.Errorf("pipeline: %s, not applied", r.Result.Outcome)
			}
			rec.Add(time.Since(sub.at), err)
		}
	}()
	start := time.Now()
	pl := p.Pipeline(ctx, depth)
	for i := range n {
		ch := pl.Submit(publisher.Operation{IdempotencyKey: fmt.Sprintf("op-%d", first+i), Body: bytes.NewReader(b)})
		queue <- submitted{at: time.Now(), ch: ch}
	}
	close(queue)
	_ = pl.Close() // every failure is in an answer
	<-done
	return time.Since(start)
}

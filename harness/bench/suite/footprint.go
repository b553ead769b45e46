package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Capacity figures of the footprint workload: etcd's default backend quota,
// the largest one etcd recommends, and GC's default op retention
// (gc.DefaultConfig).
const (
	quotaDefault    = 2 << 30
	quotaMax        = 8 << 30
	footprintOpKeep = 7 * 24 * time.Hour
)

// footprintPublishers is how many resources the footprint workload
// publishes to at once, one publisher each.
const footprintPublishers = 16

// footprintBatch is how many puts one baseline transaction carries (etcd's
// default --max-txn-ops is 128).
const footprintBatch = 100

// oldOpRecord is the JSON op record fencepub wrote before the compact form:
// the footprint baseline.
type oldOpRecord struct {
	Digest      string         `json:"digest"`
	Version     layout.Version `json:"version"`
	Object      layout.Object  `json:"object"`
	Owner       string         `json:"owner,omitempty"`
	CommittedAt time.Time      `json:"committed_at"`
}

// footprint is workload 9: the etcd state a publish leaves, measured as the
// db size of a dedicated etcd after compaction and defragmentation, per
// publish, with and without the history entries (GC prunes them once they
// are no longer retained), against the same records in the JSON forms
// written before the compact encoding; and the sustained publish rate the
// op records allow in 2 GiB and 8 GiB at the default op retention.
func (s *runner) footprint(ctx context.Context) error {
	configs := []string{"op record + history entry, per publish", "op record alone (history pruned), per publish",
		"sustained publishes/s in 2 GiB at 7 d op retention", "sustained publishes/s in 8 GiB at 7 d op retention"}
	if s.env.StartEtcd == nil {
		for _, c := range configs {
			s.add(bench.SkippedRow(WorkloadFootprint, c, "the JSON forms before", "", "needs a dedicated etcd (fencepub-bench --local)"))
		}
		return nil
	}
	cli, stop, err := s.env.StartEtcd(ctx, 1)
	if err != nil {
		return err
	}
	defer stop()
	t := s.env.Target
	t.Etcd = cli
	// Short domain names ("<suite domain>-fp1", "-fp0"), of one length: each
	// record's key holds the domain.
	st, err := s.newStack(ctx, t, "fp1")
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	old := st.Target
	if old.NS, err = layout.NewNamespace(st.NS.Prefix, s.env.NS.Domain+"-fp0"); err != nil {
		return err
	}
	defer s.cleanup(ctx, old)
	res := names("fp", footprintPublishers)
	pubs, grants, err := st.bindAll(ctx, res)
	if err != nil {
		return err
	}
	defer st.releaseAll(ctx, grants)
	defer s.dropObjects(ctx, st.Target, res)
	n := s.n(100_000, 400)
	var size [5]int64 // db sizes: empty, new, new+old, old only after new's history went, both pruned
	if size[0], err = dbSize(ctx, cli); err != nil {
		return err
	}
	t0 := time.Now()
	b := body(16)
	pubStats := bench.Run(ctx, n, footprintPublishers, func(ctx context.Context, w, i int) error {
		r, err := pubs[w].Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprintf("k-%d-%d", w, i), Body: bytes.NewReader(b)})
		if err == nil && r.Outcome != publisher.Applied {
			err = fmt.Errorf("publish %d of %s: %s", i, res[w], r.Outcome)
		}
		return err
	})
	if pubStats.Errors > 0 {
		return fmt.Errorf("%d of %d publishes failed, first: %s", pubStats.Errors, n, pubStats.FirstError)
	}
	s.log.Info("bench: footprint publishes done", "publishes", n, "seconds", time.Since(t0).Round(time.Second).Seconds())
	if size[1], err = dbSize(ctx, cli); err != nil {
		return err
	}
	if err := copyOldForms(ctx, st.Target, old, res); err != nil {
		return err
	}
	if size[2], err = dbSize(ctx, cli); err != nil {
		return err
	}
	for i, t := range []bench.Target{st.Target, old} {
		for _, r := range res {
			if _, err := cli.Delete(ctx, t.NS.HistoryPrefix(r), clientv3.WithPrefix()); err != nil {
				return err
			}
		}
		if size[3+i], err = dbSize(ctx, cli); err != nil {
			return err
		}
	}
	per := func(d int64) float64 { return float64(d) / float64(n) }
	newAll, oldAll := per(size[1]-size[0]), per(size[2]-size[1])
	newOp, oldOp := newAll-per(size[2]-size[3]), oldAll-per(size[3]-size[4])
	note := fmt.Sprintf("%d publishes (%s/s) on %d resources; etcd db size after compaction and defrag: empty %.1f MiB, after the publishes %.1f MiB, with the JSON copies %.1f MiB",
		n, bench.Num(pubStats.Throughput), footprintPublishers, bench.MiB(size[0]), bench.MiB(size[1]), bench.MiB(size[2]))
	sides := [][2]float64{{newAll, oldAll}, {newOp, oldOp},
		{sustainedRate(quotaDefault, newOp), sustainedRate(quotaDefault, oldOp)}, {sustainedRate(quotaMax, newOp), sustainedRate(quotaMax, oldOp)}}
	for i, c := range configs {
		row := bench.NewRow(WorkloadFootprint, c, 0, footprintPublishers, bench.Stats{Ops: n, Throughput: sides[i][0]},
			"the same records in the JSON forms before", bench.Stats{Ops: n, Throughput: sides[i][1]})
		row.Unit = "bytes"
		if i >= 2 {
			row.Unit = "publishes/s"
		}
		if i == 1 {
			row = row.WithTarget("bytes <= 200 per publish", func(x bench.Row) bool { return x.Subject.Throughput <= 200 })
		}
		s.add(row.WithNote(note))
	}
	return nil
}

// sustainedRate is the publish rate (per second) whose op records, of
// perPublish bytes each, fill quota bytes over the default op retention.
func sustainedRate(quota int64, perPublish float64) float64 {
	if perPublish <= 0 {
		return 0
	}
	return float64(quota) / (perPublish * footprintOpKeep.Seconds())
}

// copyOldForms writes, under old's namespace, the op records and history
// entries of resources res found under from, in the JSON forms fencepub
// wrote before the compact encoding (an op record then held the whole
// object and the commit time, as its history entry does).
func copyOldForms(ctx context.Context, from, old bench.Target, res []string) error {
	var ops []clientv3.Op
	flush := func(force bool) error {
		if len(ops) == 0 || (!force && len(ops) < footprintBatch) {
			return nil
		}
		_, err := old.Etcd.Txn(ctx).Then(ops...).Commit()
		ops = ops[:0]
		return err
	}
	for _, r := range res {
		hist, err := from.Etcd.Get(ctx, from.NS.HistoryPrefix(r), clientv3.WithPrefix())
		if err != nil {
			return err
		}
		for _, kv := range hist.Kvs {
			p, err := layout.DecodePointer(kv.Value)
			if err != nil {
				return err
			}
			histVal, err := layout.EncodeVersioned(p.Version, p)
			if err != nil {
				return err
			}
			opVal, err := json.Marshal(oldOpRecord{Digest: p.Digest, Version: p.Version, Object: p.Object, Owner: p.Owner, CommittedAt: p.CommittedAt})
			if err != nil {
				return err
			}
			ops = append(ops, clientv3.OpPut(old.NS.HistoryKey(r, p.Version), histVal), clientv3.OpPut(old.NS.OpKey(r, p.IdempotencyKey), string(opVal)))
			if err := flush(false); err != nil {
				return err
			}
		}
	}
	return flush(true)
}

// dbSize compacts cli's etcd to its current revision, defragments every
// member and returns the first member's db size in bytes.
func dbSize(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, "footprint-probe")
	if err != nil {
		return 0, err
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return 0, err
	}
	var size int64
	for i, ep := range cli.Endpoints() {
		if _, err := cli.Defragment(ctx, ep); err != nil {
			return 0, fmt.Errorf("defragment %s: %w", ep, err)
		}
		st, err := cli.Status(ctx, ep)
		if err != nil {
			return 0, err
		}
		if i == 0 {
			size = st.DbSize
		}
	}
	if size == 0 {
		return 0, fmt.Errorf("etcd at %s reports no db size", strings.Join(cli.Endpoints(), ","))
	}
	return size, nil
}

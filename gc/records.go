package gc

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pruneBatch bounds the guarded deletions per transaction, well under
// etcd's default limit of 128 operations per transaction.
const pruneBatch = 50

// pruneRecords deletes the etcd records of s.Resource that nothing needs any
// more, after the pass dealt with the objects they name (DESIGN.md "Garbage
// collection": keep etcd bounded): history entries retention no longer keeps
// (read at s.Revision), op records last modified before clk's OpRetention
// cutoff or at or below the seal's Retired version (a retired life of the
// resource: `resource delete` ends its idempotency keys), grant records
// whose fence can no longer publish, and acquire request records before the
// cutoff of RequestRetention (pruneRequests). Ages are on the domain clock,
// never a CommittedAt or CreatedAt (DESIGN.md "Ages come from one clock").
// Each deletion is guarded by its own compare (the record's ModRevision
// unchanged), so it is safe with other collectors running. With dry, it
// counts instead (request records are not counted). The epoch, generation,
// pointer and seal are never deleted.
func (c *Collector) pruneRecords(ctx context.Context, s *state, clk *clockReading, dry bool) (operator.GCRecordCounts, error) {
	var out operator.GCRecordCounts
	var err error
	res, ns := s.Resource, c.ns
	out.History, err = c.pruneRange(ctx, ns.HistoryPrefix(res), s.historyPage, s.Revision, dry, func(kv *mvccKV) bool {
		return !s.retainedHistory[string(kv.Key)]
	}, nil)
	if err != nil {
		return out, err
	}
	cutoff := clk.cutoff(c.cfg.OpRetention)
	retired := s.Seal.Retired
	out.Ops, err = c.pruneRange(ctx, ns.OpsPrefix(res), s.opsPage, s.Revision, dry, func(kv *mvccKV) bool {
		rec, err := layout.DecodeOp(kv.Key, kv.Value)
		if err != nil {
			c.log.Warn("gc: keeping an op record that does not decode", "key", string(kv.Key), "err", err)
			return false
		}
		// A record of a retired life of the resource goes at once: the seal
		// (at or above retired) already refuses every version it could
		// answer for, and a re-created resource starts with no keys.
		return kv.ModRevision < cutoff || !retired.IsZero() && rec.Version.Compare(retired) <= 0
	}, nil)
	if err != nil {
		return out, err
	}
	top := s.Top()
	out.Grants, err = c.pruneGrants(ctx, res, s.grantsPage, s.Revision, s.Holder, dry, func(epoch, fence uint64) bool {
		// Publishing needs the grant's epoch to be current and a version
		// above max(pointer, seal): (epoch, fence, any seq) below top never
		// is.
		return epoch < s.Epoch || layout.Version{Epoch: epoch, Fence: fence}.Compare(layout.Version{Epoch: top.Epoch, Fence: top.Fence}) < 0
	})
	if err != nil {
		return out, err
	}
	if !dry {
		out.Requests, err = c.pruneRequests(ctx, res, s.requestsPage, s.Revision, clk.cutoff(c.cfg.RequestRetention))
		if err != nil {
			return out, fmt.Errorf("gc: prune request records of %q: %w", res, err)
		}
	}
	return out, nil
}

// pruneGrants deletes the grant records of res (read at rev, from first
// on: scanFrom) for which prunable(epoch, fence) holds, never the live
// holder's. Undecodable records are kept.
func (c *Collector) pruneGrants(ctx context.Context, res string, first *page, rev int64, holder *authority.Grant, dry bool, prunable func(epoch, fence uint64) bool) (int64, error) {
	prefix := c.ns.GrantsPrefix(res)
	return c.pruneRange(ctx, prefix, first, rev, dry, func(kv *mvccKV) bool {
		fence, err := layout.DecodeNumber(strings.TrimPrefix(string(kv.Key), prefix))
		if err != nil {
			return false
		}
		epoch, _, err := layout.ParseGrantRecord(string(kv.Value))
		if err != nil {
			return false
		}
		if holder != nil && holder.Generation == fence {
			return false
		}
		return prunable(epoch, fence)
	}, nil)
}

// pruneRequests deletes the acquire request records of res (read at rev,
// from first on: scanFrom; an older revision is as safe as the current one,
// since each deletion compares the record's ModRevision) last modified
// before etcd revision before, except the record of the current holder:
// before is the domain clock's cutoff of RequestRetention (DESIGN.md "Ages
// come from one clock"), so no acquirer's clock shortens a record's life;
// before <= 0 deletes nothing. Each deletion is its own nested compare
// (ModRevision unchanged, and the holder key not created with the record:
// the grant transaction creates both), so it is safe on its own with
// several collectors running. It returns how many records it deleted.
// Nothing else deletes request records.
func (c *Collector) pruneRequests(ctx context.Context, res string, first *page, rev, before int64) (int64, error) {
	if before <= 0 {
		return 0, nil
	}
	hk := c.ns.HolderKey(res)
	return c.pruneRange(ctx, c.ns.RequestsPrefix(res), first, rev, false, func(kv *mvccKV) bool {
		return kv.ModRevision < before
	}, func(kv *mvccKV) clientv3.Cmp {
		return clientv3.Compare(clientv3.CreateRevision(hk), "!=", kv.CreateRevision)
	})
}

// pruneRange deletes the keys under prefix, read at rev (from first on:
// scanFrom), for which expired holds, each in a nested transaction comparing
// its ModRevision with the one read and, when guard is not nil, guard's
// compare too; it returns how many were deleted (with dry, how many would
// be). Each batch is retried (call): its compares make a second copy a no-op,
// so a batch whose first copy applied unseen counts no deletions.
func (c *Collector) pruneRange(ctx context.Context, prefix string, first *page, rev int64, dry bool, expired func(*mvccKV) bool, guard func(*mvccKV) clientv3.Cmp) (int64, error) {
	var n int64
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		var resp *clientv3.TxnResponse
		err := c.call(ctx, "prune "+prefix, func(ctx context.Context) (err error) {
			resp, err = c.cli.Txn(ctx).Then(ops...).Commit()
			return err
		})
		ops = ops[:0]
		if err != nil {
			return err
		}
		for _, r := range resp.Responses {
			if r.GetResponseTxn().GetSucceeded() {
				n++
			}
		}
		return nil
	}
	err := c.scanFrom(ctx, prefix, first, rev, false, func(kv *mvccKV) error {
		if !expired(kv) {
			return nil
		}
		if dry {
			n++
			return nil
		}
		key := string(kv.Key)
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)}
		if guard != nil {
			cmps = append(cmps, guard(kv))
		}
		ops = append(ops, clientv3.OpTxn(cmps, []clientv3.Op{clientv3.OpDelete(key)}, nil))
		if len(ops) == pruneBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, flush()
}

// pruneLease prunes the records of the reserved lease resource res (the GC
// lease) while its grant of generation gen is held: grant records of lower
// generations (their leases are over: a resource has one holder) and
// acquire request records past RequestRetention on the domain
// clock (read, not advanced: the pass advanced it).
func (c *Collector) pruneLease(ctx context.Context, res string, gen uint64) (operator.GCRecordCounts, error) {
	var out operator.GCRecordCounts
	var err error
	out.Grants, err = c.pruneGrants(ctx, res, nil, 0, nil, false, func(_, fence uint64) bool { return fence < gen })
	if err != nil {
		return out, err
	}
	clk, err := c.advanceClock(ctx, true)
	if err != nil {
		return out, err
	}
	out.Requests, err = c.pruneRequests(ctx, res, nil, 0, clk.cutoff(c.cfg.RequestRetention))
	if c.m != nil {
		c.m.recordsDeleted(out)
	}
	return out, err
}

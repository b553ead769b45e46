package gc

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pruneBatch bounds the guarded deletions per transaction, well under
// etcd's default limit of 128 operations per transaction.
const pruneBatch = 50

// pruneRecords deletes the etcd records of s.Resource that nothing needs any
// more, after the pass dealt with the objects they name (DESIGN.md "Garbage
// collection": keep etcd bounded): history entries retention no longer keeps (read at
// s.Revision), op records last modified before clk's OpRetention cutoff,
// grant records whose fence can no longer publish, and acquire request
// records before the cutoff of the authority's RequestRetention
// (authority.PruneRequests). Ages are on the domain clock, never a
// CommittedAt or CreatedAt (DESIGN.md "Ages come from one clock").
// Each deletion is guarded by its own compare (the record's ModRevision
// unchanged), so it is safe with other collectors running. With dry, it
// counts instead (request records are not counted). The epoch, generation,
// pointer and seal are never deleted.
func (c *Collector) pruneRecords(ctx context.Context, s *state, clk *clockReading, dry bool) (RecordCounts, error) {
	var out RecordCounts
	var err error
	res, ns := s.Resource, c.ns
	out.History, err = c.pruneRange(ctx, ns.HistoryPrefix(res), s.Revision, dry, func(kv *mvccKV) bool {
		return !s.retainedHistory[string(kv.Key)]
	})
	if err != nil {
		return out, err
	}
	cutoff := clk.cutoff(c.cfg.OpRetention)
	out.Ops, err = c.pruneRange(ctx, ns.OpsPrefix(res), s.Revision, dry, func(kv *mvccKV) bool {
		if _, err := layout.DecodeOp(kv.Value); err != nil {
			c.log.Warn("gc: keeping an op record that does not decode", "key", string(kv.Key), "err", err)
			return false
		}
		return kv.ModRevision < cutoff
	})
	if err != nil {
		return out, err
	}
	top := s.Top()
	out.Grants, err = c.pruneGrants(ctx, res, s.Revision, s.Holder, dry, func(epoch, fence uint64) bool {
		// Publishing needs the grant's epoch to be current and a version
		// above max(pointer, seal): (epoch, fence, any seq) below top never
		// is.
		return epoch < s.Epoch || layout.Version{Epoch: epoch, Fence: fence}.Less(layout.Version{Epoch: top.Epoch, Fence: top.Fence})
	})
	if err != nil {
		return out, err
	}
	if !dry {
		n, err := c.auth.PruneRequests(ctx, res, clk.cutoff(c.auth.RequestRetention()))
		out.Requests = int64(n)
		if err != nil {
			return out, fmt.Errorf("gc: prune request records of %q: %w", res, err)
		}
	}
	return out, nil
}

// pruneGrants deletes the grant records of res (read at rev) for which
// prunable(epoch, fence) holds, never the live holder's. Undecodable
// records are kept.
func (c *Collector) pruneGrants(ctx context.Context, res string, rev int64, holder *authority.Grant, dry bool, prunable func(epoch, fence uint64) bool) (int64, error) {
	prefix := c.ns.GrantsPrefix(res)
	return c.pruneRange(ctx, prefix, rev, dry, func(kv *mvccKV) bool {
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
	})
}

// pruneRange deletes the keys under prefix, read at rev, for which expired
// holds, each in a nested transaction comparing its ModRevision with the one
// read; it returns how many were deleted (with dry, how many would be).
// Each batch is retried (call): its compares make a second copy a no-op,
// so a batch whose first copy applied unseen counts no deletions.
func (c *Collector) pruneRange(ctx context.Context, prefix string, rev int64, dry bool, expired func(*mvccKV) bool) (int64, error) {
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
	err := c.scan(ctx, prefix, rev, false, func(kv *mvccKV) error {
		if !expired(kv) {
			return nil
		}
		if dry {
			n++
			return nil
		}
		key := string(kv.Key)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)},
			[]clientv3.Op{clientv3.OpDelete(key)}, nil))
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
// acquire request records past the authority's retention on the domain
// clock (read, not advanced: the pass advanced it).
func (c *Collector) pruneLease(ctx context.Context, res string, gen uint64) (RecordCounts, error) {
	var out RecordCounts
	var err error
	out.Grants, err = c.pruneGrants(ctx, res, 0, nil, false, func(_, fence uint64) bool { return fence < gen })
	if err != nil {
		return out, err
	}
	clk, err := c.advanceClock(ctx, true)
	if err != nil {
		return out, err
	}
	n, err := c.auth.PruneRequests(ctx, res, clk.cutoff(c.auth.RequestRetention()))
	out.Requests = int64(n)
	if c.m != nil {
		c.m.recordsDeleted(out)
	}
	return out, err
}

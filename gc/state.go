package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type mvccKV = mvccpb.KeyValue

// scanPage is the page size of range reads.
const scanPage = 500

// page is the first page of a range read at some revision: its keys and
// whether more follow.
type page struct {
	kvs  []*mvccKV
	more bool
}

// pageOf returns the page a transaction's range answered.
func pageOf(r *etcdserverpb.ResponseOp) *page {
	rr := r.GetResponseRange()
	return &page{kvs: rr.GetKvs(), more: rr.GetMore()}
}

// scan calls fn for every key under prefix (which ends with '/'), in key
// order, reading pages of scanPage keys at revision rev (0: the current
// revision of the first page). fn's error stops the scan.
func (c *Collector) scan(ctx context.Context, prefix string, rev int64, keysOnly bool, fn func(*mvccKV) error) error {
	return c.scanFrom(ctx, prefix, nil, rev, keysOnly, fn)
}

// scanFrom is scan when the first page of the range, first, was already
// read at rev (nil: it was not): fn gets first's keys, then the scan reads
// the pages after it, so a range that fits in one page costs no request.
func (c *Collector) scanFrom(ctx context.Context, prefix string, first *page, rev int64, keysOnly bool, fn func(*mvccKV) error) error {
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	if first != nil {
		for _, kv := range first.kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !first.more || len(first.kvs) == 0 {
			return nil
		}
		key = string(first.kvs[len(first.kvs)-1].Key) + "\x00"
	}
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(scanPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		var resp *clientv3.GetResponse
		if err := c.call(ctx, "range "+prefix, func(ctx context.Context) (err error) {
			resp, err = c.cli.Get(ctx, key, opts...)
			return err
		}); err != nil {
			return err
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// stateBatch is how many resources one snapshot transaction reads: 3
// shared operations and 9 per resource, under etcd's default limit of 128
// operations per transaction (--max-txn-ops).
const stateBatch = 12

// readStates reads what GC needs about each of resources, each at ONE etcd
// revision: one transaction per stateBatch resources reads the epoch,
// deployment and epoch records, and each resource's pointer, seal,
// generation, holder, restored-pointer records and the first page of its
// history, op, grant and request records (kept for pruneRecords); the rest
// of a long history is then read page by page at that transaction's
// revision (DESIGN.md "Garbage collection": "Read epoch, pointer, seal and
// history at one etcd revision"). graceCutoff is the domain clock's
// revision for Grace + ClockSkew: a history entry superseded before it, or a
// decommission seal written before it, is past the reader grace (0:
// nothing is). The transactions of a call are sent one after another.
//
// It returns one state or one error per resource, in the order of
// resources. Errors: fencepub.ErrNotInitialized, fencepub.ErrCorruptState
// (epoch, generation, pointer, seal or a history entry does not decode),
// fencepub.ErrUnavailable, ctx's error.
func (c *Collector) readStates(ctx context.Context, resources []string, graceCutoff int64) ([]*state, []error) {
	states, errs := make([]*state, len(resources)), make([]error, len(resources))
	for lo := 0; lo < len(resources); lo += stateBatch {
		hi := min(lo+stateBatch, len(resources))
		batch, err := c.readBatch(ctx, resources[lo:hi])
		var domain *state
		if err == nil {
			domain, err = c.decodeDomain(batch)
		}
		for i, res := range resources[lo:hi] {
			if err == nil {
				states[lo+i], errs[lo+i] = c.decodeState(ctx, res, domain, batch, 3+9*i, graceCutoff)
			} else {
				errs[lo+i] = err
			}
		}
	}
	return states, errs
}

// firstKV returns the first key a transaction's range answered, or nil.
func firstKV(r *etcdserverpb.ResponseOp) *mvccKV {
	if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// decodeDomain decodes the shared reads of a snapshot transaction
// (readBatch): the epoch and its ModRevision, the deployment id and the
// issued epochs, into a state with no resource.
func (c *Collector) decodeDomain(resp *clientv3.TxnResponse) (*state, error) {
	e := firstKV(resp.Responses[0])
	if e == nil {
		return nil, fmt.Errorf("%w: no epoch key under %s", fencepub.ErrNotInitialized, c.ns.Root())
	}
	epoch, err := layout.DecodeNumber(string(e.Value))
	if err != nil {
		return nil, fmt.Errorf("%w: epoch key: %w", fencepub.ErrCorruptState, err)
	}
	s := &state{Epoch: epoch, epochMod: e.ModRevision, Issued: decodeIssued(c.ns.EpochRecordsPrefix(), resp.Responses[2].GetResponseRange().Kvs)}
	if d := firstKV(resp.Responses[1]); d != nil {
		s.Deployment = string(d.Value)
	}
	return s, nil
}

// readBatch sends the snapshot transaction of resources (at most
// stateBatch): the epoch, deployment and epoch records, then 9 reads per
// resource, in decodeState's order.
func (c *Collector) readBatch(ctx context.Context, resources []string) (*clientv3.TxnResponse, error) {
	ns := c.ns
	ops := []clientv3.Op{
		clientv3.OpGet(ns.EpochKey()),
		clientv3.OpGet(ns.DeploymentKey()),
		clientv3.OpGet(ns.EpochRecordsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	}
	for _, res := range resources {
		ops = append(ops,
			clientv3.OpGet(ns.PointerKey(res)),
			clientv3.OpGet(ns.SealKey(res)),
			clientv3.OpGet(ns.GenerationKey(res)),
			clientv3.OpGet(ns.HolderKey(res)),
			clientv3.OpGet(ns.RestoredPrefix(res), clientv3.WithPrefix()),
			clientv3.OpGet(ns.HistoryPrefix(res), clientv3.WithPrefix(), clientv3.WithLimit(scanPage)),
			clientv3.OpGet(ns.OpsPrefix(res), clientv3.WithPrefix(), clientv3.WithLimit(scanPage)),
			clientv3.OpGet(ns.GrantsPrefix(res), clientv3.WithPrefix(), clientv3.WithLimit(scanPage)),
			clientv3.OpGet(ns.RequestsPrefix(res), clientv3.WithPrefix(), clientv3.WithLimit(scanPage)),
		)
	}
	var resp *clientv3.TxnResponse
	what := "read state of " + resources[0]
	if len(resources) > 1 {
		what = fmt.Sprintf("read state of %d resources from %s", len(resources), resources[0])
	}
	err := c.call(ctx, what, func(ctx context.Context) (err error) {
		resp, err = c.cli.Txn(ctx).Then(ops...).Commit()
		return err
	})
	return resp, err
}

// decodeState decodes res's state from a snapshot transaction whose reads
// of res start at index at (readBatch), then reads the rest of its history
// at the transaction's revision. domain holds the batch's shared reads
// (decodeDomain); its Issued map is shared, read only.
func (c *Collector) decodeState(ctx context.Context, res string, domain *state, resp *clientv3.TxnResponse, at int, graceCutoff int64) (*state, error) {
	ns := c.ns
	rr := func(i int) *etcdserverpb.ResponseOp { return resp.Responses[i] }
	kv := func(i int) *mvccKV { return firstKV(rr(i)) }
	s := &state{NS: ns, Resource: res, Revision: resp.Header.Revision, Policy: c.cfg.Policy,
		Epoch: domain.Epoch, epochMod: domain.epochMod, Deployment: domain.Deployment, Issued: domain.Issued,
		historyPage: pageOf(rr(at + 5)), opsPage: pageOf(rr(at + 6)),
		grantsPage: pageOf(rr(at + 7)), requestsPage: pageOf(rr(at + 8))}
	var err error
	if p := kv(at); p != nil {
		if s.Pointer, err = layout.DecodePointer(p.Value); err != nil {
			return nil, fmt.Errorf("%w: pointer of %q: %w", fencepub.ErrCorruptState, res, err)
		}
		s.HasPointer, s.pointerMod = true, p.ModRevision
	}
	if sl := kv(at + 1); sl != nil {
		if s.Seal, err = layout.DecodeSeal(sl.Value); err != nil {
			return nil, fmt.Errorf("%w: seal of %q: %w", fencepub.ErrCorruptState, res, err)
		}
		s.HasSeal, s.sealMod = true, sl.ModRevision
	}
	if g := kv(at + 2); g != nil {
		if s.Generation, err = layout.DecodeNumber(string(g.Value)); err != nil {
			return nil, fmt.Errorf("%w: generation of %q: %w", fencepub.ErrCorruptState, res, err)
		}
	}
	if h := kv(at + 3); h != nil {
		// The holder's value is the authority's Grant as JSON; its
		// CreateRevision is the grant's HolderRevision.
		var g authority.Grant
		if json.Unmarshal(h.Value, &g) != nil || g.Generation == 0 {
			s.HolderUnknown = true
		} else {
			g.HolderRevision = h.CreateRevision
			s.Holder = &g
		}
	}
	s.Restored, s.RestoredBad, s.RestoredUnreadable = decodeRestored(ns.RestoredPrefix(res), rr(at+4).GetResponseRange().Kvs)
	s.Decommissioned = s.HasSeal && s.Seal.Reason == sealReasonDecommissioned && s.Pointer.Version.Compare(s.Seal.Version) < 0 &&
		s.sealMod < graceCutoff
	ret := newRetention(s.Policy, graceCutoff)
	if !s.Decommissioned {
		err = c.scanFrom(ctx, ns.HistoryPrefix(res), s.historyPage, s.Revision, false, func(kv *mvccKV) error {
			p, err := layout.DecodePointer(kv.Value)
			if err != nil {
				return fmt.Errorf("%w: history entry %s: %w", fencepub.ErrCorruptState, kv.Key, err)
			}
			ret.add(&historyEntry{key: string(kv.Key), pointer: p, mod: kv.ModRevision})
			return nil
		})
		if err != nil {
			return nil, err
		}
		ret.finish()
	}
	s.Retained, s.retainedHistory, s.retainedDatasets = ret.objects, ret.keys, ret.datasets
	if err := c.readNamed(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeRestored decodes the restored-pointer records under prefix: the key
// ends with the old epoch (20 digits), the value starts with the restored
// pointer's encoded version (a bare version or a pointer value). A record
// whose value does not decode quarantines its whole epoch; one whose key
// does not decode quarantines every old epoch (unreadable).
func decodeRestored(prefix string, kvs []*mvccKV) (ok map[uint64]layout.Version, bad map[uint64]bool, unreadable bool) {
	ok, bad = make(map[uint64]layout.Version), make(map[uint64]bool)
	for _, kv := range kvs {
		epoch, err := layout.DecodeNumber(strings.TrimPrefix(string(kv.Key), prefix))
		if err != nil {
			unreadable = true
			continue
		}
		v, err := layout.DecodeVersion(string(kv.Value))
		if err != nil {
			bad[epoch] = true
			continue
		}
		ok[epoch] = v
	}
	return ok, bad, unreadable
}

// decodeIssued returns the epochs of the epoch records under prefix. A key
// that does not decode names no epoch: its objects stay quarantined.
func decodeIssued(prefix string, kvs []*mvccKV) map[uint64]bool {
	issued := make(map[uint64]bool, len(kvs))
	for _, kv := range kvs {
		if epoch, err := layout.DecodeNumber(strings.TrimPrefix(string(kv.Key), prefix)); err == nil {
			issued[epoch] = true
		}
	}
	return issued
}

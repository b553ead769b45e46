package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/operator"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The domain clock (DESIGN.md "Ages come from one clock").
//
// Every age GC acts on — of op records, acquire request records, history
// supersession and decommission seals — is measured on etcd revisions, never
// on a time a publisher, an acquirer or an operator wrote. A head key holds
// the clock time T; each pass that is not a dry run advances it and writes a
// checkpoint (T, revision): every key modified before that revision was
// written before the clock read T. Cutoff(age) is then the revision of the
// latest checkpoint with T <= T_now - age, and a record modified before it is
// at least age old.
//
// The skew bound: an advance adds min(the advancing collector's wall-clock
// delta since the head, the time etcd's lease timer says the head's witness
// lease has run, less one second). Each is a lower bound of the real time
// elapsed, whichever is smaller wins: etcd only ever extends a lease (leader
// change, restart), and a checkpoint's revision is read before its witness is
// granted. So ages are lower bounds of real elapsed time; a publisher's clock
// never enters; a collector's clock jumping forward cannot shorten a record's
// life (the lease timer caps it); a leader change, an etcd restart or a
// witness that is gone (expired after clockWitnessTTL without a pass, or
// revoked) costs at most the time since the last advance. Pruning happens
// later than the retention, never earlier. The abandon period is the one age
// still on wall clocks: an object's LastModified (the store's clock) against
// the collector's clock, with Policy.ClockSkew added.

const (
	// clockWitnessTTL is the TTL of the witness lease an advance grants.
	clockWitnessTTL = 30 * 24 * time.Hour
	// clockMargin is taken off a witness's elapsed time: etcd reports the
	// remaining TTL in whole seconds, truncated.
	clockMargin = time.Second
	// clockStep is the least advance worth a checkpoint; a smaller one
	// writes nothing and the head's witness keeps running.
	clockStep = time.Second
	// Thinning: every checkpoint of the last clockKeepAll is kept, then one
	// per minute up to clockKeepMinutes, then one per hour.
	clockKeepAll     = 10 * time.Minute
	clockKeepMinutes = 2 * time.Hour
)

// clockHead is the value of the clock's head key (JSON).
type clockHead struct {
	T     int64 `json:"t"`     // clock time, unix ns
	Wall  int64 `json:"wall"`  // the advancing collector's wall time, unix ns
	Lease int64 `json:"lease"` // the witness lease granted with this head
	TTL   int64 `json:"ttl"`   // the witness's granted TTL, seconds
}

// checkpoint says that every key modified before revision Rev was written
// before the clock read T. Its value is this as JSON. Rev is one above the
// revision of a read made before the witness of T was granted, so the
// witness's run starts after every such write.
type checkpoint struct {
	T   int64 `json:"t"`   // clock time, unix ns
	Rev int64 `json:"rev"` // etcd revision

	key string
	mod int64 // ModRevision of the checkpoint key
}

// leases is the part of etcd's lease API the clock uses (clientv3.Lease).
type leases interface {
	Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error)
	Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error)
	TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error)
}

// clockReading is the clock as one pass sees it: the time now and the
// checkpoints, oldest first.
type clockReading struct {
	t        int64
	points   []checkpoint
	advanced bool // this reading wrote a checkpoint
}

// cutoff returns the revision before which every key is at least age old on
// the clock: that of the latest checkpoint with T <= now - age; 0 (nothing
// is that old) when there is none.
func (r *clockReading) cutoff(age time.Duration) int64 {
	limit := r.t - int64(age)
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i].T > limit })
	if i == 0 {
		return 0
	}
	return r.points[i-1].Rev
}

// report returns the reading for a pass report with the cutoffs of p, op
// and request retention.
func (r *clockReading) report(p Policy, opRetention, requestRetention time.Duration) *operator.GCClock {
	return &operator.GCClock{
		Time: time.Unix(0, r.t).UTC(), Advanced: r.advanced, Checkpoints: len(r.points),
		GraceCutoff: r.cutoff(p.Grace + p.ClockSkew), OpCutoff: r.cutoff(opRetention), RequestCutoff: r.cutoff(requestRetention),
	}
}

// clockState is the head and checkpoints read at one revision.
type clockState struct {
	rev     int64
	head    *clockHead // nil: the clock was never started
	headMod int64
	points  []checkpoint
}

// readClock reads the head and every checkpoint in one transaction.
// Undecodable checkpoints are skipped (with a warning): fewer checkpoints
// only make cutoffs earlier. Errors: fencepub.ErrCorruptState (the head does
// not decode), fencepub.ErrUnavailable, ctx's error.
func (c *Collector) readClock(ctx context.Context) (*clockState, error) {
	var resp *clientv3.TxnResponse
	if err := c.call(ctx, "read the domain clock", func(ctx context.Context) (err error) {
		resp, err = c.cli.Txn(ctx).Then(
			clientv3.OpGet(c.ns.ClockHeadKey()),
			clientv3.OpGet(c.ns.ClockPointsPrefix(), clientv3.WithPrefix()),
		).Commit()
		return err
	}); err != nil {
		return nil, err
	}
	st := &clockState{rev: resp.Header.Revision}
	if head := firstKV(resp.Responses[0]); head != nil {
		var h clockHead
		if err := json.Unmarshal(head.Value, &h); err != nil || h.T <= 0 {
			return nil, fmt.Errorf("%w: clock head %s %.80q does not decode", fencepub.ErrCorruptState, c.ns.ClockHeadKey(), head.Value)
		}
		st.head, st.headMod = &h, head.ModRevision
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var p checkpoint
		if err := json.Unmarshal(kv.Value, &p); err != nil || p.Rev <= 0 || c.ns.ClockPointKey(p.T) != string(kv.Key) {
			c.log.Warn("gc: ignoring a clock checkpoint that does not decode", "key", string(kv.Key))
			continue
		}
		p.key, p.mod = string(kv.Key), kv.ModRevision
		st.points = append(st.points, p)
	}
	return st, nil
}

// clockNow returns the clock time of st now: the head's time plus
// min(wall-clock delta, witness elapsed - clockMargin), neither below 0; a
// witness etcd no longer knows adds nothing. witnessOK is false when the
// witness is gone (the next advance then grants a new one). The first
// reading of a domain is the collector's wall time.
func (c *Collector) clockNow(ctx context.Context, st *clockState) (t int64, witnessOK bool, err error) {
	wall := c.now().UnixNano()
	if st.head == nil {
		return wall, true, nil
	}
	h := st.head
	var ttl *clientv3.LeaseTimeToLiveResponse
	err = c.call(ctx, "clock witness time-to-live", func(ctx context.Context) (err error) {
		ttl, err = c.leases.TimeToLive(ctx, clientv3.LeaseID(h.Lease))
		return err
	})
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, false, err
	}
	if err != nil || ttl.TTL < 0 {
		return h.T, false, nil
	}
	credit := time.Duration(ttl.GrantedTTL-ttl.TTL)*time.Second - clockMargin
	delta := time.Duration(wall - h.Wall)
	return h.T + int64(max(0, min(credit, delta))), true, nil
}

// advanceClock reads the domain clock and, unless dry, advances it: when
// the clock moved by clockStep or more (or its witness is gone) it grants a
// new witness lease and, in ONE transaction requiring the head unchanged,
// writes the new head and a checkpoint; then it revokes the old witness and
// thins the checkpoints. A collector that loses the race revokes its lease
// and reads the winner's clock. A dry run returns the virtual advance and
// writes nothing. Concurrent advances from any number of collectors are
// safe: the head's ModRevision orders them, and a checkpoint is only ever
// removed by thinning, which only makes cutoffs earlier.
//
// Errors: fencepub.ErrCorruptState (the head does not decode),
// fencepub.ErrUnavailable, ctx's error.
func (c *Collector) advanceClock(ctx context.Context, dry bool) (*clockReading, error) {
	st, err := c.readClock(ctx)
	if err != nil {
		return nil, err
	}
	t, witnessOK, err := c.clockNow(ctx, st)
	if err != nil {
		return nil, err
	}
	r := &clockReading{t: t, points: st.points}
	if dry || (st.head != nil && witnessOK && time.Duration(t-st.head.T) < clockStep) {
		return r, nil
	}
	// Each request is retried (call). A grant that timed out was not
	// granted, or its lease is never named and expires on its own; a
	// second copy of the transaction fails its compare and takes the lost
	// path below, as a transaction of unknown outcome does; a revoke
	// finds a revoked lease gone.
	var lease *clientv3.LeaseGrantResponse
	if err := c.call(ctx, "grant a clock witness", func(ctx context.Context) (err error) {
		lease, err = c.leases.Grant(ctx, int64(clockWitnessTTL/time.Second))
		return err
	}); err != nil {
		return nil, err
	}
	head, _ := json.Marshal(clockHead{T: t, Wall: c.now().UnixNano(), Lease: int64(lease.ID), TTL: lease.TTL})
	p := checkpoint{T: t, Rev: st.rev + 1, key: c.ns.ClockPointKey(t)}
	point, _ := json.Marshal(p)
	if c.beforeClockTxn != nil {
		c.beforeClockTxn()
	}
	var resp *clientv3.TxnResponse
	err = c.call(ctx, "advance the domain clock", func(ctx context.Context) (err error) {
		resp, err = c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(c.ns.ClockHeadKey()), "=", st.headMod)).
			Then(clientv3.OpPut(c.ns.ClockHeadKey(), string(head)), clientv3.OpPut(p.key, string(point))).
			Commit()
		return err
	})
	if err != nil || !resp.Succeeded {
		// Lost (or unknown): the new witness is never named by a head we
		// wrote; if the transaction did apply, the next advance finds the
		// witness gone and re-anchors without credit.
		if rerr := c.revokeWitness(ctx, lease.ID); rerr != nil {
			c.log.Warn("gc: could not revoke an unused clock witness (it expires on its own)", "lease", int64(lease.ID), "err", rerr)
		}
		if err != nil {
			return nil, err
		}
		return c.advanceClock(ctx, true)
	}
	if st.head != nil && witnessOK {
		if err := c.revokeWitness(ctx, clientv3.LeaseID(st.head.Lease)); err != nil {
			c.log.Warn("gc: could not revoke the previous clock witness (it expires on its own)", "lease", st.head.Lease, "err", err)
		}
	}
	p.mod = resp.Header.Revision
	r.points = append(dropKey(r.points, p.key), p)
	r.advanced = true
	if err := c.thinClock(ctx, r); err != nil {
		c.log.Warn("gc: thinning the clock checkpoints failed; retried on the next pass", "err", err)
	}
	return r, nil
}

// revokeWitness revokes the witness lease id, retried (call); a lease
// already gone is no error.
func (c *Collector) revokeWitness(ctx context.Context, id clientv3.LeaseID) error {
	return c.call(ctx, "revoke a clock witness", func(ctx context.Context) error {
		if _, err := c.leases.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return err
		}
		return nil
	})
}

// dropKey returns points without the checkpoint at key.
func dropKey(points []checkpoint, key string) []checkpoint {
	out := points[:0:0]
	for _, p := range points {
		if p.key != key {
			out = append(out, p)
		}
	}
	return out
}

// thinClock deletes the checkpoints of r that no cutoff needs: it keeps the
// one each retention in use (op, request, grace) cuts at now, every one of
// the last clockKeepAll, the latest of each minute up to clockKeepMinutes
// and of each hour beyond, and none older than the one the longest
// retention cuts at. Each delete requires the checkpoint unchanged.
// r.points is updated to what is kept.
func (c *Collector) thinClock(ctx context.Context, r *clockReading) error {
	ages := []time.Duration{c.cfg.OpRetention, c.cfg.RequestRetention, c.cfg.Policy.Grace + c.cfg.Policy.ClockSkew}
	// The checkpoint each age's cutoff uses now stays, whatever its bucket.
	inUse := make(map[int64]bool, len(ages))
	for _, a := range ages {
		inUse[r.cutoff(a)] = true
	}
	need := r.cutoff(slices.Max(ages))
	var keep []checkpoint
	var ops []clientv3.Op
	seen := make(map[[2]int64]bool)
	for i := len(r.points) - 1; i >= 0; i-- { // newest first
		p := r.points[i]
		age := time.Duration(r.t - p.T)
		var bucket [2]int64
		switch {
		case age < clockKeepAll:
			bucket = [2]int64{0, int64(i)}
		case age < clockKeepMinutes:
			bucket = [2]int64{1, p.T / int64(time.Minute)}
		default:
			bucket = [2]int64{2, p.T / int64(time.Hour)}
		}
		if !inUse[p.Rev] && (seen[bucket] || p.Rev < need) {
			ops = append(ops, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(p.key), "=", p.mod)},
				[]clientv3.Op{clientv3.OpDelete(p.key)}, nil))
			continue
		}
		seen[bucket] = true
		keep = append(keep, p)
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	r.points = keep
	for len(ops) > 0 {
		n := min(len(ops), pruneBatch)
		// Retried (call): each delete compares the point's ModRevision.
		if err := c.call(ctx, "thin "+strings.TrimSuffix(c.ns.ClockPointsPrefix(), "/"), func(ctx context.Context) error {
			_, err := c.cli.Txn(ctx).Then(ops[:n]...).Commit()
			return err
		}); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

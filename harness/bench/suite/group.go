package suite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// groupSize is the number of members of the measured group publish.
const groupSize = 8

// groupLimitsDoc are the largest groups docs/groups.md "Limits" states for
// etcd's default --max-txn-ops (128): AcquireGroup, then PublishGroup of
// single objects in non-strict and in strict mode.
var groupLimitsDoc = struct{ acquire, nonStrict, strict int }{31, 42, 31}

// groupWorkload is workload 12: a group publish of groupSize single-object
// members (one AcquireGroup grant) vs its floor, vs as many single
// publishes one after another, and the largest groups that fit one etcd
// transaction.
func (s *runner) groupWorkload(ctx context.Context) error {
	st, err := s.newStack(ctx, s.env.Target, WorkloadGroup)
	if err != nil {
		return err
	}
	defer s.cleanup(ctx, st.Target)
	for _, c := range []struct{ size, iters int }{{1 << 10, s.n(200, 5)}, {1 << 20, s.n(50, 3)}} {
		if err := s.groupRows(ctx, st, c.size, c.iters); err != nil {
			return err
		}
	}
	return s.groupLimits(ctx, st)
}

// groupVariant is one of the five operations measured every iteration of
// groupRows, in a rotating order.
type groupVariant int

const (
	variantGroup   groupVariant = iota // PublishGroup of every member
	variantSingles                     // one Publish per member, one after another
	variantFloor                       // the members' PUTs all at once, then the bare transaction
	variantSolo                        // the members' PUTs one after another, then the bare transaction
	variantFloorB                      // variantFloor again: the A/A calibration
	groupVariants
)

// groupRows measures, in iters iterations on groupSize fresh resources
// granted by one AcquireGroup, each variant once per iteration (the order
// rotating), with objects of size bytes, and adds the rows.
func (s *runner) groupRows(ctx context.Context, st *stack, size, iters int) error {
	res := names(fmt.Sprintf("g%d", size), groupSize)
	owner := "bench-" + authority.NewID()[:8]
	grants, err := st.auth.AcquireGroup(ctx, authority.GroupRequest{Resources: res, Owner: owner, TTL: grantTTL})
	if err != nil {
		return err
	}
	defer func() { _ = st.auth.ReleaseGroup(context.WithoutCancel(ctx), grants) }()
	defer s.dropObjects(ctx, st.Target, res)
	pubs := make([]*publisher.Publisher, len(grants))
	for i, g := range grants {
		if pubs[i], err = st.pub.Bind(ctx, publisher.GrantTerm(g, false)); err != nil {
			return err
		}
	}
	b := body(size)
	members := func() []publisher.GroupMember {
		ms := make([]publisher.GroupMember, len(pubs))
		for i, p := range pubs {
			ms[i] = publisher.GroupMember{Publisher: p, Operation: &publisher.Operation{Body: bytes.NewReader(b)}}
		}
		return ms
	}
	publishGroup := func(key string) error {
		r, err := st.pub.PublishGroup(ctx, key, members())
		if err == nil && r.Outcome != publisher.Applied {
			err = fmt.Errorf("group publish %s: outcome %s", key, r.Outcome)
		}
		return err
	}
	if err := publishGroup("warm"); err != nil { // the floor copies its records' sizes
		return err
	}
	fl, err := newGroupFloor(ctx, st, res, grants[0], "warm", fmt.Sprintf("floor-group/%d/", size))
	if err != nil {
		return err
	}
	var (
		sides                        [groupVariants]timings
		serial, txns, puts, parallel timings
		groupPh, singlesPh           phases
		groupAllocs                  uint64
		maxPutSum, txnSum            time.Duration
	)
	record := func(v groupVariant, d time.Duration, err error) error {
		sides[v].add(d, err)
		return err
	}
	var seq uint64 // the floor transaction's last version
	run := func(v groupVariant, i int) error {
		seq++
		switch v {
		case variantGroup:
			before, err := st.phases()
			if err != nil {
				return err
			}
			m0 := bench.Mallocs()
			d, err := timed(func() error { return publishGroup("g" + strconv.Itoa(i)) })
			groupAllocs += bench.Mallocs() - m0
			after, perr := st.phases()
			groupPh = groupPh.add(after.sub(before))
			return errors.Join(record(v, d, err), perr)
		case variantSingles:
			before, err := st.phases()
			if err != nil {
				return err
			}
			d, err := timed(func() error {
				for m, p := range pubs {
					key := fmt.Sprintf("s%d-%d", i, m)
					r, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: key, Body: bytes.NewReader(b)})
					if err == nil && r.Outcome != publisher.Applied {
						err = fmt.Errorf("publish %s of %s: outcome %s", key, res[m], r.Outcome)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			after, perr := st.phases()
			singlesPh = singlesPh.add(after.sub(before))
			return errors.Join(record(v, d, err), perr)
		case variantSolo:
			var maxPut, sumPut time.Duration
			var took []time.Duration
			for _, r := range res {
				d, err := timed(func() error { _, err := st.FloorPut(ctx, r, seq, b); return err })
				if err != nil {
					return record(v, 0, err)
				}
				took = append(took, d)
				maxPut, sumPut = max(maxPut, d), sumPut+d
			}
			t, err := timed(func() error { return fl.commit(ctx, seq) })
			if err != nil {
				return record(v, 0, err)
			}
			for _, d := range took {
				puts.add(d, nil)
			}
			txns.add(t, nil)
			serial.add(sumPut+t, nil)
			maxPutSum, txnSum = maxPutSum+maxPut, txnSum+t
			return record(v, maxPut+t, nil)
		default: // variantFloor, variantFloorB
			errs := make([]error, len(res))
			p, _ := timed(func() error {
				var wg sync.WaitGroup
				for k, r := range res {
					wg.Go(func() { _, errs[k] = st.FloorPut(ctx, r, seq, b) })
				}
				wg.Wait()
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				return record(v, 0, err)
			}
			t, err := timed(func() error { return fl.commit(ctx, seq) })
			if err == nil && v == variantFloor {
				parallel.add(p, nil)
			}
			return record(v, p+t, err)
		}
	}
	for i := range iters {
		for k := range groupVariants {
			if err := run((groupVariant(i)+k)%groupVariants, i); err != nil {
				return err
			}
		}
	}
	stats := func(v groupVariant) bench.Stats { return sides[v].stats() }
	sub := stats(variantGroup)
	sub.AllocsPerOp = float64(groupAllocs) / float64(max(sub.Ops, 1))
	config := fmt.Sprintf("%d members of %s (one AcquireGroup grant)", groupSize, sizeName(size))
	floorName := fmt.Sprintf("floor: the %d members' create-only PUTs sent at once, as PublishGroup writes them (the slowest member's write ends the batch) + ONE bare etcd txn of the group's size, per iteration", groupSize)
	txnSt, putSt, serialSt := txns.stats(), puts.stats(), serial.stats()
	floorIters := time.Duration(max(txnSt.Ops, 1))
	gObj, gTxn := groupPh.means()
	p95 := func(a, b bench.Stats) string {
		return fmt.Sprintf("p95 %s vs %s ms (%.2fx)", ms(a.P95), ms(b.P95), bench.Ratio(float64(a.P95), float64(b.P95)))
	}
	row := bench.NewRow(WorkloadGroup, "PublishGroup, "+config, size, 1, sub, floorName, stats(variantFloor))
	s.add(row.WithTarget("p50 <= 1.20x", func(x bench.Row) bool { return x.RatioP50 <= 1.20 }).
		WithNote(fmt.Sprintf("%d iterations, the variants in rotating order; %s; bare txn: %s; floor's batch of PUTs p50 %s ms, bare txn p50 %s ms; "+
			"PublishGroup mean: %d object writes (at most 8 at once) of %s ms each + txn %s ms; allocs/group %.0f",
			iters, p95(sub, row.Base), fl, ms(parallel.stats().P50), ms(txnSt.P50),
			groupSize, ms(gObj), ms(gTxn), sub.AllocsPerOp)))
	row = bench.NewRow(WorkloadGroup, "PublishGroup vs the slowest PUT alone, "+config, size, 1, sub,
		fmt.Sprintf("the slowest of the %d members' PUTs sent one after another (no other write at the same time) + the bare txn, per iteration", groupSize), stats(variantSolo))
	s.add(row.WithNote(fmt.Sprintf("%s; p50 bare txn %s ms + p50 single PUT %s ms = %s ms; mean slowest PUT %s ms + mean txn %s ms",
		p95(sub, row.Base), ms(txnSt.P50), ms(putSt.P50), ms(txnSt.P50+putSt.P50), ms(maxPutSum/floorIters), ms(txnSum/floorIters))))
	row = bench.NewRow(WorkloadGroup, "PublishGroup vs single publishes, "+config, size, 1, sub,
		fmt.Sprintf("%d Publish calls one after another by the same holder (one transaction each), same objects", groupSize), stats(variantSingles))
	sObj, sTxn := singlesPh.means()
	s.add(row.WithNote(fmt.Sprintf("%s; single publishes mean: object write %s ms + txn %s ms, ×%d", p95(sub, row.Base), ms(sObj), ms(sTxn), groupSize)))
	row = bench.NewRow(WorkloadGroup, "PublishGroup vs the serial floor, "+config, size, 1, sub,
		fmt.Sprintf("the %d PUTs one after another summed + the bare txn, per iteration", groupSize), serialSt)
	s.add(row.WithNote(p95(sub, row.Base)))
	row = bench.NewRow(WorkloadGroup, "the floor vs the slowest PUT alone, "+config, size, groupSize, stats(variantFloor),
		fmt.Sprintf("the slowest of %d PUTs one after another + bare txn", groupSize), stats(variantSolo))
	s.add(row.WithNote(fmt.Sprintf("what %d writes at once cost this store against one: the floor's batch p50 %s ms; %s",
		groupSize, ms(parallel.stats().P50), p95(stats(variantFloor), row.Base))))
	row = bench.NewRow(WorkloadGroup, "A/A calibration: floor vs floor, "+config, size, 1, stats(variantFloorB), "the floor", stats(variantFloor))
	row.Calibration = true
	s.add(row.WithNote("the floor measured twice in every iteration: how far from 1.00x this lands is the run's noise; " + p95(row.Subject, row.Base)))
	return nil
}

// timings collects the latencies of one side of a row and their sum, its
// measured wall time.
type timings struct {
	rec  bench.Recorder
	wall time.Duration
}

// add records one operation of d, or its error.
func (t *timings) add(d time.Duration, err error) {
	t.rec.Add(d, err)
	if err == nil {
		t.wall += d
	}
}

// stats summarises the side.
func (t *timings) stats() bench.Stats { return t.rec.Stats(t.wall) }

// groupFloor is the etcd half of a group publish's floor: ONE bare
// transaction with as many compares and puts as PublishGroup's transaction
// for its members (non-strict, single objects), on keys of its own, with
// values of the sizes of the group's records.
//
// If: an op key absent, the epoch value equal, per member its pointer and
// seal values below the new version and its grant value equal. Then: the
// op key, per member its pointer and a history key.
type groupFloor struct {
	etcd                      *clientv3.Client
	root                      string // key prefix
	members                   int
	epoch, grant, opVal, tail string // tail pads a pointer value to the group's size
}

// newGroupFloor prepares the floor of a group publish of res (fresh keys
// under root of st's namespace): it copies the sizes of the records that
// the group publish of key (applied) wrote, and initialises the compared
// keys.
func newGroupFloor(ctx context.Context, st *stack, res []string, g authority.Grant, key, root string) (*groupFloor, error) {
	value := func(k string) (string, error) {
		r, err := st.Etcd.Get(ctx, k)
		if err != nil {
			return "", err
		}
		if len(r.Kvs) == 0 {
			return "", fmt.Errorf("group floor: no key %s", k)
		}
		return string(r.Kvs[0].Value), nil
	}
	ptr, err := value(st.NS.PointerKey(res[0]))
	if err != nil {
		return nil, err
	}
	op, err := value(st.NS.OpKey(res[0], key))
	if err != nil {
		return nil, err
	}
	grant, err := value(st.NS.GrantKey(res[0], g.Generation))
	if err != nil {
		return nil, err
	}
	epoch, err := value(st.NS.EpochKey())
	if err != nil {
		return nil, err
	}
	zero := layout.EncodeVersion(layout.Version{})
	f := &groupFloor{etcd: st.Etcd, root: st.NS.Root() + root, members: len(res), epoch: epoch, grant: grant,
		opVal: strings.Repeat("o", len(op)), tail: "|" + strings.Repeat("p", max(len(ptr)-len(zero)-1, 0))}
	init := []clientv3.Op{clientv3.OpPut(f.root+"epoch", epoch)}
	for i := range f.members {
		init = append(init, clientv3.OpPut(f.key("pointer", i), zero), clientv3.OpPut(f.key("seal", i), zero), clientv3.OpPut(f.key("grant", i), grant))
	}
	if _, err := st.Etcd.Txn(ctx).Then(init...).Commit(); err != nil {
		return nil, err
	}
	return f, nil
}

// key is member i's key of kind.
func (f *groupFloor) key(kind string, i int) string { return fmt.Sprintf("%s%s/%03d", f.root, kind, i) }

// shape returns the numbers of compares and puts of the transaction.
func (f *groupFloor) shape() (cmps, puts int) { return 2 + 3*f.members, 1 + 2*f.members }

// String describes the transaction for a row's note.
func (f *groupFloor) String() string {
	c, p := f.shape()
	return fmt.Sprintf("%d compares + %d puts, values of %d (pointer, history) and %d (op record) bytes", c, p, len(layout.EncodeVersion(layout.Version{}))+len(f.tail), len(f.opVal))
}

// commit sends the transaction for seq (which must grow); the compares
// must hold.
func (f *groupFloor) commit(ctx context.Context, seq uint64) error {
	enc := layout.EncodeVersion(layout.Version{Epoch: 1, Fence: 1, Seq: seq})
	op := f.root + "ops/" + enc
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(op), "=", 0), clientv3.Compare(clientv3.Value(f.root+"epoch"), "=", f.epoch)}
	then := []clientv3.Op{clientv3.OpPut(op, f.opVal)}
	for i := range f.members {
		cmps = append(cmps,
			clientv3.Compare(clientv3.Value(f.key("pointer", i)), "<", enc),
			clientv3.Compare(clientv3.Value(f.key("seal", i)), "<", enc),
			clientv3.Compare(clientv3.Value(f.key("grant", i)), "=", f.grant))
		then = append(then, clientv3.OpPut(f.key("pointer", i), enc+f.tail), clientv3.OpPut(f.key("history", i)+"/"+enc, enc+f.tail))
	}
	r, err := f.etcd.Txn(ctx).If(cmps...).Then(then...).Commit()
	if err == nil && !r.Succeeded {
		err = fmt.Errorf("group floor: the transaction of seq %d failed its compares", seq)
	}
	return err
}

// fitPattern finds the member count an ErrGroupTooLarge names.
var fitPattern = regexp.MustCompile(`at most (\d+) members`)

// fits returns the largest group err (which must be sentinel) names.
func fits(err, sentinel error) (int, error) {
	if !errors.Is(err, sentinel) {
		return 0, fmt.Errorf("want %v, got %v", sentinel, err)
	}
	m := fitPattern.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, fmt.Errorf("%v: names no member count", err)
	}
	return strconv.Atoi(m[1])
}

// domainMark is what a write to st's domain changes: the highest etcd
// modification revision under it and its object count.
type domainMark struct {
	rev     int64
	objects int64
}

// mark returns st's domain's current domainMark.
func (st *stack) mark(ctx context.Context) (domainMark, error) {
	r, err := st.Etcd.Get(ctx, st.NS.Root(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend))
	if err != nil {
		return domainMark{}, err
	}
	var m domainMark
	if len(r.Kvs) > 0 {
		m.rev = r.Kvs[0].ModRevision
	}
	m.objects, err = st.count(ctx, st.NS.Root())
	return m, err
}

// refusedUnwritten runs f, which must fail with sentinel, and checks that
// st's domain is unchanged after it.
func (st *stack) refusedUnwritten(ctx context.Context, what string, sentinel error, f func() error) error {
	before, err := st.mark(ctx)
	if err != nil {
		return err
	}
	ferr := f()
	if !errors.Is(ferr, sentinel) {
		return fmt.Errorf("%s: %v; want %v", what, ferr, sentinel)
	}
	after, err := st.mark(ctx)
	if err != nil {
		return err
	}
	if after != before {
		return fmt.Errorf("%s was refused (%v) but wrote: etcd revision %d → %d, objects %d → %d", what, ferr, before.rev, after.rev, before.objects, after.objects)
	}
	return nil
}

// groupLimits adds the rows of the largest groups with the client's
// default MaxTxnOps: each size the refusal of a larger group names is
// granted or applied, and one member more is refused with ErrGroupTooLarge
// with nothing written.
func (s *runner) groupLimits(ctx context.Context, st *stack) error {
	const pool = 64 // more than any group fits
	res := names("lim", pool)
	owner := "bench-" + authority.NewID()[:8]
	acquire := func(rs []string) ([]authority.Grant, error) {
		return st.auth.AcquireGroup(ctx, authority.GroupRequest{Resources: rs, Owner: owner, TTL: grantTTL})
	}
	_, err := acquire(res)
	maxAcquire, err := fits(err, authority.ErrGroupTooLarge)
	if err != nil {
		return fmt.Errorf("AcquireGroup of %d: %w", pool, err)
	}
	if maxAcquire < 1 || maxAcquire >= pool {
		return fmt.Errorf("AcquireGroup fits %d members, want 1 to %d", maxAcquire, pool-1)
	}
	if err := st.refusedUnwritten(ctx, fmt.Sprintf("AcquireGroup of %d", maxAcquire+1), authority.ErrGroupTooLarge, func() error {
		_, err := acquire(res[:maxAcquire+1])
		return err
	}); err != nil {
		return err
	}
	var grants []authority.Grant
	var took time.Duration
	for lo := 0; lo < pool; lo += maxAcquire {
		var gs []authority.Grant
		d, err := timed(func() (err error) { gs, err = acquire(res[lo:min(lo+maxAcquire, pool)]); return err })
		if err != nil {
			return fmt.Errorf("AcquireGroup of %d: %w", len(res[lo:min(lo+maxAcquire, pool)]), err)
		}
		if lo == 0 {
			took = d
		}
		defer func() { _ = st.auth.ReleaseGroup(context.WithoutCancel(ctx), gs) }()
		grants = append(grants, gs...)
	}
	s.addLimit("AcquireGroup", "granted", maxAcquire, groupLimitsDoc.acquire, took)
	defer s.dropObjects(ctx, st.Target, res)
	for _, strict := range []bool{false, true} {
		pubs := make([]*publisher.Publisher, pool)
		for i, g := range grants {
			if pubs[i], err = st.pub.Bind(ctx, publisher.GrantTerm(g, strict)); err != nil {
				return err
			}
		}
		members := func(n int) []publisher.GroupMember {
			ms := make([]publisher.GroupMember, n)
			for i, p := range pubs[:n] {
				ms[i] = publisher.GroupMember{Publisher: p, Operation: &publisher.Operation{Body: bytes.NewReader(body(16))}}
			}
			return ms
		}
		mode, doc := "non-strict", groupLimitsDoc.nonStrict
		if strict {
			mode, doc = "strict", groupLimitsDoc.strict
		}
		_, err := st.pub.PublishGroup(ctx, mode+"-all", members(pool))
		k, err := fits(err, publisher.ErrGroupTooLarge)
		if err != nil {
			return fmt.Errorf("PublishGroup of %d, %s: %w", pool, mode, err)
		}
		if k < 1 || k >= pool {
			return fmt.Errorf("PublishGroup, %s, fits %d members, want 1 to %d", mode, k, pool-1)
		}
		if err := st.refusedUnwritten(ctx, fmt.Sprintf("PublishGroup of %d, %s", k+1, mode), publisher.ErrGroupTooLarge, func() error {
			_, err := st.pub.PublishGroup(ctx, mode+"-over", members(k+1))
			return err
		}); err != nil {
			return err
		}
		var r publisher.GroupResult
		d, err := timed(func() (err error) { r, err = st.pub.PublishGroup(ctx, mode+"-fit", members(k)); return err })
		if err == nil && (r.Outcome != publisher.Applied || len(r.Members) != k) {
			err = fmt.Errorf("outcome %s, %d members", r.Outcome, len(r.Members))
		}
		if err != nil {
			return fmt.Errorf("PublishGroup of %d, %s: %w", k, mode, err)
		}
		s.addLimit("PublishGroup, single objects of 16 B, "+mode, "applied", k, doc, d)
	}
	return nil
}

// addLimit adds the row of the largest group of what: measured against
// the documented size doc; the largest was done (granted, applied) in took.
func (s *runner) addLimit(what, done string, measured, doc int, took time.Duration) {
	row := bench.NewRow(WorkloadGroup, "largest group: "+what, 0, 1, bench.Stats{Ops: 1, Throughput: float64(measured)},
		`docs/groups.md "Limits"`, bench.Stats{Ops: 1, Throughput: float64(doc)})
	row.Unit = "members"
	s.add(row.WithTarget(fmt.Sprintf("largest = %d members with --max-txn-ops 128; %d refused (ErrGroupTooLarge) before any write", doc, doc+1),
		func(x bench.Row) bool { return measured == doc }).
		WithNote(fmt.Sprintf("%d %s in %s ms; %d refused with ErrGroupTooLarge, the domain's etcd revision and object count unchanged",
			measured, done, ms(took), measured+1)))
}

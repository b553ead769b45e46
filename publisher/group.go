package publisher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrGroupTooLarge: a group publish whose transaction would carry more
// operations than etcd accepts (Config.MaxTxnOps, CLI key
// etcd.max_txn_ops). It wraps fencepub.ErrInvalid; the message names how
// many such members fit. Nothing was written.
var ErrGroupTooLarge = fmt.Errorf("publisher: group too large for one etcd transaction: %w", fencepub.ErrInvalid)

// GroupMember is one member of a group publish: a Publisher bound to the
// member resource's term and what it publishes there, exactly one of an
// Operation (one object) or a Dataset. Their IdempotencyKey is ignored:
// the group's key names the whole publish.
type GroupMember struct {
	Publisher *Publisher
	Operation *Operation
	Dataset   *Dataset
}

// GroupResult describes how a group publish ended (DESIGN.md "Groups").
type GroupResult struct {
	Outcome Outcome `json:"outcome"`
	// Reason and Member: for Stale, why and which member (the first refused
	// one in name order); nothing moved.
	Reason         Reason `json:"reason"`
	Member         string `json:"member,omitempty"`
	IdempotencyKey string `json:"idempotency_key"`
	// Digest is the group's request digest: 64 lowercase hex digits of
	// sha256 over the members' names and request digests (DESIGN.md
	// "Groups").
	Digest string `json:"digest"`
	// Members are the members' results, sorted by resource name, each with
	// its Attempt. For Duplicate only the first carries the original
	// version (the op record's).
	Members  []Result `json:"members"`
	Revision int64    `json:"revision,omitempty"`
	Attempts int      `json:"attempts"`
}

// groupShared are the operations a group transaction's compares and Else
// reads carry once: the op record and the epoch.
const groupShared = 2

// memberOps is how many compares member m adds to a group transaction, at
// most: pointer, seal and grant record, strict mode's holder, contiguous
// mode's previous seq, and a dataset's base. Its Else reads are fewer.
func memberOps(m GroupMember) int {
	t := m.Publisher.term
	n := 3
	for _, more := range []bool{t.strict, t.contiguous, m.Dataset != nil && m.Dataset.Base != BaseNone} {
		if more {
			n++
		}
	}
	return n
}

// checkGroup validates members and sorts them by resource name. Errors:
// fencepub.ErrInvalid, ErrGroupTooLarge.
func (c *Client) checkGroup(key string, members []GroupMember) ([]GroupMember, error) {
	if err := layout.ValidateKey("idempotency key", key); err != nil {
		return nil, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: publisher: a group needs at least one member", fencepub.ErrInvalid)
	}
	ms := slices.Clone(members)
	for _, m := range ms {
		if m.Publisher == nil || m.Publisher.c != c || (m.Operation == nil) == (m.Dataset == nil) {
			return nil, fmt.Errorf("%w: publisher: a group member needs a Publisher of this Client and exactly one of Operation and Dataset", fencepub.ErrInvalid)
		}
	}
	slices.SortFunc(ms, func(a, b GroupMember) int { return cmp.Compare(a.Publisher.term.resource, b.Publisher.term.resource) })
	ops, most := groupShared, 0
	for i, m := range ms {
		if i > 0 && ms[i-1].Publisher.term.resource == m.Publisher.term.resource {
			return nil, fmt.Errorf("%w: publisher: resource %q is a member twice", fencepub.ErrInvalid, m.Publisher.term.resource)
		}
		ops += memberOps(m)
		most = max(most, memberOps(m))
	}
	if ops > c.cfg.MaxTxnOps {
		return nil, fmt.Errorf("%w: %d members need %d operations; at most %d members like the largest of these fit etcd.max_txn_ops = %d (which must match etcd's --max-txn-ops)",
			ErrGroupTooLarge, len(ms), ops, max(0, (c.cfg.MaxTxnOps-groupShared)/most), c.cfg.MaxTxnOps)
	}
	return ms, nil
}

// groupTxn is one group publish transaction, built once from its members'
// prepared transactions, re-sent unchanged.
type groupTxn struct {
	key, digest string
	claims      []claim
	pubs        []*Publisher
	prs         []*prepared
	limit       time.Duration // one send's bound
	cmps        []clientv3.Cmp
	then, els   []clientv3.Op
}

// PublishGroup writes the members' objects or datasets, DefaultParallel
// at once, each under its Publisher's next seq, then moves every member's pointer in one etcd
// transaction that checks, per member, all a single publish checks, with
// one op record of key (DESIGN.md "Groups"). Blocks and re-sends as
// Publish. Outcomes: Applied, Duplicate and Conflict by key, Stale naming
// Member and Reason (nothing moved), Unknown (ResolveGroup). Errors: as
// Publish; ErrGroupTooLarge before anything is written. Seqs go back when
// nothing was sent.
func (c *Client) PublishGroup(ctx context.Context, key string, members []GroupMember) (GroupResult, error) {
	ms, err := c.checkGroup(key, members)
	if err != nil {
		c.m.failure("validate")
		return GroupResult{}, err
	}
	g := &groupTxn{key: key, limit: c.cfg.RequestTimeout}
	giveBack := func() {
		for i := len(g.claims) - 1; i >= 0; i-- {
			g.pubs[i].giveBack(g.claims[i])
		}
	}
	if err := c.writeMembers(ctx, g, ms); err != nil {
		giveBack()
		return GroupResult{}, err
	}
	c.buildGroup(g)
	res, err := c.commitGroup(ctx, g)
	if notApplied(Result{Outcome: res.Outcome, Attempts: res.Attempts}, err) {
		giveBack()
	}
	return res, err
}

// writeMembers writes every member of ms (writeMember), DefaultParallel at
// once, and fills g's claims, publishers and prepared transactions in the
// order of ms with those written. On the first error it stops the other
// writes and returns that error; g then holds the members written, whose
// seqs the caller gives back.
func (c *Client) writeMembers(ctx context.Context, g *groupTxn, ms []GroupMember) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prs, cls := make([]*prepared, len(ms)), make([]claim, len(ms))
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	slots := make(chan struct{}, DefaultParallel)
	for i, m := range ms {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			if ctx.Err() != nil {
				return // an earlier member failed
			}
			pr, cl, err := c.writeMember(ctx, g.key, m)
			if err != nil {
				once.Do(func() { first = err; cancel() })
				return
			}
			prs[i], cls[i] = pr, cl
		})
	}
	wg.Wait()
	for i, pr := range prs {
		if pr != nil {
			g.claims, g.pubs, g.prs = append(g.claims, cls[i]), append(g.pubs, ms[i].Publisher), append(g.prs, pr)
		}
	}
	if first == nil && len(g.prs) < len(ms) {
		first = ctx.Err() // the caller's ctx ended before every member was written
	}
	return first
}

// writeMember stores m's object or dataset under its Publisher's next seq
// and prepares its single publish transaction under key. On error the seq
// is given back.
func (c *Client) writeMember(ctx context.Context, key string, m GroupMember) (*prepared, claim, error) {
	p := m.Publisher
	if m.Operation != nil {
		op := *m.Operation
		op.IdempotencyKey = key
		op, err := p.check(op)
		if err != nil {
			return nil, claim{}, err
		}
		cl := p.take(0)
		w, err := p.write(ctx, cl.v, op)
		if err != nil {
			p.giveBack(cl)
			return nil, claim{}, err
		}
		return p.prepare(w), cl, nil
	}
	ds := *m.Dataset
	ds.IdempotencyKey = key
	if err := ds.validate(); err != nil {
		return nil, claim{}, err
	}
	b, err := c.readBase(ctx, p.term.resource, ds.Base)
	if err != nil {
		return nil, claim{}, err
	}
	cl := p.take(0)
	w, _, err := p.writeDataset(ctx, cl.v, ds, b)
	if err != nil {
		p.giveBack(cl)
		return nil, claim{}, err
	}
	return c.prepareDataset(p.term, cl.v, key, w, b), cl, nil
}

// buildGroup merges g.prs into one transaction: the first member's op
// record (compared absent, written with the group's digest), each distinct
// epoch compared once, and each member's own compares and writes. Else
// reads the op record, the epoch, then per member its pointer, seal, grant
// record and (strict) holder.
func (c *Client) buildGroup(g *groupTxn) {
	first := g.prs[0]
	resources, digests := make([]string, len(g.prs)), make([]string, len(g.prs))
	for i, pr := range g.prs {
		resources[i], digests[i] = pr.term.resource, pr.digest
	}
	g.digest = layout.GroupDigest(resources, digests)
	opKey := c.ns.OpKey(first.term.resource, g.key)
	rec := layout.OpRecord{Digest: g.digest, Version: first.version, ObjectKey: first.object.Key, Owner: first.term.owner}
	opVal, _ := layout.EncodeOp(opKey, rec) // the compact encoder cannot fail
	g.cmps = []clientv3.Cmp{first.cmps[cmpOp]}
	g.then = []clientv3.Op{clientv3.OpPut(opKey, opVal)}
	g.els = []clientv3.Op{first.els[elseOp], first.els[elseEpoch]}
	epochs := map[uint64]bool{}
	for _, pr := range g.prs {
		if !epochs[pr.version.Epoch] {
			epochs[pr.version.Epoch] = true
			g.cmps = append(g.cmps, pr.cmps[cmpEpoch])
		}
		for i, cm := range pr.cmps {
			if i != cmpOp && i != cmpEpoch {
				g.cmps = append(g.cmps, cm)
			}
		}
		for i, op := range pr.then {
			if i != thenOp {
				g.then = append(g.then, op)
			}
		}
		g.els = append(g.els, pr.els[elsePointer], pr.els[elseSeal], pr.els[elseGrant])
		if pr.term.strict {
			g.els = append(g.els, pr.els[elseHolder])
			if pr.term.ttl > 0 {
				g.limit = min(g.limit, pr.term.ttl/3)
			}
		}
	}
}

// memberResponse rebuilds, from a failed group transaction's Else reads,
// member i's answer as its single publish transaction would have read it,
// with no op record (the group's is judged once), so classify judges it.
func (g *groupTxn) memberResponse(resp *clientv3.TxnResponse, i int) *clientv3.TxnResponse {
	off := groupShared
	for _, pr := range g.prs[:i] {
		off += 3
		if pr.term.strict {
			off++
		}
	}
	rs := resp.Responses
	holder := &pb.ResponseOp{}
	if g.prs[i].term.strict {
		holder = rs[off+3]
	}
	return &clientv3.TxnResponse{Header: resp.Header, Responses: []*pb.ResponseOp{
		elseOp: {}, elsePointer: rs[off], elseSeal: rs[off+1], elseEpoch: rs[1], elseGrant: rs[off+2], elseHolder: holder,
	}}
}

// result is the GroupResult of outcome o, each member's Result from its
// attempt.
func (g *groupTxn) result(o Outcome) GroupResult {
	gr := GroupResult{Outcome: o, IdempotencyKey: g.key, Digest: g.digest}
	for _, pr := range g.prs {
		r := pr.result(o, reasonNone)
		r.IdempotencyKey = g.key
		gr.Members = append(gr.Members, r)
	}
	return gr
}

// commitGroup sends g's transaction as commit sends a single one and
// classifies the answer.
func (c *Client) commitGroup(ctx context.Context, g *groupTxn) (GroupResult, error) {
	first := g.prs[0]
	if err := ctx.Err(); err != nil {
		c.m.failure("txn")
		return GroupResult{}, fmt.Errorf("publisher: group publish %q not sent: %w", g.key, err)
	}
	start := time.Now()
	resp, attempt, err := c.resend(ctx, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		actx, cancel := context.WithTimeout(ctx, g.limit)
		defer cancel()
		return c.kv.Txn(actx).If(g.cmps...).Then(g.then...).Else(g.els...).Commit()
	}, "group", first.term.resource, "key", g.key, "members", len(g.prs))
	unknown := func(last error) (GroupResult, error) {
		c.m.txnDone(time.Since(start), attempt)
		c.m.outcome(Unknown, reasonNone)
		gr := g.result(Unknown)
		gr.Attempts = attempt
		return gr, fmt.Errorf("%w: group %q (first member %q at %s): %d sends, last error: %w",
			ErrUnknown, g.key, first.term.resource, first.version, attempt, last)
	}
	switch {
	case err == nil:
		gr, err := c.classifyGroup(g, resp)
		if attempt > 1 && (errors.Is(err, fencepub.ErrNotInitialized) || gr.Outcome == Stale && gr.Reason == ReasonGap) {
			return unknown(fmt.Errorf("a re-send was refused (%v), but an earlier send may have applied or still apply", err))
		}
		gr.Attempts = attempt
		c.answered(start, attempt, gr.Outcome, gr.Reason)
		return gr, err
	case attempt == 0:
		c.m.failure("txn")
		return GroupResult{}, fmt.Errorf("publisher: group publish %q not sent: %w", g.key, err)
	case !ambiguous(attempt, err):
		c.m.failure("txn")
		return GroupResult{Attempts: attempt}, fmt.Errorf("publisher: etcd refused the group publish transaction %q (not applied): %w", g.key, err)
	}
	return unknown(err)
}

// classifyGroup turns the group transaction's answer into a GroupResult:
// the op record first (applied by an earlier send of this attempt,
// duplicate, conflict), then each member in name order as classify judges
// a single publish; the first refused member makes the group Stale.
func (c *Client) classifyGroup(g *groupTxn, resp *clientv3.TxnResponse) (GroupResult, error) {
	gr := g.result(Applied)
	gr.Revision = resp.Header.Revision
	first := g.prs[0]
	if resp.Succeeded {
		for i, pr := range g.prs {
			ptr := pr.pointer
			gr.Members[i].Pointer, gr.Members[i].Revision = &ptr, resp.Header.Revision
		}
		return gr, nil
	}
	if op := kv(resp, elseOp); op != nil {
		rec, err := layout.DecodeOp(op.Key, op.Value)
		if err != nil {
			return GroupResult{}, fmt.Errorf("publisher: op record %q of %q: %w", g.key, first.term.resource, err)
		}
		switch {
		case rec.Digest != g.digest:
			gr = g.result(Conflict)
			return gr, fmt.Errorf("%w: key %q (under %q) was applied at %s with digest %s; this group's digest is %s",
				ErrConflict, g.key, first.term.resource, rec.Version, rec.Digest, g.digest)
		case rec.Version == first.version && rec.ObjectKey == first.object.Key:
			return gr, nil // our own earlier send was applied
		default:
			gr = g.result(Duplicate)
			gr.Members[0].Version, gr.Members[0].Object = rec.Version, rec.Object(nil)
			return gr, nil
		}
	}
	for i, pr := range g.prs {
		res, err := c.classify(pr, g.memberResponse(resp, i))
		if res.Outcome == Stale {
			gr = g.result(Stale)
			gr.Reason, gr.Member = res.Reason, pr.term.resource
			gr.Members[i] = res
			gr.Members[i].IdempotencyKey = g.key
			return gr, fmt.Errorf("group %q: member %q: %w", g.key, pr.term.resource, err)
		}
		if res.Outcome == "" && err != nil && !errors.Is(err, errAllMatch) {
			return GroupResult{}, err
		}
	}
	return GroupResult{}, fmt.Errorf("publisher: group transaction %q failed but every compared value matches (revision %d)", g.key, resp.Header.Revision)
}

// ResolveGroup settles an unknown group publish for the whole group: it is
// Resolve of the first member's attempt under the group's key and digest,
// since that member's op record and seal decide the group; settled stale,
// every member's attempt is marked settled in the bucket (DESIGN.md
// "Groups"). Errors: as Resolve; fencepub.ErrInvalid for a result without
// members' attempts.
func (c *Client) ResolveGroup(ctx context.Context, unknown GroupResult) (GroupResult, error) {
	if len(unknown.Members) == 0 || unknown.Members[0].Attempt == nil {
		return GroupResult{}, fmt.Errorf("%w: publisher: a group result to resolve needs its members' attempts", fencepub.ErrInvalid)
	}
	m0 := unknown.Members[0]
	res, err := c.Resolve(ctx, m0.Resource, unknown.IdempotencyKey, m0.Attempt.Version,
		AttemptID{Digest: unknown.Digest, ObjectKey: m0.Attempt.Object.Key})
	if res.Outcome == "" {
		return GroupResult{}, err
	}
	gr := unknown
	gr.Outcome, gr.Reason, gr.Member, gr.Revision = res.Outcome, res.Reason, "", res.Revision
	gr.Members = slices.Clone(unknown.Members)
	for i := range gr.Members {
		gr.Members[i].Outcome, gr.Members[i].Reason = res.Outcome, reasonNone
	}
	gr.Members[0] = res
	if res.Outcome == Stale {
		gr.Member = m0.Resource
		if merr := c.settleMembers(ctx, unknown, res.Reason); merr != nil {
			return gr, merr
		}
	}
	return gr, err
}

// settleMembers writes the settled marker of every member's attempt after
// the first (Resolve wrote the first's) once the group is settled stale:
// the first member's seal keeps the group transaction from ever applying,
// but it is lost with etcd, and RestoreLost must republish no member's
// attempt (DESIGN.md "Groups"). Errors: fencepub.ErrUnavailable (or
// ErrInvalid when the store refused it) naming the member.
func (c *Client) settleMembers(ctx context.Context, unknown GroupResult, reason Reason) error {
	for _, m := range unknown.Members[1:] {
		if m.Attempt == nil {
			return fmt.Errorf("%w: publisher: a group result to resolve needs its members' attempts (%q has none)", fencepub.ErrInvalid, m.Resource)
		}
		if err := c.markSettled(ctx, m.Resource, unknown.IdempotencyKey, m.Attempt.Version, reason); err != nil {
			kind := fencepub.ErrUnavailable
			if errors.Is(err, fencepub.ErrInvalid) {
				kind = fencepub.ErrInvalid
			}
			return fmt.Errorf("%w: group %q is settled in etcd (not applied, reason %s), but the marker of member %q at %s was not written: %w; resolve it again, or a recover from the bucket could republish it",
				kind, unknown.IdempotencyKey, reason, m.Resource, m.Attempt.Version, err)
		}
	}
	return nil
}

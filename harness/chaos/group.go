package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/pubhook"
	"github.com/fencepub/fencepub/internal/wait"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
)

// The group workload (DESIGN.md "Groups"): group workers acquire two or
// three of the group resources of each window as one group
// (authority.AcquireGroup, one lease) and publish group versions
// (publisher.PublishGroup): fresh ones, retries of a key with the same
// content (duplicate) or other content (conflict), and, as zombies, late
// ones past the lease while a rival acquired some of the members
// (stale). An unknown group publish is settled with ResolveGroup. Each
// member is logged as a publish of its resource, tagged with the group's
// id; a group reader reads the group resources of a window at one etcd
// revision (reader.ReadCut).

// runGroups runs group terms until stop closes.
func (w *worker) runGroups() {
	for !w.stopped() {
		if !w.groupTerm(w.pickGroup()) {
			w.sleep(time.Duration(50+w.rng.IntN(200)) * time.Millisecond)
		}
	}
}

// pickGroup returns two or three group resources of the current window,
// in name order.
func (w *worker) pickGroup() []string {
	all := w.wl.groupResources(w.wl.window(w.clock.Now()))
	n := min(2+w.rng.IntN(2), len(all))
	idx := w.rng.Perm(len(all))[:n]
	slices.Sort(idx)
	out := make([]string, n)
	for i, j := range idx {
		out[i] = all[j]
	}
	return out
}

// acquireGroup gets one grant per resource of resources on one lease,
// retrying with the same request id while the answer is unknown, and
// logs each grant. expired is true for grants a retried request got back
// after their lease ended.
func (w *worker) acquireGroup(resources []string) (gs []authority.Grant, expired, ok bool) {
	req := authority.GroupRequest{
		Resources: resources, Owner: w.id + "-" + authority.NewID()[:8], RequestID: authority.NewID(),
		TTL: w.wl.TTL, Wait: true,
	}
	for attempt := 0; attempt < 4 && !w.stopped(); attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), w.wl.acquireTimeout())
		call := w.clock.Now()
		gs, err := w.auth.AcquireGroup(ctx, req)
		cancel()
		w.out.Attempt(newAttempt(w.clock, w.id, "acquire", call, errors.Is(err, fencepub.ErrUnavailable), err))
		switch {
		case err == nil, errors.Is(err, authority.ErrExpired) && len(gs) == len(resources):
			expired = err != nil
			for _, g := range gs {
				w.out.Grant(GrantEvent{
					Client: w.id, Time: w.clock.Now(), Resource: g.Resource, Owner: g.Owner, RequestID: g.RequestID,
					Epoch: g.Epoch, Fence: g.Generation, Expired: expired,
				})
			}
			return gs, expired, true
		case isAnomaly(err):
			w.anomaly(fmt.Sprintf("acquire group %v", resources), err)
			return nil, false, false
		case errors.Is(err, fencepub.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
			continue // the grants may have been made: ask again with the same request id
		default:
			return nil, false, false
		}
	}
	return nil, false, false
}

// groupTerm acquires resources as one group, publishes one to four group
// versions under the grants and releases them (authority.ReleaseGroup).
// A fifth of the terms are zombies: they renew nothing and stall past the
// TTL while a rival acquires all or some of the members and publishes,
// then publish. It reports whether it got the grants.
func (w *worker) groupTerm(resources []string) bool {
	gs, expired, ok := w.acquireGroup(resources)
	if !ok {
		return false
	}
	defer w.releaseGroup(gs)
	zombie := w.zombies && !expired && w.rng.Float64() < 0.2
	var sess *authority.Session
	if !zombie && !expired {
		// One lease: renewing one member renews the group. The session is
		// stopped, not closed (Close would release that member alone), and
		// ReleaseGroup seals every member's term.
		sctx, stop := context.WithCancel(context.Background())
		s, err := w.auth.NewSession(sctx, gs[0])
		if err != nil {
			stop()
		} else {
			sess = s
			defer func() { stop(); <-s.Done() }()
		}
	}
	if zombie {
		sub := slices.Clone(resources)
		if w.rng.IntN(2) == 0 {
			// The rival takes all members but one: the zombie's group is
			// refused by those while the one left would accept it.
			i := w.rng.IntN(len(sub))
			sub = slices.Delete(sub, i, i+1)
		}
		wait, ok := w.stall(func(r *worker) { r.groupTerm(sub) })
		defer wait()
		if !ok {
			return true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	w.bound = w.clock.Now()
	ps := make([]*publisher.Publisher, len(gs))
	strict := make([]bool, len(gs))
	for i, g := range gs {
		strict[i] = w.rng.Float64() < 0.3
		p, err := w.pub.Bind(ctx, publisher.GrantTerm(g, strict[i]))
		if err != nil {
			cancel()
			if isAnomaly(err) {
				w.anomaly("bind "+g.Resource, err)
			}
			return true
		}
		ps[i] = p
	}
	cancel()
	for i, n := 0, 1+w.rng.IntN(4); i < n && !w.stopped(); i++ {
		if sess != nil {
			select {
			case <-sess.Lost():
				return true // a worker stops publishing once it knows its lease is gone
			default:
			}
		}
		key, bodies := w.groupOperation(gs)
		outcome, ok := w.publishGroup(ps, gs, strict, key, bodies)
		if !ok {
			return true
		}
		if outcome == Applied && w.rng.Float64() < 0.2 {
			// The same job again: the same key with the same content
			// (duplicate), or with one member changed (conflict).
			if w.rng.IntN(3) == 0 {
				bodies[w.rng.IntN(len(bodies))] = randomBytes(w.rng.Uint64(), 16+w.rng.IntN(1<<10))
			}
			if _, ok := w.publishGroup(ps, gs, strict, key, bodies); !ok {
				return true
			}
		}
		w.sleep(time.Duration(w.rng.IntN(30)) * time.Millisecond)
	}
	return true
}

// releaseGroup ends the group's terms with ReleaseGroup, which seals every
// member's term even when the lease is gone (a zombie's).
func (w *worker) releaseGroup(gs []authority.Grant) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.auth.ReleaseGroup(ctx, gs); err != nil && isAnomaly(err) {
		w.anomaly(fmt.Sprintf("release group of %s", gs[0].Resource), err)
	}
}

// groupOperation returns the key and the members' bodies (in the order of
// gs) of the worker's next group publish. A fifth use one of two keys
// shared by every worker of the same member set (the key names the set),
// with bodies every worker uses for it (a retry of the same job:
// duplicate once applied), or with one member's body changed (conflict);
// the rest are fresh.
func (w *worker) groupOperation(gs []authority.Grant) (key string, bodies [][]byte) {
	bodies = make([][]byte, len(gs))
	if w.rng.Float64() < 0.2 {
		var set strings.Builder
		for _, g := range gs {
			set.WriteString(g.Resource[strings.LastIndexByte(g.Resource, '-')+1:])
		}
		key = fmt.Sprintf("gshared-%s-%d", set.String(), w.rng.IntN(2))
		changed := -1
		if w.rng.Float64() < 0.25 {
			changed = w.rng.IntN(len(gs))
		}
		for i, g := range gs {
			variant := 0
			if i == changed {
				variant = 1
			}
			bodies[i] = sharedBody(g.Resource, key, variant)
		}
		return key, bodies
	}
	for i := range gs {
		bodies[i] = randomBytes(w.rng.Uint64(), 16+w.rng.IntN(4<<10))
	}
	return fmt.Sprintf("%s-%d", w.id, w.n), bodies
}

// publishGroup publishes bodies under key as one group publish with ps
// (bound to gs's terms, strict[i] for member i), logging one publish per
// member from invoke to the group's final outcome; an unknown outcome is
// settled with ResolveGroup first. It returns the outcome and whether the
// term may go on (applied, duplicate or conflict).
func (w *worker) publishGroup(ps []*publisher.Publisher, gs []authority.Grant, strict []bool, key string, bodies [][]byte) (string, bool) {
	w.n++
	gid := fmt.Sprintf("%s/%d", w.id, w.n)
	members := make([]publisher.GroupMember, len(ps))
	ops := make([]PublishOp, len(ps))
	call := w.clock.Now()
	for i, p := range ps {
		sum := sha256.Sum256(bodies[i])
		members[i] = publisher.GroupMember{Publisher: p, Operation: &publisher.Operation{Body: bytes.NewReader(bodies[i])}}
		g := gs[i]
		ops[i] = PublishOp{
			ID: gid + "/" + g.Resource, Client: w.id, Resource: g.Resource, Key: key,
			Digest: hex.EncodeToString(sum[:]), Size: int64(len(bodies[i])), Owner: g.Owner,
			Version: layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: pubhook.NextSeq(p)}, Strict: strict[i],
			Call: call, Group: gid,
		}
		w.out.Invoke(ops[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.wl.PublishTimeout)
	r, err := w.pub.PublishGroup(ctx, key, members)
	cancel()
	reported := groupReported(r, err)
	failed := reported == Unknown || errors.Is(err, fencepub.ErrUnavailable) ||
		reported == Failed && errors.Is(err, context.DeadlineExceeded)
	w.out.Attempt(newAttempt(w.clock, w.id, "publish", call, failed, err))
	if isAnomaly(err) {
		w.anomaly("publish group "+gid, err)
	}
	for i, m := range r.Members {
		if i < len(ops) && m.Attempt != nil && (m.Resource != ops[i].Resource || m.Attempt.Version != ops[i].Version) {
			w.anomaly("publish group "+gid, fmt.Errorf("chaos: member %d took %s of %s, not the next seq %s of %s", i, m.Attempt.Version, m.Resource, ops[i].Version, ops[i].Resource))
		}
	}
	outcome, by := reported, ""
	if reported == Unknown {
		sctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		if rr, rerr := settleGroup(sctx, w.pub, r); rr.Outcome != "" && rr.Outcome != publisher.Unknown {
			r, err, by = rr, rerr, "worker"
			outcome = groupReported(rr, rerr)
			if outcome == Stale {
				outcome = ResolvedNotApplied
			}
		} else if rerr != nil {
			err = rerr
		}
		cancel()
	}
	ret := w.clock.Now()
	for i := range ops {
		op := &ops[i]
		op.Reported, op.Outcome, op.Reason, op.ResolvedBy = reported, outcome, string(r.Reason), by
		op.RequestDigest, op.Revision, op.Result = r.Digest, r.Revision, op.Version
		op.Refused = outcome == Stale && r.Member == op.Resource
		if i < len(r.Members) {
			switch m := r.Members[i]; {
			case outcome == Applied:
				op.Object = m.Object.Key
			case outcome == Duplicate && i == 0:
				// Only the first member, whose op record decided it,
				// carries the version that applied the key.
				op.Result, op.Object = m.Version, m.Object.Key
			}
		}
		if err != nil {
			op.Err = err.Error()
		}
		op.Return, op.Done = ret, true
		w.out.Complete(*op)
	}
	return outcome, outcome == Applied || outcome == Duplicate || outcome == Conflict
}

// groupReported returns the outcome a group publish's result and error
// report: an Outcome, or Failed when nothing was sent.
func groupReported(r publisher.GroupResult, err error) string {
	switch {
	case err == nil && r.Outcome != "":
		return string(r.Outcome) // applied or duplicate
	case errors.Is(err, publisher.ErrStale):
		return Stale
	case errors.Is(err, publisher.ErrConflict):
		return Conflict
	case errors.Is(err, publisher.ErrUnknown):
		return Unknown
	}
	return Failed
}

// settleGroup settles an unknown group publish with ResolveGroup,
// re-trying while etcd does not answer, until ctx ends. The result's
// outcome is Applied, Duplicate or Conflict (the key was applied by
// another attempt: its op record's digest tells which), or Stale (it never
// applies); empty when it could not be settled.
func settleGroup(ctx context.Context, c *publisher.Client, unknown publisher.GroupResult) (publisher.GroupResult, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := c.ResolveGroup(rctx, unknown)
		cancel()
		switch {
		case r.Outcome == publisher.Duplicate, r.Outcome == publisher.Conflict:
			// Resolve answers conflict with the op record's digest: the
			// same digest is a duplicate of another attempt of this group.
			r.Outcome, err = publisher.Duplicate, nil
			if len(r.Members) > 0 && r.Members[0].Digest != unknown.Digest {
				r.Outcome, err = publisher.Conflict, fmt.Errorf("%w: key %q applied with digest %s", publisher.ErrConflict, unknown.IdempotencyKey, r.Members[0].Digest)
			}
			return r, err
		case r.Outcome != "":
			return r, err
		case errors.Is(err, fencepub.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
			if !wait.Sleep(ctx, 200*time.Millisecond) {
				return r, fmt.Errorf("chaos: resolve group %q: %w", unknown.IdempotencyKey, err)
			}
		default:
			return r, err
		}
	}
}

// groupReadLoop reads the group resources of the current window (or the
// one before: a quarter of the time, and when a resource of the current
// one was never granted yet) at one etcd revision with reader.ReadCut
// until stop closes, all of them or two, and logs each cut.
type groupReadLoop struct {
	id    string
	clock Clock
	cfg   reader.Config
	wl    Workload
	rng   *rand.Rand
	rec   *Recorder
	stop  <-chan struct{}
}

func (l *groupReadLoop) run() {
	for sleepStop(l.stop, time.Duration(30+l.rng.IntN(60))*time.Millisecond) {
		n := l.wl.window(l.clock.Now())
		if l.rng.IntN(4) == 0 && n > 0 {
			n--
		}
		drop := -1
		if l.rng.IntN(3) == 0 {
			drop = l.rng.IntN(l.wl.Groups)
		}
		pick := func(n int64) []string {
			resources := l.wl.groupResources(n)
			if drop >= 0 && len(resources) > 2 {
				resources = slices.Delete(resources, drop, drop+1)
			}
			return resources
		}
		if !l.read(pick(n)) && n > 0 && n == l.wl.window(l.clock.Now()) {
			// A resource of the window no group acquired yet: the window
			// before instead.
			l.read(pick(n - 1))
		}
	}
}

// read reads resources at one revision and logs the cut; a cut that failed
// is counted (a resource not granted yet, a server that did not answer) or
// logged as an anomaly. It reports false when a resource was never
// granted.
func (l *groupReadLoop) read(resources []string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := GroupCut{Client: l.id, Call: l.clock.Now()}
	cut, err := reader.ReadCut(ctx, l.cfg, resources...)
	c.Return = l.clock.Now()
	l.rec.Attempt(newAttempt(l.clock, l.id, "read", c.Call, errors.Is(err, fencepub.ErrUnavailable), err))
	switch {
	case errors.Is(err, reader.ErrUnknownResource):
		l.rec.Count(countCutUnknownResource, 1)
		return false
	case err != nil && isAnomaly(err):
		l.rec.Anomaly(Anomaly{Client: l.id, Time: c.Return, What: fmt.Sprintf("read cut of %v", resources), Err: err.Error()})
		return true
	case err != nil:
		l.rec.Count(countCutFailed, 1)
		return true
	}
	c.Revision = cut.Revision
	for _, res := range resources {
		p := cut.Pointers[res]
		c.Pointers = append(c.Pointers, CutPointer{Resource: res, Version: p.Version, Object: p.Object.Key, SHA: p.Object.SHA256})
	}
	l.rec.GroupCut(c)
	return true
}

// Counters of the group cuts not logged: of a resource never granted yet,
// and those that failed otherwise (a server that did not answer).
const (
	countCutUnknownResource = "group_cut_unknown_resource"
	countCutFailed          = "group_cut_failed"
)

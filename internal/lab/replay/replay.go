// Package replay performs the lab model's interleavings against the real
// implementation — authority and publisher on real etcd and MinIO — and
// reports every step whose real outcome or resource state differs from what
// the model expects (`fencepub lab replay`).
//
// The correct protocol (case fencing, variant correct, and case operations)
// must replay without a mismatch. A deliberate defect replays too, where its
// steps have real counterparts (no-fence, rollback-issuer): the
// implementation is built not to have it, so the replay must report a
// mismatch no later than each step where the model finds a violation.
// split-authority's separate mint has no counterpart (the real grant mints).
// Each interleaving runs on a fresh resource. Steps map to real actions:
//
//   - acquire: authority.Acquire with a 2 s lease and no wait; the real
//     generation must equal the model's token minus its issuer (a fresh
//     resource's counter starts at 0 where the model's starts at --issuer).
//   - pause, resume: the client's goroutine does nothing in between; it
//     holds no session, so nothing renews its lease — like a stopped process.
//   - expire: wait, by watching the holder key, until etcd itself expires
//     the lease (no revoke: the server's clock decides).
//   - recover: a fresh Authority value replaces the old one; the authority's
//     state is durable in etcd, so nothing else is needed.
//   - write: a Publisher bound to the client's grant publishes the step's
//     seq with PublishSeq; the model's outcome (applied, duplicate, conflict,
//     stale) must be the real one, and afterwards the pointer must name the
//     model's (writer, seq) and the history hold the model's effect count.
package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/lab"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/publisher"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LeaseTTL is the lease of every replayed grant: etcd's minimum with its
// default timing, so an expire step waits about 2 s.
const LeaseTTL = 2 * time.Second

// Target is the real system to replay against.
type Target struct {
	Namespace layout.Namespace
	Etcd      *clientv3.Client
	Store     objstore.Store
	Logger    *slog.Logger // nil discards
}

// Mismatch is one step whose real result differs from the model's.
type Mismatch struct {
	Interleaving int       `json:"interleaving"` // 1-based
	Step         int       `json:"step"`         // 1-based within the interleaving
	Expected     lab.Event `json:"expected"`
	Got          string    `json:"got"`
}

// Report is the result of replaying one scenario.
type Report struct {
	Case          lab.Case    `json:"case"`
	Variant       lab.Variant `json:"variant"`
	Interleavings int         `json:"interleavings"`
	Steps         int         `json:"steps"`
	Mismatches    []Mismatch  `json:"mismatches"`
}

// OK reports whether every real outcome matched the model.
func (r Report) OK() bool { return len(r.Mismatches) == 0 }

// ErrNotReplayable: the scenario has a step with no real counterpart (a
// mint separate from the grant: split-authority).
var ErrNotReplayable = errors.New("replay: the scenario has steps the real implementation cannot perform")

// Run replays every interleaving of s on t, one fresh resource each, in the
// model's order. It blocks for about LeaseTTL per expire step. It returns the
// report (mismatches are not errors; a defective variant must have some) and
// an error only when the replay could not run: ErrNotReplayable (checked
// before anything is written), or an unexpected failure of a real call.
func Run(ctx context.Context, t Target, s lab.Scenario) (Report, error) {
	res := s.Check()
	for i, h := range res.Histories {
		for j, ev := range h.Events {
			if ev.Action == lab.Mint {
				return Report{}, fmt.Errorf("%w: variant %q, interleaving %d step %d is a %s", ErrNotReplayable, res.Variant, i+1, j+1, ev.Action)
			}
		}
	}
	rep := Report{Case: res.Case, Variant: res.Variant, Interleavings: len(res.Histories), Mismatches: []Mismatch{}}
	return rep, replayHistories(ctx, t, res.Issuer, res.Histories, &rep)
}

// replayHistories performs each history on a fresh resource and appends the
// mismatches to rep.
func replayHistories(ctx context.Context, t Target, issuer int, hs []lab.History, rep *Report) error {
	for i, h := range hs {
		r, err := newRun(t, issuer, i+1)
		if err != nil {
			return err
		}
		for j, ev := range h.Events {
			rep.Steps++
			got, err := r.step(ctx, ev)
			if err != nil {
				return fmt.Errorf("replay: interleaving %d step %d (%s %s): %w", i+1, j+1, ev.Actor, ev.Action, err)
			}
			if got != "" {
				rep.Mismatches = append(rep.Mismatches, Mismatch{Interleaving: i + 1, Step: j + 1, Expected: ev, Got: got})
			}
		}
	}
	return nil
}

// run is the real state of one interleaving.
type run struct {
	t        Target
	issuer   int
	resource string
	owners   map[string]string // model actor → real owner
	grants   map[string]authority.Grant
	auth     *authority.Authority
	pub      *publisher.Client
}

func newRun(t Target, issuer, n int) (*run, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	r := &run{
		t: t, issuer: issuer, resource: fmt.Sprintf("lab-%d-%s", n, tag),
		owners: map[string]string{}, grants: map[string]authority.Grant{},
	}
	if err := r.newAuthority(); err != nil {
		return nil, err
	}
	pub, err := publisher.New(publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(t.Namespace), Etcd: t.Etcd, Store: t.Store}, Logger: t.Logger})
	if err != nil {
		return nil, err
	}
	r.pub = pub
	return r, nil
}

func (r *run) newAuthority() error {
	a, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(r.t.Namespace), Etcd: r.t.Etcd, Store: r.t.Store}, Logger: r.t.Logger})
	r.auth = a
	return err
}

func (r *run) owner(actor string) string {
	if o, ok := r.owners[actor]; ok {
		return o
	}
	o := actor + "-" + strings.TrimPrefix(r.resource, "lab-")
	r.owners[actor] = o
	return o
}

// step performs ev and returns "" when the real result matches, else what
// was observed instead.
func (r *run) step(ctx context.Context, ev lab.Event) (string, error) {
	switch ev.Action {
	case lab.Acquire:
		g, err := r.auth.Acquire(ctx, authority.AcquireRequest{Resource: r.resource, Owner: r.owner(ev.Actor), TTL: LeaseTTL})
		if err != nil {
			return "acquire failed: " + err.Error(), nil
		}
		r.grants[ev.Actor] = g
		if want := uint64(ev.Token - r.issuer); g.Generation != want {
			return fmt.Sprintf("granted generation %d, model token %d - issuer %d = %d", g.Generation, ev.Token, r.issuer, want), nil
		}
	case lab.Pause, lab.Resume:
	case lab.Expire:
		return "", r.awaitExpiry(ctx)
	case lab.Recover:
		return "", r.newAuthority()
	case lab.Write:
		return r.write(ctx, ev)
	default:
		return "", fmt.Errorf("action %q has no real counterpart", ev.Action)
	}
	return "", nil
}

// awaitExpiry blocks until the resource's holder key is gone, watching it
// from the revision of a read that still saw it.
func (r *run) awaitExpiry(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, LeaseTTL+10*time.Second)
	defer cancel()
	key := r.t.Namespace.HolderKey(r.resource)
	g, err := r.t.Etcd.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(g.Kvs) == 0 {
		return nil
	}
	for wr := range r.t.Etcd.Watch(ctx, key, clientv3.WithRev(g.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, e := range wr.Events {
			if e.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return fmt.Errorf("lease of %s did not expire: %w", r.resource, ctx.Err())
}

func (r *run) write(ctx context.Context, ev lab.Event) (string, error) {
	g, ok := r.grants[ev.Actor]
	if !ok {
		return "", fmt.Errorf("%s writes without a grant", ev.Actor)
	}
	p, err := r.pub.Bind(ctx, publisher.GrantTerm(g, false))
	if err != nil {
		return "", err
	}
	key, body := ev.Key, ev.Params
	if key == "" { // the model keeps no record; the real publish needs a key
		key = fmt.Sprintf("%s-seq%d", ev.Actor, ev.Seq)
	}
	if body == "" {
		body = key
	}
	res, err := p.PublishSeq(ctx, uint64(ev.Seq), publisher.Operation{IdempotencyKey: key, Body: strings.NewReader(body)})
	if err != nil && res.Outcome == "" {
		return "", err
	}
	if string(res.Outcome) != string(ev.Outcome) {
		return fmt.Sprintf("outcome %s (reason %q), model %s", res.Outcome, res.Reason, ev.Outcome), nil
	}
	return r.compareResource(ctx, ev.Resource)
}

// compareResource checks the pointer and the number of published versions
// against the model's resource state.
func (r *run) compareResource(ctx context.Context, want lab.Resource) (string, error) {
	ptr, err := r.t.Etcd.Get(ctx, r.t.Namespace.PointerKey(r.resource))
	if err != nil {
		return "", err
	}
	var got layout.Version
	if len(ptr.Kvs) == 1 {
		p, err := layout.DecodePointer(ptr.Kvs[0].Value)
		if err != nil {
			return "", err
		}
		got = p.Version
	}
	var exp layout.Version
	if want.Writer != "" {
		g := r.grants[want.Writer]
		exp = layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: uint64(want.Seq)}
	}
	if got != exp {
		return fmt.Sprintf("pointer %s, model %s's (fence %d, seq %d) = %s", got, want.Writer, want.Fence, want.Seq, exp), nil
	}
	hist, err := r.t.Etcd.Get(ctx, r.t.Namespace.HistoryPrefix(r.resource), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return "", err
	}
	if hist.Count != int64(want.Effects) {
		return fmt.Sprintf("%d published versions, model %d effects", hist.Count, want.Effects), nil
	}
	return "", nil
}

package lab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// ErrInvalid is returned (wrapped) for a model parameter out of range or
// unknown: a variant, a case, an issuer, a client or write count.
var ErrInvalid = errors.New("lab: invalid model parameter")

// MaxIssuer is the largest initial issuer value accepted. It keeps every
// minted fence far from integer overflow.
const MaxIssuer = math.MaxInt / 2

// Variant selects which part of the protocol is deliberately broken
// (protocol source, §Lab).
type Variant string

// The variants. Correct is the protocol of DESIGN invariants 1–3. Each of the
// others removes one piece of it.
const (
	// Correct: the grant mints the fence in the same atomic step, the
	// resource compares (fence, op_seq), and recovery restores the issuer
	// from durable state.
	Correct Variant = "correct"
	// NoFence: the resource applies every write without comparing
	// (fence, op_seq).
	NoFence Variant = "no-fence"
	// SplitAuthority: a grant carries no number. A worker mints from an
	// independent counter after it believes it holds the lease, and mints
	// again after it resumes from a pause.
	SplitAuthority Variant = "split-authority"
	// RollbackIssuer: recovery restores the issuer from an old backup,
	// taken before any grant.
	RollbackIssuer Variant = "rollback-issuer"
	// NoBaseCompare: a dataset publish that reuses its base's files does not
	// compare the pointer to that base (DESIGN invariant 15); only
	// (fence, op_seq) is compared. Case dataset only.
	NoBaseCompare Variant = "no-base-compare"
	// SplitGroup: a group publish moves each member's pointer in its own
	// transaction instead of one transaction for all. Case group only.
	SplitGroup Variant = "split-group"
)

// Variants returns the variants of case fencing, Correct first. Cases
// dataset and group have their own defect variants (see CaseVariants).
func Variants() []Variant {
	return []Variant{Correct, NoFence, SplitAuthority, RollbackIssuer}
}

// ParseVariant returns the variant named s. It returns an error wrapping
// ErrInvalid for any other name.
func ParseVariant(s string) (Variant, error) {
	v := Variant(s)
	if !slices.Contains(Variants(), v) && v != NoBaseCompare && v != SplitGroup {
		return "", fmt.Errorf("%w: unknown variant %q (want correct, no-fence, split-authority, rollback-issuer, no-base-compare or split-group)", ErrInvalid, s)
	}
	return v, nil
}

// Authority is the actor name of the authority's own steps (Expire, Recover).
// Collector and Reader are the actors of GC passes and of group reads.
const (
	Authority = "authority"
	Collector = "gc"
	Reader    = "reader"
)

// Action is the kind of a step.
type Action string

// The actions. Acquire and Mint are authority transitions requested by a
// client, Write is a resource transaction, Expire and Recover are the
// authority's own events, Pause and Resume change only the client, and Base,
// Collect and Read are the pointer reads and GC passes of cases dataset and
// group.
const (
	// Acquire asks the authority for the lease and records a new grant. In
	// every variant except SplitAuthority, the same transition also mints
	// the grant's fence (the issuer plus one). The protocol source's authority refuses
	// or waits while another lease is valid. The model waits: it schedules
	// Acquire only while no lease is valid.
	Acquire Action = "acquire"
	// Mint takes the next number from the issuer outside any grant
	// transaction (SplitAuthority only). The token is bound to the
	// worker's grant only if that grant is still the valid lease.
	Mint Action = "mint"
	// Pause stops the client: the schedule gives it no step until its
	// Resume. Its lease keeps running out.
	Pause Action = "pause"
	// Resume restarts the client, which still believes it holds its lease.
	// In SplitAuthority, if the lease is gone, the worker mints a larger
	// token to "catch up" (DESIGN invariant 2 forbids exactly this), so its
	// next step is a Mint.
	Resume Action = "resume"
	// Expire ends the valid lease, if any. The holder is not told.
	Expire Action = "expire"
	// Recover restarts the authority. Every lease is dropped. The issuer
	// comes from durable state, except in RollbackIssuer, where it is reset
	// to its initial value.
	Recover Action = "recover"
	// Write is one resource transaction carrying the client's current token
	// and the step's op_seq, key and params.
	Write Action = "write"
	// Base is a dataset publisher reading the pointer: the version it names
	// becomes the publisher's base, whose files its next write reuses
	// (DESIGN "Dataset versions").
	Base Action = "base"
	// Collect is one GC pass: it deletes every file of a superseded version
	// that the retained manifest does not name. Files of versions never
	// published are in flight and kept (DESIGN "Dataset versions").
	Collect Action = "gc"
	// Read reads every group member's pointer at one revision.
	Read Action = "read"
)

// Outcome is what a step returned.
type Outcome string

// The outcomes. Granted, Minted and Applied are accepted requests; Stale and
// Conflict are rejected writes; Duplicate returns the original result without
// an effect; Done marks pause, resume, expire, recover, base, gc and read.
const (
	Granted   Outcome = "granted"
	Minted    Outcome = "minted"
	Applied   Outcome = "applied"
	Duplicate Outcome = "duplicate"
	Conflict  Outcome = "conflict"
	Stale     Outcome = "stale"
	Done      Outcome = "done"
)

// Property names a safety property the model checks on every transition
// (see the package doc).
type Property string

// The properties.
const (
	// RevokedGenerationOverwrite: a write was applied under a grant older
	// than one whose write the resource had already committed (DESIGN
	// invariant 1).
	RevokedGenerationOverwrite Property = "revoked_generation_overwrite"
	// UnauthorizedAccept: a write was applied with a token bound to no
	// valid grant (DESIGN invariant 2).
	UnauthorizedAccept Property = "unauthorized_accept"
	// MissingFile: a published manifest names a file that does not exist
	// (DESIGN invariant 14).
	MissingFile Property = "missing_file"
	// TornRead: a reader saw group members from different group publishes.
	TornRead Property = "torn_read"
)

// Step is one event to perform: who does what. A write's token is not part
// of the step. It is whatever the client holds when the step runs.
type Step struct {
	Actor  string `json:"actor"`            // a client name or Authority
	Action Action `json:"action"`           // what happens
	Seq    int    `json:"seq,omitempty"`    // Write: op_seq within the term, from 1
	Key    string `json:"key,omitempty"`    // Write: idempotency key; "" keeps no record
	Params string `json:"params,omitempty"` // Write: stands for the request digest
	// Version names the version a write publishes (cases dataset and group).
	Version string `json:"version,omitempty"`
	// Member is the one group member a write publishes (SplitGroup); ""
	// publishes every member in one transaction.
	Member string `json:"member,omitempty"`
}

// Resource is the resource's committed state: the (fence, op_seq) pair it
// compares, the client whose write set it, and the number of writes applied
// so far (effects). The zero value is the empty resource.
type Resource struct {
	Fence   int    `json:"fence"`
	Seq     int    `json:"seq"`
	Writer  string `json:"writer,omitempty"`
	Effects int    `json:"effects"`
	// Version is the version the pointer names (case dataset), "" before.
	Version string `json:"version,omitempty"`
}

// Event is a step that ran, with the result the model expects from it.
type Event struct {
	Step
	// Token is the fence granted (Acquire), minted (Mint) or carried
	// (Write). It is 0 when the step has none.
	Token int `json:"token,omitempty"`
	// Outcome is what the authority or the resource answered.
	Outcome Outcome `json:"outcome"`
	// Issuer is the last number the authority minted, after the step.
	Issuer int `json:"issuer"`
	// Resource is the resource's state after the step.
	Resource Resource `json:"resource"`
	// Reason says why a write was stale when it was not the (fence, op_seq)
	// compare: "base", the pointer moved off the write's base.
	Reason string `json:"reason,omitempty"`
	// Note says what a base read chose, what a GC pass deleted, or what a
	// group read saw.
	Note string `json:"note,omitempty"`
	// Pointers lists every group member's version after the step (case
	// group), as "member=version" pairs.
	Pointers string `json:"pointers,omitempty"`
}

// token is a fence as the client holds it, with the model's ground truth of
// the grant it belongs to (0: none). The resource sees only fence.
type token struct {
	fence int
	grant int
}

type client struct {
	name   string
	grant  int // ordinal of the client's grant; 0 before it acquired
	token  token
	pauses int
	remint bool // SplitAuthority: mint again before the next write
	next   int  // op_seq of the client's next write
	base   string
	reuse  []string // files of base's manifest, reused by the next dataset write
}

type opRecord struct {
	params string
}

// world is the whole model state: authority, resource and clients.
type world struct {
	variant  Variant
	initial  int // issuer value of the old backup RollbackIssuer restores
	issuer   int // last number minted
	holder   int // index of the client holding the valid lease, or -1
	grants   int // grants made; a grant's ordinal is its position in grant order
	recovers int
	res      Resource
	resGrant int                 // ground truth: newest grant whose write the resource committed
	ops      map[string]opRecord // by idempotency key; nil until the first keyed write
	clients  []client
	data     *datasets // case dataset; nil otherwise
	members  []member  // case group; nil otherwise
}

func newWorld(v Variant, issuer int, names []string) *world {
	w := &world{variant: v, initial: issuer, issuer: issuer, holder: -1}
	for _, n := range names {
		w.clients = append(w.clients, client{name: n, next: 1})
	}
	return w
}

func (w *world) clone() *world {
	c := *w
	c.ops = maps.Clone(w.ops)
	c.clients = slices.Clone(w.clients)
	c.data = w.data.clone()
	c.members = slices.Clone(w.members)
	return &c
}

// appendKey appends to b an encoding of the state that decides future
// transitions and property checks, for clients that each make writes writes.
// Two states with the same key have the same futures, with the same outcomes
// and violations:
//   - Resource.Writer, Resource.Effects and ops are left out: the first two
//     only describe the past, and Explore's writes carry no key.
//   - A client that made all its writes is encoded as finished only: it takes
//     no further step, so its token and grant no longer matter.
//   - Grant ordinals are replaced by their rank: the model only compares
//     them, and a new grant is always the largest. Fences are ranked the
//     same way, since every fence comes from the issuer, the issuer never
//     goes back, and so every future mint is larger than all of them. In
//     RollbackIssuer the issuer does go back, and a restored issuer is
//     compared with exact fences, so they are kept exact.
func (w *world) appendKey(b []byte, writes int) []byte {
	var fb, gb [2 + 2*MaxClients]int
	fences := append(fb[:0], w.issuer, w.res.Fence)
	grants := append(gb[:0], w.grants, w.resGrant)
	for _, c := range w.clients {
		if c.next <= writes {
			fences = append(fences, c.token.fence)
			grants = append(grants, c.grant, c.token.grant)
		}
	}
	exact := w.variant == RollbackIssuer
	slices.Sort(fences)
	slices.Sort(grants)
	fences, grants = slices.Compact(fences), slices.Compact(grants)
	fence := func(v int) int {
		if exact {
			return v
		}
		return rank(fences, v)
	}
	grant := func(v int) int { return rank(grants, v) }

	for _, v := range []int{fence(w.issuer), w.holder, grant(w.grants), w.recovers, fence(w.res.Fence), w.res.Seq, grant(w.resGrant)} {
		b = binary.AppendVarint(b, int64(v))
	}
	for _, c := range w.clients {
		if c.next > writes {
			b = binary.AppendVarint(b, -1)
			continue
		}
		for _, v := range []int{grant(c.grant), fence(c.token.fence), grant(c.token.grant), c.pauses, c.next} {
			b = binary.AppendVarint(b, int64(v))
		}
		b = append(b, flag(c.remint))
	}
	return b
}

// rank returns v's position among the non-zero values of sorted, which holds
// distinct values >= 0 and contains v, counting from 1; 0 (none) stays 0. It
// keeps order and equality.
func rank(sorted []int, v int) int {
	if v == 0 {
		return 0
	}
	i, _ := slices.BinarySearch(sorted, v)
	if sorted[0] != 0 {
		i++
	}
	return i
}

func flag(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (w *world) client(name string) (int, *client) {
	for i := range w.clients {
		if w.clients[i].name == name {
			return i, &w.clients[i]
		}
	}
	panic(fmt.Sprintf("lab: step names unknown actor %q", name))
}

// finding is a property violated by one transition.
type finding struct {
	property Property
	detail   string
}

// apply runs one step as an indivisible transition and returns the event and
// the property it violated, if any.
func (w *world) apply(s Step) (Event, *finding) {
	ev := Event{Step: s, Outcome: Done}
	var f *finding
	switch s.Action {
	case Expire:
		w.holder = -1
	case Recover:
		w.holder = -1
		w.recovers++
		if w.variant == RollbackIssuer {
			w.issuer = w.initial
		}
	case Acquire:
		i, c := w.client(s.Actor)
		if w.holder >= 0 {
			panic("lab: acquire scheduled while a lease is valid")
		}
		w.grants++
		w.holder = i
		c.grant = w.grants
		c.token = token{}
		ev.Outcome = Granted
		if w.variant != SplitAuthority {
			w.issuer++
			c.token = token{fence: w.issuer, grant: c.grant}
			ev.Token = w.issuer
		}
	case Mint:
		i, c := w.client(s.Actor)
		w.issuer++
		c.token = token{fence: w.issuer}
		if w.holder == i {
			c.token.grant = c.grant
		}
		c.remint = false
		ev.Outcome, ev.Token = Minted, w.issuer
	case Pause:
		_, c := w.client(s.Actor)
		c.pauses++
	case Resume:
		i, c := w.client(s.Actor)
		c.remint = w.variant == SplitAuthority && w.holder != i
	case Write:
		_, c := w.client(s.Actor)
		ev.Token = c.token.fence
		if w.members != nil {
			ev.Outcome = w.writeGroup(c, s)
		} else {
			ev.Outcome, ev.Reason, f = w.write(c, s)
		}
		c.next = s.Seq + 1
	case Base:
		_, c := w.client(s.Actor)
		ev.Note = w.readBase(c)
	case Collect:
		ev.Note, f = w.collect()
	case Read:
		ev.Note, f = w.readGroup()
	default:
		panic(fmt.Sprintf("lab: unknown action %q", s.Action))
	}
	ev.Issuer = w.issuer
	ev.Resource = w.res
	ev.Pointers = w.pointers()
	return ev, f
}

// write is the resource transaction: idempotency record, then the
// (fence, op_seq) compare, then, for a dataset write with a base, the
// compare of the pointer to that base, then the effect and the record, all
// at once (DESIGN invariants 4 and 15, and "Publish" step 2). The returned
// reason is "base" for a stale write whose fence compare passed.
func (w *world) write(c *client, s Step) (Outcome, string, *finding) {
	if rec, ok := w.ops[s.Key]; ok {
		if rec.params == s.Params {
			return Duplicate, "", nil
		}
		return Conflict, "", nil
	}
	if s.Version != "" {
		w.data.upload(c, s.Version)
	}
	t := c.token
	newer := t.fence > w.res.Fence || t.fence == w.res.Fence && s.Seq > w.res.Seq
	if w.variant != NoFence && !newer {
		return Stale, "", nil
	}
	if c.base != "" && w.variant != NoBaseCompare && w.res.Version != c.base {
		return Stale, "base", nil
	}
	w.res = Resource{Fence: t.fence, Seq: s.Seq, Writer: c.name, Effects: w.res.Effects + 1, Version: s.Version}
	if s.Key != "" {
		if w.ops == nil {
			w.ops = map[string]opRecord{}
		}
		w.ops[s.Key] = opRecord{params: s.Params}
	}
	if f := w.data.publish(c.name, s.Version); f != nil {
		return Applied, "", f
	}
	switch {
	case t.grant == 0:
		return Applied, "", &finding{UnauthorizedAccept, fmt.Sprintf(
			"%s's token %d is bound to no valid grant, and its write was applied", c.name, t.fence)}
	case t.grant < w.resGrant:
		return Applied, "", &finding{RevokedGenerationOverwrite, fmt.Sprintf(
			"%s's write under grant #%d (token %d) was applied after the resource had committed a write under the newer grant #%d",
			c.name, t.grant, t.fence, w.resGrant)}
	}
	w.resGrant = t.grant
	return Applied, "", nil
}

package publisher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/debuglog"
	"github.com/fencepub/fencepub/internal/errkind"
	"github.com/fencepub/fencepub/internal/fence"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/leader"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors returned (wrapped) by this package; test with errors.Is. Publish
// returns a Result together with ErrStale, ErrConflict or ErrUnknown when the
// publish reached one of those outcomes; a nil error means applied or
// duplicate. Any other error means the publish was not sent to etcd and
// nothing was published (an object may have been written; GC removes it).
var (
	// ErrStale: the transaction refused the version: the pointer or seal is
	// already at or above it, the epoch is not the domain's current one, the
	// grant record of its fence does not name the caller in this epoch,
	// (strict mode, with authority.ErrLeaseLost) the grant's lease is gone, or
	// (contiguous mode) the previous seq is not the pointer. Expected under
	// fencing; Result.Reason says which.
	ErrStale = errors.New("publisher: stale")
	// ErrConflict: the idempotency key was already applied with a different
	// request digest (DESIGN.md invariant 5), or, from Resolve, by another
	// attempt than the one named (invariant 11). Nothing was published by
	// this attempt, and it never will be.
	ErrConflict = errors.New("publisher: idempotency key already used with a different request digest")
	// ErrUnknown: the transaction may have been applied but no answer came
	// before the deadline. Resolve settles it (DESIGN.md invariant 8).
	ErrUnknown = errors.New("publisher: outcome unknown (settle it with Resolve)")
	// ErrBody: reading the caller's body failed; nothing was published.
	ErrBody = errors.New("publisher: reading the body failed")
	// ErrObjectMismatch: a create-only write found an object under the
	// attempt's own key that is not the one the attempt wrote, or a rollback
	// source whose ETag changed. Objects are immutable, so this means another
	// writer broke the key scheme.
	ErrObjectMismatch = errors.New("publisher: object under the key is not ours")
	// ErrNoSuchVersion: Rollback's target version is not in the resource's
	// history (never published, or pruned).
	ErrNoSuchVersion = errors.New("publisher: version not in the resource's history")
	// ErrSourceGone: Rollback's source object no longer exists (collected by
	// GC after its retention).
	ErrSourceGone = errors.New("publisher: rollback source object is gone")
)

// Defaults of Config (DefaultConfig).
const (
	defaultPartSize       = 16 << 20 // bytes
	minPartSize           = 5 << 20  // bytes; S3's minimum for all parts but the last
	defaultRequestTimeout = 5 * time.Second
	defaultResendTimeout  = time.Minute
	defaultMaxTxnOps      = 128
)

// DefaultConfig returns the values New gives Config's tunables when they
// are zero: PartSize 16 MiB, RequestTimeout 5 s, ResendTimeout 1 min,
// MaxTxnOps 128. Env, Logger and Registerer are left zero.
func DefaultConfig() Config {
	return Config{PartSize: defaultPartSize, RequestTimeout: defaultRequestTimeout, ResendTimeout: defaultResendTimeout,
		MaxTxnOps: defaultMaxTxnOps}
}

// Config holds a Client's dependencies and tunables. Zero tunables take the
// defaults each field states; the live clients are required.
type Config struct {
	// Env locates the domain. The Client closes neither client.
	fencepub.Env
	// Logger receives resends and unknown outcomes; nil discards.
	Logger *slog.Logger
	// Registerer receives the metrics (metrics.go); nil leaves them
	// unregistered. Never the global default registry unless passed in.
	Registerer prometheus.Registerer
	// PartSize, in bytes, is for bodies of unknown length: the largest one
	// sent in one PUT from memory, and the multipart part size above it; at
	// least 5 MiB (S3's minimum part size); default 16 MiB. Such a publish
	// holds at most two parts in memory (one filling, one sending). A body of
	// known length (see Operation.Size) up to 5 GiB is streamed in one PUT
	// instead.
	PartSize int64
	// RequestTimeout bounds one etcd request. A publish transaction that gets
	// no answer in time is re-sent, unchanged. Default 5 s.
	RequestTimeout time.Duration
	// ResendTimeout bounds how long Publish keeps re-sending an unanswered
	// transaction when the caller's context has no earlier deadline; then the
	// outcome is unknown. Default 1 min.
	ResendTimeout time.Duration
	// MaxTxnOps is etcd's limit on the operations of one transaction: it
	// must equal the server's --max-txn-ops (CLI key etcd.max_txn_ops).
	// PublishGroup refuses a group that would not fit. Default 128, etcd's.
	MaxTxnOps int
	// now is the clock of the CommittedAt times written into pointers,
	// history entries and op records; default time.Now. Those times are
	// informative: no expiry or retention reads them (GC ages records on
	// its domain clock, DESIGN.md "Ages come from one clock"), so a wrong
	// clock here cannot shorten any record's life. The chaos soak skews it
	// (wallclock.With).
	now func() time.Time
}

// Validate checks c without a network call: Namespace as
// fencepub.NewNamespace checks it, Etcd and Store set, PartSize 0 or at
// least 5 MiB, no negative timeout. Errors: fencepub.ErrInvalid
// naming the field.
func (c Config) Validate() error {
	if _, err := fencepub.NewNamespace(c.Namespace.Prefix, c.Namespace.Domain); err != nil {
		return fmt.Errorf("publisher.Config.Namespace: %w", err)
	}
	if c.PartSize != 0 && c.PartSize < minPartSize {
		return fmt.Errorf("%w: publisher.Config.PartSize %d is below the S3 minimum %d", fencepub.ErrInvalid, c.PartSize, minPartSize)
	}
	return cmp.Or(
		errkind.Nil("publisher.Config.Etcd", c.Etcd == nil),
		errkind.Nil("publisher.Config.Store", c.Store == nil),
		errkind.Negative("publisher.Config.RequestTimeout", c.RequestTimeout),
		errkind.Negative("publisher.Config.ResendTimeout", c.ResendTimeout),
		errkind.Negative("publisher.Config.MaxTxnOps", c.MaxTxnOps),
	)
}

// Client publishes through etcd and the object store. It holds the metrics
// and is meant to live as long as the process; Bind makes a Publisher per
// grant. It is safe for concurrent use.
type Client struct {
	cfg Config
	ns  layout.Namespace
	log *slog.Logger
	kv  clientv3.KV // cfg.Etcd, its round trips logged at debug level
	m   *metrics
}

// New checks cfg (Validate), gives its zero tunables their defaults
// (DefaultConfig) and registers the metrics with cfg.Registerer. It makes
// no network call. Errors: fencepub.ErrInvalid naming the field; a
// registration error (e.g. a second Client on the same registry).
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := DefaultConfig()
	cfg.PartSize = cmp.Or(cfg.PartSize, d.PartSize)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, d.RequestTimeout)
	cfg.ResendTimeout = cmp.Or(cfg.ResendTimeout, d.ResendTimeout)
	cfg.MaxTxnOps = cmp.Or(cfg.MaxTxnOps, d.MaxTxnOps)
	if cfg.now == nil {
		cfg.now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	cfg.Store = debuglog.Store(cfg.Store, log)
	return &Client{cfg: cfg, ns: layout.Namespace(cfg.Namespace), log: log, kv: debuglog.KV(leader.KV(cfg.Etcd), log), m: m}, nil
}

// Term is what a Publisher is bound to: one grant of a resource, as the
// publish transaction checks it (the grant record of its fence must hold
// its epoch and owner, and its epoch must be the domain's current epoch;
// DESIGN.md invariant 2). Build it with GrantTerm, and WithContiguous for
// contiguous mode; the zero Term binds nothing.
type Term struct {
	resource string
	owner    string
	epoch    uint64
	fence    uint64
	// strict adds CreateRevision(holder) == holderRevision to every publish.
	strict         bool
	holderRevision int64
	// ttl is the grant's lease TTL; zero when unknown. In strict mode each
	// send of a publish transaction is bounded by ttl/3 as well as
	// Config.RequestTimeout (DESIGN.md invariant 12).
	ttl time.Duration
	// contiguous requires every publish with seq > 1 to follow seq-1 of
	// the same term exactly.
	contiguous bool
}

// GrantTerm returns the Term of an authority grant; a Grant built from the
// numbers of a grant acquired elsewhere (Resource, Owner, Epoch, Generation)
// binds too. In strict mode (strict; it needs the grant's HolderRevision) a
// publish also fails, stale with reason "lease", once etcd has expired or
// revoked the lease: etcd's timing, not wall-clock revocation. Each send is
// then also bounded by a third of the grant's TTL, leaving time to re-send
// before the lease can expire (DESIGN.md invariant 12).
func GrantTerm(g authority.Grant, strict bool) Term {
	return Term{
		resource: g.Resource, owner: g.Owner, epoch: g.Epoch, fence: g.Generation,
		strict: strict, holderRevision: g.HolderRevision, ttl: g.TTL,
	}
}

// WithContiguous returns t in contiguous mode, for operations where every
// increment must take effect: every publish with seq > 1 must follow seq-1
// of the same term exactly. A publish after a gap is stale with reason
// "gap" and can be retried once the missing seq is published (unknown
// instead when an earlier send of it went unanswered; Resolve settles it).
// A seq that can never be published (sealed by Resolve) stops the term: the
// worker must acquire a new grant.
func (t Term) WithContiguous() Term {
	t.contiguous = true
	return t
}

// prev returns the version a contiguous publish of v must follow, and false
// when v opens its term (seq 1).
func prev(v layout.Version) (layout.Version, bool) {
	if v.Seq <= 1 {
		return layout.Version{}, false
	}
	v.Seq--
	return v, true
}

func (t Term) validate() error {
	if err := layout.ValidateResource(t.resource, false); err != nil {
		return fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	if err := layout.ValidateOwner(t.owner); err != nil {
		return fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	if t.epoch == 0 || t.fence == 0 || t.epoch > layout.MaxNumber || t.fence > layout.MaxNumber {
		return fmt.Errorf("%w: epoch %d and fence %d must be in 1..%d", fencepub.ErrInvalid, t.epoch, t.fence, layout.MaxNumber)
	}
	if t.strict && t.holderRevision <= 0 {
		return fmt.Errorf("%w: strict mode needs the grant's holder revision", fencepub.ErrInvalid)
	}
	return nil
}

// holderCmp is the strict-mode compare (fence.Holder), the one the
// authority renews and releases under.
func (t Term) holderCmp(ns layout.Namespace) clientv3.Cmp {
	return fence.Holder(ns, t.resource, t.holderRevision)
}

// Operation is one logical publish. IdempotencyKey names it across retries
// and terms; the request digest covers Body, ContentType and Metadata
// (digest.go), never version, owner, attempt or time.
type Operation struct {
	// IdempotencyKey: 1–256 bytes of UTF-8, no '/', no control bytes.
	IdempotencyKey string
	// Body is read once, to EOF; nil is an empty body. It is streamed, never
	// held whole in memory: a body of known length (Size, or the length of
	// a *bytes.Reader, *bytes.Buffer, *strings.Reader or regular *os.File)
	// in one PUT holding none of it, any other body in parts of
	// Config.PartSize (two parts in memory at most).
	Body io.Reader
	// Size is Body's exact length in bytes when the caller knows it (an
	// HTTP request's Content-Length, say); 0 means unknown. A body that
	// ends before Size or goes on after it fails with ErrBody and is not
	// published (an object written for it is an orphan for GC).
	Size int64
	// ContentType defaults to "application/octet-stream".
	ContentType string
	// Metadata is stored as the object's user metadata. Keys: 1–64 bytes of
	// lowercase letters, digits and '-', not starting with "fencepub-";
	// values: 1 or more bytes of printable ASCII without leading or trailing
	// spaces; 2 KiB in all (S3's limit).
	Metadata map[string]string
}

// Outcome is how a publish ended (DESIGN.md invariant 8).
type Outcome string

// Outcomes.
const (
	// Applied: this publish moved the pointer to its version (also reported
	// for a re-sent transaction whose first send was applied).
	Applied Outcome = "applied"
	// Duplicate: the idempotency key was already applied with the same
	// digest; Result carries the original version and object; the pointer
	// did not move.
	Duplicate Outcome = "duplicate"
	// Conflict: the key was applied with a different digest.
	Conflict Outcome = "conflict"
	// Stale: refused by the fence; Reason says why.
	Stale Outcome = "stale"
	// Unknown: no answer before the deadline; Resolve settles it.
	Unknown Outcome = "unknown"
)

// Reason explains a Stale outcome; it is empty for every other outcome.
type Reason string

// reasonNone is the Reason of every outcome but Stale.
const reasonNone Reason = ""

// Reasons, in the order the transaction's Else branch is classified.
const (
	ReasonLease   Reason = "lease"   // strict mode: the grant's lease is gone
	ReasonPointer Reason = "pointer" // the pointer is at or above the version
	ReasonSeal    Reason = "seal"    // the seal is at or above the version
	ReasonEpoch   Reason = "epoch"   // the version's epoch is not current
	ReasonGrant   Reason = "grant"   // no grant record of the fence names the owner in this epoch
	ReasonGap     Reason = "gap"     // contiguous mode: seq-1 of the term is not the pointer
)

// Attempt is what one call wrote: its version and object. When the outcome
// is not applied the object is an orphan, which GC removes.
type Attempt struct {
	Version fencepub.Version `json:"version"`
	Object  fencepub.Object  `json:"object"`
}

// Result describes how a publish, rollback or resolve ended.
type Result struct {
	Outcome        Outcome `json:"outcome"`
	Reason         Reason  `json:"reason"`
	Resource       string  `json:"resource"`
	IdempotencyKey string  `json:"idempotency_key"`
	// Digest is the request digest, hex sha256 (digest.go); for Resolve, the
	// op record's when one exists.
	Digest string `json:"digest,omitempty"`
	// Version and Object are the result: this call's for applied, stale,
	// conflict and unknown; the original publish's for duplicate. For
	// Resolve, the op record's when one exists (the winner's for conflict).
	Version fencepub.Version `json:"version"`
	Object  fencepub.Object  `json:"object"`
	// Attempt is what this call wrote (equal to Version/Object unless
	// duplicate). Absent for Resolve.
	Attempt *Attempt `json:"attempt,omitempty"`
	// Pointer is the resource's pointer as the deciding transaction saw it
	// (for applied: the pointer it wrote). Nil when unknown.
	Pointer *fencepub.Pointer `json:"pointer,omitempty"`
	// Revision is the etcd revision of the deciding transaction.
	Revision int64 `json:"revision,omitempty"`
	// Attempts counts transaction sends; more than 1 means re-sends after
	// transport errors.
	Attempts int `json:"attempts"`
}

// Publisher publishes successive versions of one resource under one Term,
// assigning seq 1, 2, ... from above the durable state. Publishes of one
// Publisher are meant to be sequential: concurrent calls are safe but get
// seqs in call order, and one whose transaction arrives after a higher seq
// is stale ("newer state wins"). Pipeline overlaps the object writes of
// successive publishes while keeping their transactions in seq order.
type Publisher struct {
	c    *Client
	term Term

	mu   sync.Mutex
	next uint64 // next seq to assign
}

// Bind returns a Publisher for t. In one etcd transaction it creates the
// resource's pointer and seal with zero versions if both are absent, or reads
// them; the first seq is one above the highest seq of t's (epoch, fence) in
// either, so a Publisher rebuilt for a grant it got back through a retried
// request id never reuses a seq (DESIGN.md "Publish" step 4). Errors:
// fencepub.ErrInvalid, fencepub.ErrUnavailable, fencepub.ErrNotInitialized, a
// corrupt pointer or seal (fencepub.ErrCorruptRecord).
func (c *Client) Bind(ctx context.Context, t Term) (*Publisher, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	ctx = debuglog.With(ctx, c.log, "resource", t.resource, "fence", t.fence)
	ptr, seal, err := c.initResource(ctx, t.resource)
	if err != nil {
		return nil, err
	}
	next := uint64(1)
	for _, v := range []layout.Version{ptr.Version, seal} {
		if v.Epoch == t.epoch && v.Fence == t.fence && v.Seq >= next {
			next = v.Seq + 1
		}
	}
	return &Publisher{c: c, term: t, next: next}, nil
}

// nextSeq returns the seq the next Publish will use (fencepub.MaxNumber
// again once the term's seq space is closed; see take).
func (p *Publisher) nextSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return min(p.next, layout.MaxNumber)
}

// claim is a seq a publish took (take): its version, and what giveBack
// needs to return it.
type claim struct {
	v layout.Version
	// prev and after are the Publisher's next seq before and after the take.
	prev, after uint64
}

// take reserves seq (0: the next one) and moves next above it. A term
// whose seq space is closed — a seal at its last seq (`resource delete`
// of a live holder) or a pointer there — takes the last seq again: the
// transaction refuses that version as stale (reason seal or pointer)
// after checking the idempotency key, so a retried publish is still told
// duplicate.
func (p *Publisher) take(seq uint64) claim {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq == 0 {
		seq = min(p.next, layout.MaxNumber)
	}
	c := claim{v: layout.Version{Epoch: p.term.epoch, Fence: p.term.fence, Seq: seq}, prev: p.next}
	p.next = max(p.next, seq+1)
	c.after = p.next
	return c
}

// giveBack returns c's seq, taken for a publish that sent nothing that can
// apply (its object write failed, or its transaction was never sent or
// definitely not applied: notApplied), when no later take moved next since:
// next goes back to what it was before c, so the next Publish uses that seq
// and a contiguous term does not see a gap that no publish made. Claims
// taken one after another are given back in the reverse order. An object
// already written under c (a body longer than its Size, a copy whose
// completion answer was lost) stays an orphan that can never be published:
// its key differs from the next attempt's, and GC collects it once the
// pointer passes it.
func (p *Publisher) giveBack(c claim) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == c.after {
		p.next = c.prev
	}
}

// Publish writes op's body as a new immutable object and publishes it with
// the next seq in one etcd transaction (DESIGN.md "Publish, in one round trip
// to etcd"; the package doc, "What Publish gives back"). It blocks until the
// outcome is known or ctx ends, re-sending an unanswered transaction
// unchanged (within Config.ResendTimeout when ctx has no deadline). It
// returns the Result and nil for applied and duplicate; the Result and
// ErrStale, ErrConflict or ErrUnknown for those outcomes; otherwise nothing
// was published: fencepub.ErrInvalid, ErrBody, ErrObjectMismatch,
// ErrUploadAborted, fencepub.ErrUnavailable, fencepub.ErrCorruptRecord or
// fencepub.ErrNotInitialized.
func (p *Publisher) Publish(ctx context.Context, op Operation) (Result, error) {
	return p.publish(ctx, 0, op)
}

// PublishSeq is Publish with an explicit seq, 1..fencepub.MaxNumber (the
// CLI's --seq). Later Publish calls continue above it, unless nothing that
// can apply was sent (as Publish gives its seq back). A seq at or below one
// already published or sealed is stale. Errors: as Publish;
// fencepub.ErrInvalid for seq 0 or above fencepub.MaxNumber (bad input, not
// exhaustion).
func (p *Publisher) PublishSeq(ctx context.Context, seq uint64, op Operation) (Result, error) {
	if seq == 0 || seq > layout.MaxNumber {
		p.c.m.failure("validate")
		return Result{}, fmt.Errorf("%w: seq %d must be in 1..%d", fencepub.ErrInvalid, seq, layout.MaxNumber)
	}
	return p.publish(ctx, seq, op)
}

// publish publishes op at seq (0: the next one). The seq goes back to the
// Publisher when nothing that can apply was sent (giveBack).
func (p *Publisher) publish(ctx context.Context, seq uint64, op Operation) (Result, error) {
	op, err := p.check(op)
	if err != nil {
		return Result{}, err
	}
	c := p.take(seq)
	w, err := p.write(ctx, c.v, op)
	if err != nil {
		p.giveBack(c)
		return Result{}, err
	}
	return p.send(p.logContext(ctx, w), c, p.prepare(w))
}

// send commits pr, the transaction of claim c, and gives c back when the
// answer is that nothing applied and nothing can (notApplied).
func (p *Publisher) send(ctx context.Context, c claim, pr *prepared) (Result, error) {
	res, err := p.c.commit(ctx, pr)
	if notApplied(res, err) {
		p.giveBack(c)
	}
	return res, err
}

// check normalizes op (normalize), counting a refusal in the metrics.
func (p *Publisher) check(op Operation) (Operation, error) {
	op, err := normalize(op)
	if err != nil {
		p.c.m.failure("validate")
	}
	return op, err
}

// written is an attempt whose object is stored: what its transaction
// needs.
type written struct {
	v      layout.Version
	op     Operation
	obj    layout.Object
	digest string // request digest
}

// write stores op's body (op normalized) as the object of a fresh attempt
// at v. Errors: writeObject's; nothing was published.
func (p *Publisher) write(ctx context.Context, v layout.Version, op Operation) (written, error) {
	ctx = debuglog.With(ctx, p.c.log, "resource", p.term.resource, "version", v.String(), "key", op.IdempotencyKey)
	key := p.c.ns.ObjectKey(p.term.resource, v, layout.NewNonce())
	start := time.Now()
	obj, bodySHA, err := p.c.writeObject(ctx, key, op.Body, bodySize(op.Body, op.Size), op.ContentType, op.Metadata)
	if err != nil {
		p.c.m.failure("object")
		return written{}, err
	}
	p.c.m.objectWritten(time.Since(start), obj.Size)
	return written{v: v, op: op, obj: obj, digest: requestDigest(bodySHA, op.ContentType, op.Metadata)}, nil
}

// logContext returns ctx carrying w's resource, version and idempotency key
// for the debug records of its round trips (internal/debuglog).
func (p *Publisher) logContext(ctx context.Context, w written) context.Context {
	return debuglog.With(ctx, p.c.log, "resource", p.term.resource, "version", w.v.String(), "key", w.op.IdempotencyKey)
}

// prepare builds w's transaction, stamped now (Client.prepare).
func (p *Publisher) prepare(w written) *prepared {
	return p.c.prepare(p.term, w.v, w.op.IdempotencyKey, w.digest, w.obj, w.op.ContentType)
}

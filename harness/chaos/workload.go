package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fencepub/fencepub/internal/pubhook"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/wait"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Workload shapes a run's operations. Resources rotate: during each Window
// the workers and readers use Resources fresh resources, so every resource's
// history stays small enough for the linearizability check to decide. The
// zero value takes the defaults.
type Workload struct {
	// Window is how long a set of resources is in use. Default 8 s.
	Window time.Duration `json:"window"`
	// Resources is the number of resources in use per window. Default 6.
	Resources int `json:"resources"`
	// Datasets is the number of dataset resources in use per window, which
	// only dataset workers publish to. Default 2.
	Datasets int `json:"datasets"`
	// Groups is the number of group resources in use per window, which
	// only group workers publish to, two or three at a time as one group.
	// Default 3.
	Groups int `json:"groups,omitempty"`
	// TTL is the lease TTL of every grant (whole seconds, at least 2 s).
	// Default 2 s.
	TTL time.Duration `json:"ttl"`
	// PublishTimeout is a publish's deadline, for its object write and then
	// its transaction: when etcd has not answered by then the outcome is
	// unknown and Resolve settles it. Default 10 s: one MinIO node stall
	// (storeStall) for the write and txnBudget for the transaction.
	PublishTimeout time.Duration `json:"publish_timeout"`
	// AttemptTimeout bounds one etcd request of the publisher (its
	// Config.RequestTimeout). Default 700 ms.
	AttemptTimeout time.Duration `json:"attempt_timeout"`
	// Multipart is the share of fresh publishes whose body is uploaded in
	// several parts (above partSize). Default 0.003.
	Multipart float64 `json:"multipart,omitempty"`
}

func (w Workload) withDefaults() Workload {
	if w.Window == 0 {
		w.Window = 8 * time.Second
	}
	if w.Resources == 0 {
		w.Resources = 6
	}
	if w.Datasets == 0 {
		w.Datasets = 2
	}
	if w.Groups == 0 {
		w.Groups = 3
	}
	if w.TTL == 0 {
		w.TTL = 2 * time.Second
	}
	if w.PublishTimeout == 0 {
		w.PublishTimeout = storeStall + txnBudget
	}
	if w.AttemptTimeout == 0 {
		w.AttemptTimeout = 700 * time.Millisecond
	}
	if w.Multipart == 0 {
		w.Multipart = 0.003
	}
	return w
}

// storeStall is what one MinIO node stall costs a write, through any node:
// a distributed MinIO holds a write while a peer is stopped, for the whole
// stop (it gives up on a stopped peer only after ~15 s), so a write begun
// as MinIOPauseNode strikes waits its longest hold (maxNodePause) and the
// stopped node's first answer after it. Measured on the multi-node topology,
// 2 cores at load 24: 4.0-4.4 s for a 4 s stop
// (TestPublishThroughPausedMinIONode).
const storeStall = maxNodePause + time.Second

// txnBudget is what a publish transaction may need from etcd: a raft leader
// stalled under it leaves etcd without a leader for an election (etcd's 1 s
// election timeout, up to ~2 s on 2 loaded cores), and after it the
// round-robin balancer may hand one of the next sends, AttemptTimeout each,
// to the stalled member again.
const txnBudget = 5 * time.Second

// acquireTimeout is the deadline of one Acquire of a worker: the wait for
// the holder's lease to end (up to 2×TTL), one etcd request lost on a
// stalled member (the authority's 2 s RequestTimeout) and one MinIO node
// stall (storeStall: an acquire writes a grant marker).
func (w Workload) acquireTimeout() time.Duration { return 2*w.TTL + 2*time.Second + storeStall }

// window returns the window of run time t (ns).
func (w Workload) window(t int64) int64 { return t / int64(w.Window) }

// resource names resource i of window n.
func resource(n int64, i int) string { return fmt.Sprintf("r%05d-%d", n, i) }

// pick returns a random resource of the window of run time t. Resource 0
// of each window is hot (a quarter of the picks, besides its share), so
// grants contend there: workers wait for each other's leases, paused and
// stalled workers come back to find a newer fence published, GC races with
// publishers.
func (w Workload) pick(t int64, rng *rand.Rand) string {
	if rng.Float64() < 0.25 {
		return resource(w.window(t), 0)
	}
	return resource(w.window(t), rng.IntN(w.Resources))
}

// datasetResource names dataset resource i of window n.
func datasetResource(n int64, i int) string { return fmt.Sprintf("d%05d-%d", n, i) }

// pickDataset returns a random dataset resource of the window of run time
// t.
func (w Workload) pickDataset(t int64, rng *rand.Rand) string {
	return datasetResource(w.window(t), rng.IntN(w.Datasets))
}

// groupResource names group resource i of window n.
func groupResource(n int64, i int) string { return fmt.Sprintf("g%05d-%d", n, i) }

// groupResources returns the group resources of window n, in name order.
func (w Workload) groupResources(n int64) []string {
	out := make([]string, w.Groups)
	for i := range out {
		out[i] = groupResource(n, i)
	}
	return out
}

// resources returns the resources of windows from..to, dataset and group
// resources too.
func (w Workload) resources(from, to int64) []string {
	var out []string
	for n := max(from, 0); n <= to; n++ {
		for i := range w.Resources {
			out = append(out, resource(n, i))
		}
		for i := range w.Datasets {
			out = append(out, datasetResource(n, i))
		}
		out = append(out, w.groupResources(n)...)
	}
	return out
}

// partSize is the publisher's part size: bodies above it are uploaded in
// several parts. It is S3's minimum part size, the smallest
// publisher.Config.PartSize.
const partSize = 5 << 20

// operation returns the idempotency key and body of a worker's next publish
// on res. Most are fresh operations; some reuse one of a few keys shared by
// every worker of the resource, with the body every worker uses for it (a
// retry of the same operation in another term: duplicate once applied) or
// another body (conflict once applied). A share multipart of the fresh ones
// is larger than partSize.
func operation(res, client string, n int, rng *rand.Rand, multipart float64) (key string, body []byte) {
	switch u := rng.Float64(); {
	case u < 0.2:
		key = fmt.Sprintf("shared-%d", rng.IntN(3))
		return key, sharedBody(res, key, 0)
	case u < 0.26:
		key = fmt.Sprintf("shared-%d", rng.IntN(3))
		return key, sharedBody(res, key, 1)
	}
	var size int
	switch u := rng.Float64(); {
	case u < multipart:
		size = partSize + 1 + rng.IntN(64<<10) // multipart
	case u < multipart+0.027:
		size = 64<<10 + rng.IntN(448<<10)
	default:
		size = 16 + rng.IntN(8<<10)
	}
	return fmt.Sprintf("%s-%d", client, n), randomBytes(rng.Uint64(), size)
}

// sharedBody is the body of shared key on res in the given variant: the same
// bytes in every process.
func sharedBody(res, key string, variant int) []byte {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d", res, key, variant)))
	return randomBytes(binary.LittleEndian.Uint64(sum[:8]), 100+int(sum[8])*8)
}

func randomBytes(seed uint64, n int) []byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(s).Read(b) // never fails
	return b
}

// isAnomaly reports errors that no fault can explain: they mean a broken
// invariant or a broken harness.
func isAnomaly(err error) bool {
	for _, target := range []error{
		authority.ErrRolledBack, fencepub.ErrCorruptState, authority.ErrForeignDeployment,
		authority.ErrRequestConflict, authority.ErrInvalidGrant,
		publisher.ErrObjectMismatch, fencepub.ErrInvalid, fencepub.ErrNotInitialized,
		layout.ErrCorruptRecord, layout.ErrInvalidName,
		reader.ErrObjectChanged, reader.ErrDigestMismatch,
		authority.ErrForeignDeployment, gc.ErrNoOwnership, fencepub.ErrCorruptState, fencepub.ErrInvalid,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// worker publishes to the resources of the current window, one term (grant)
// at a time, until stop closes. It runs in the harness process (goroutine)
// and in worker processes.
type worker struct {
	id    string
	clock Clock
	epoch func() uint64 // the domain's current epoch (forged tokens carry it)
	auth  *authority.Authority
	pub   *publisher.Client
	wl    Workload
	rng   *rand.Rand
	out   sink
	stop  <-chan struct{}
	// zombies: some terms skip renewals and stall past the TTL before
	// publishing (a paused worker inside the harness process), while a
	// rival worker waits for the lease and publishes under the next fence:
	// the protocol source's 41/42/41 timeline (§Timeline).
	zombies bool
	rival   *worker
	// datasets: the worker publishes dataset versions to the dataset
	// resources (publishDataset), reading the current manifest through
	// rcfg to change a few files of it.
	datasets bool
	rcfg     reader.Config
	// beforeOpen, when set, is called each time the publisher opens a file
	// of a dataset publish (after it read the base): a test moves the
	// pointer and runs GC there.
	beforeOpen func()
	n          int   // publishes so far
	bound      int64 // when the current Bind began (Anomaly.Since)
}

func (w *worker) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// sleep sleeps d unless stop closes first; it reports whether to go on.
func (w *worker) sleep(d time.Duration) bool { return sleepStop(w.stop, d) }

// sleepStop sleeps d unless stop closes first; it reports whether it slept
// the whole time.
func sleepStop(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

func (w *worker) anomaly(what string, err error) {
	w.out.Anomaly(Anomaly{
		Client: w.id, Time: w.clock.Now(), What: what, Err: err.Error(),
		AfterRestore: errors.Is(err, fencepub.ErrNotInitialized), Since: w.bound,
	})
}

// run runs terms until stop closes.
func (w *worker) run() {
	for !w.stopped() {
		res := w.wl.pick(w.clock.Now(), w.rng)
		if w.datasets {
			res = w.wl.pickDataset(w.clock.Now(), w.rng)
		}
		if !w.term(res) {
			w.sleep(time.Duration(50+w.rng.IntN(200)) * time.Millisecond)
		}
	}
}

// acquire gets a grant on res, retrying with the same request id while the
// answer is unknown (the grant may have been made). expired is true for a
// grant the retried request got back after its lease ended.
func (w *worker) acquire(res string) (g authority.Grant, expired, ok bool) {
	req := authority.AcquireRequest{
		Resource: res, Owner: w.id + "-" + authority.NewID()[:8], RequestID: authority.NewID(),
		TTL: w.wl.TTL, Wait: true,
	}
	for attempt := 0; attempt < 4 && !w.stopped(); attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), w.wl.acquireTimeout())
		call := w.clock.Now()
		g, err := w.auth.Acquire(ctx, req)
		cancel()
		w.out.Attempt(newAttempt(w.clock, w.id, "acquire", call, errors.Is(err, fencepub.ErrUnavailable), err))
		switch {
		case err == nil, errors.Is(err, authority.ErrExpired):
			expired = err != nil
			w.out.Grant(GrantEvent{
				Client: w.id, Time: w.clock.Now(), Resource: g.Resource, Owner: g.Owner, RequestID: g.RequestID,
				Epoch: g.Epoch, Fence: g.Generation, Expired: expired,
			})
			return g, expired, true
		case isAnomaly(err):
			w.anomaly("acquire "+res, err)
			return g, false, false
		case errors.Is(err, fencepub.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
			continue // the grant may have been made: ask again with the same request id
		default:
			return g, false, false // lease lost while confirming, ...
		}
	}
	return authority.Grant{}, false, false
}

// stall makes w a zombie: it sleeps past its lease's TTL while its rival
// (a copy of w without zombies, made once) runs rivalTerm in another
// goroutine. It returns wait, which the term must call before it ends (it
// waits for the rival), and false when the run stopped during the sleep.
func (w *worker) stall(rivalTerm func(r *worker)) (wait func(), ok bool) {
	if w.rival == nil {
		r := *w
		r.id, r.rng, r.zombies, r.n, r.rival = w.id+"r", rand.New(rand.NewPCG(w.rng.Uint64(), 7)), false, 0, nil
		w.rival = &r
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rivalTerm(w.rival)
	}()
	return func() { <-done }, w.sleep(w.wl.TTL + time.Duration(1000+w.rng.IntN(1500))*time.Millisecond)
}

// term acquires res, publishes one to four versions under the grant and
// releases it. It reports whether it got a grant.
func (w *worker) term(res string) bool {
	g, expired, ok := w.acquire(res)
	if !ok {
		return false
	}
	zombie := w.zombies && !expired && w.rng.Float64() < 0.2
	var sess *authority.Session
	if !zombie && !expired {
		if s, err := w.auth.NewSession(context.Background(), g); err == nil {
			sess = s
			defer func() { _ = sess.Close() }()
		}
	}
	if zombie {
		wait, ok := w.stall(func(r *worker) { r.term(res) })
		defer wait()
		if !ok {
			return true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	w.bound = w.clock.Now()
	strict := w.rng.Float64() < 0.3
	p, err := w.pub.Bind(ctx, publisher.GrantTerm(g, strict))
	cancel()
	if err != nil {
		if isAnomaly(err) {
			w.anomaly("bind "+res, err)
		}
		return true
	}
	for i, n := 0, 1+w.rng.IntN(4); i < n && !w.stopped(); i++ {
		if sess != nil {
			select {
			case <-sess.Lost():
				return true // a worker stops publishing once it knows its lease is gone
			default:
			}
		}
		if w.datasets {
			if !w.publishDataset(p, g, strict) {
				return true
			}
		} else if key, body := operation(res, w.id, w.n, w.rng, w.wl.Multipart); !w.publish(p, g, strict, pubhook.NextSeq(p), key, body, false) {
			return true
		}
		w.sleep(time.Duration(w.rng.IntN(30)) * time.Millisecond)
	}
	return true
}

// publish publishes body under key at seq with p (bound to g's term,
// strict if strict), logging the operation from
// invoke to its final outcome; an unknown outcome is settled with Resolve
// before it is logged. It reports whether the term may go on (the publish
// was applied, a duplicate or a conflict).
func (w *worker) publish(p *publisher.Publisher, g authority.Grant, strict bool, seq uint64, key string, body []byte, forged bool) bool {
	w.n++
	sum := sha256.Sum256(body)
	pop := publisher.Operation{IdempotencyKey: key, Body: bytes.NewReader(body)}
	rd, err := pubhook.RequestDigest(context.Background(), pop)
	if err != nil {
		w.anomaly("request digest of "+key, err)
	}
	pop.Body = bytes.NewReader(body)
	op := PublishOp{
		ID: fmt.Sprintf("%s/%d", w.id, w.n), Client: w.id, Resource: g.Resource, Key: key,
		Digest: hex.EncodeToString(sum[:]), RequestDigest: rd, Size: int64(len(body)), Owner: g.Owner,
		Version: layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: seq}, Strict: strict, Forged: forged,
		Call: w.clock.Now(),
	}
	w.out.Invoke(op)
	ctx, cancel := context.WithTimeout(context.Background(), w.wl.PublishTimeout)
	r, err := p.PublishSeq(ctx, seq, pop)
	cancel()
	reported(&op, r, err)
	return w.complete(&op, err)
}

// complete logs the end of publish op, whose call returned err (op's
// Reported already filled by reported): the attempt, an anomaly, and the
// final outcome once an unknown one is settled with Resolve. It reports
// whether the term may go on (applied, duplicate or conflict).
func (w *worker) complete(op *PublishOp, err error) bool {
	// A write that ran out of the deadline failed as surely as a
	// transaction that did: the store did not serve it in time.
	failed := op.Reported == Unknown || errors.Is(err, fencepub.ErrUnavailable) ||
		op.Reported == Failed && errors.Is(err, context.DeadlineExceeded)
	w.out.Attempt(newAttempt(w.clock, w.id, "publish", op.Call, failed, err))
	if isAnomaly(err) {
		w.anomaly("publish "+op.ID, err)
	}
	if op.Reported == Unknown {
		sctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		if err := settle(sctx, w.pub, op, "worker"); err != nil {
			op.Err = err.Error()
		}
		cancel()
	}
	op.Return, op.Done = w.clock.Now(), true
	w.out.Complete(*op)
	return op.Outcome == Applied || op.Outcome == Duplicate || op.Outcome == Conflict
}

// reported fills op's outcome from what Publish returned.
func reported(op *PublishOp, r publisher.Result, err error) {
	switch {
	case err == nil:
		op.Reported = string(r.Outcome) // applied or duplicate
	case errors.Is(err, publisher.ErrStale):
		op.Reported = Stale
	case errors.Is(err, publisher.ErrConflict):
		op.Reported = Conflict
	case errors.Is(err, publisher.ErrUnknown):
		op.Reported = Unknown
	default:
		op.Reported = Failed // not sent: nothing was published
	}
	op.Outcome, op.Reason, op.Result, op.Object = op.Reported, string(r.Reason), r.Version, r.Object.Key
	if err != nil {
		op.Err = err.Error()
	}
}

// settleTimeout bounds the settling of one unknown publish (settle). A
// restore or a replacement keeps every client off etcd until Recover and
// the republish of every resource are done, which takes minutes once a run
// has hundreds of resources (the republish alone: ~130 s for 393 on 2
// loaded cores); a Resolve that gives up earlier leaves a publish unsettled
// for a reason of the harness's own.
const settleTimeout = 5 * time.Minute

// settle turns op's unknown outcome into a definite one with Resolve
// (DESIGN.md invariant 8), re-trying while etcd does not answer, until ctx
// ends. Applied: the op record holds op's object. Duplicate or Conflict: the
// key was applied by another attempt, with the same body or another one.
// ResolvedNotApplied: Resolve found no op record and the seal is now at or
// above the version, or the domain has moved to a newer epoch, so it never
// applies. A forged publish whose version Resolve refuses to seal because
// its fence was never granted (ErrInvalid) could never apply either: it is
// closed as Stale. by names who settled it.
// Errors: Resolve's, when it is not a transient one, or ctx's.
func settle(ctx context.Context, c *publisher.Client, op *PublishOp, by string) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := c.Resolve(rctx, op.Resource, op.Key, op.Version, publisher.AttemptID{Digest: op.RequestDigest, ObjectKey: op.Object})
		cancel()
		switch {
		case err == nil && r.Outcome == publisher.Applied:
			op.Outcome, op.Result, op.Object = Applied, r.Version, r.Object.Key
		case err == nil && r.Outcome == publisher.Duplicate, errors.Is(err, publisher.ErrConflict):
			op.Outcome, op.Result, op.Object = Duplicate, r.Version, r.Object.Key
			// The op record holds the request digest; its object may be
			// named by key alone (no sha256) once its history entry is gone.
			if r.Digest != op.RequestDigest {
				op.Outcome = Conflict
			}
		case errors.Is(err, publisher.ErrStale):
			op.Outcome, op.Reason, op.Result, op.Object = ResolvedNotApplied, string(r.Reason), op.Version, ""
		case op.Forged && errors.Is(err, fencepub.ErrInvalid):
			op.Outcome, op.Reason, op.Result, op.Object = Stale, "never granted", op.Version, ""
		case err == nil:
			return fmt.Errorf("chaos: Resolve of %s returned outcome %q", op.ID, r.Outcome)
		case errors.Is(err, fencepub.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
			if !wait.Sleep(ctx, 200*time.Millisecond) {
				return fmt.Errorf("chaos: resolve %s: %w", op.ID, err)
			}
			continue
		default:
			return err
		}
		op.ResolvedBy = by
		return nil
	}
}

// forge publishes with tokens the authority never granted for the resource:
// a made-up fence and owner, or the fence and owner of a real grant of
// another resource (DESIGN.md invariant 2). Every such publish must be
// stale. recent returns recent real grants.
func (w *worker) forge(recent func() []GrantEvent) {
	for w.sleep(time.Duration(300+w.rng.IntN(600)) * time.Millisecond) {
		res := w.wl.pick(w.clock.Now(), w.rng)
		forged := authority.Grant{Resource: res, Owner: "forger-" + authority.NewID()[:8], Epoch: w.epoch(), Generation: uint64(1 + w.rng.IntN(3))}
		if w.rng.IntN(2) == 0 {
			for _, g := range recent() {
				if g.Resource != res {
					forged.Owner, forged.Generation = g.Owner, g.Fence
					break
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w.bound = w.clock.Now()
		p, err := w.pub.Bind(ctx, publisher.GrantTerm(forged, false))
		cancel()
		if err != nil {
			if isAnomaly(err) {
				w.anomaly("bind forged "+res, err)
			}
			continue
		}
		key, body := operation(res, w.id, w.n, w.rng, w.wl.Multipart)
		w.publish(p, forged, false, uint64(1+w.rng.IntN(3)), key, body, true)
	}
}

// readLoop reads random resources of the current window through
// reader.Open until stop closes, verifying the bytes, and logs each read.
type readLoop struct {
	id    string
	clock Clock
	cfg   reader.Config
	wl    Workload
	rng   *rand.Rand
	rec   *Recorder
	stop  <-chan struct{}
}

func (l *readLoop) run() {
	readers := map[string]*reader.Reader{}
	after := map[string]int64{} // resource → its Reader's previous Open (ReadOp.After)
	for sleepStop(l.stop, time.Duration(20+l.rng.IntN(40))*time.Millisecond) {
		res := l.wl.pick(l.clock.Now(), l.rng)
		rd, ok := readers[res]
		if !ok {
			if len(readers) > 4*l.wl.Resources {
				clear(readers)
			}
			var err error
			after[res] = l.clock.Now()
			if rd, err = reader.New(l.cfg, res); err != nil {
				l.rec.Anomaly(Anomaly{Client: l.id, Time: l.clock.Now(), What: "reader.New", Err: err.Error()})
				return
			}
			readers[res] = rd
		}
		var drop bool
		if after[res], drop = l.read(res, rd, after[res]); drop {
			delete(readers, res)
		}
	}
}

// read opens rd's current object (of resource res), reads it to the end and
// logs the read, unless it failed only because a server did not answer;
// after is the call
// time of rd's previous Open (or its creation). It returns this Open's call
// time and whether rd must be dropped: its pointer went back (an etcd
// restore, across which the checker splits histories), so a new Reader
// starts afresh.
func (l *readLoop) read(res string, rd *reader.Reader, after int64) (call int64, drop bool) {
	op := ReadOp{Client: l.id, Resource: res, Call: l.clock.Now(), After: after}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := rd.Open(ctx)
	if err == nil {
		h := sha256.New()
		_, err = io.Copy(h, b)
		_ = b.Close()
		op.Version, op.Object, op.PointerSHA = b.Pointer.Version, b.Pointer.Object.Key, b.Pointer.Object.SHA256
		op.SHA = hex.EncodeToString(h.Sum(nil))
	}
	op.Return = l.clock.Now()
	l.rec.Attempt(newAttempt(l.clock, l.id, "read", op.Call, errors.Is(err, fencepub.ErrUnavailable), err))
	switch {
	case err == nil, errors.Is(err, reader.ErrNotPublished):
		// A read of nothing published has the zero version.
	case errors.Is(err, reader.ErrDigestMismatch):
		op.Problem, op.Err = ReadDigest, err.Error()
	case errors.Is(err, reader.ErrObjectChanged):
		op.Problem, op.Err = ReadChanged, err.Error()
	case errors.Is(err, reader.ErrObjectMissing):
		op.Problem, op.Err = ReadMissing, err.Error()
		if ptr, perr := rd.Current(ctx); perr == nil {
			op.Version, op.Object = ptr.Version, ptr.Object.Key
		}
	case errors.Is(err, reader.ErrWentBack):
		// Only an etcd restore since the previous Open explains it (Verify
		// decides).
		op.Problem, op.Err, drop = ReadWentBack, err.Error(), true
	case isAnomaly(err):
		l.rec.Anomaly(Anomaly{Client: l.id, Time: op.Return, What: "read " + op.Resource, Err: err.Error()})
		return op.Call, false
	default:
		l.rec.Count("read_unavailable", 1)
		return op.Call, false
	}
	l.rec.Read(op)
	return op.Call, drop
}

// gcLoop runs GC passes with one Collector until stop closes: over the
// resources of the last three windows, and every tenth pass over all. Each
// pass holds gate's read lock (a restore holds the write lock).
type gcLoop struct {
	id    int
	gate  *sync.RWMutex
	clock Clock
	col   *gc.Collector
	wl    Workload
	rng   *rand.Rand
	rec   *Recorder
	stop  <-chan struct{}
}

func (l *gcLoop) run() {
	for n := 1; sleepStop(l.stop, time.Duration(300+l.rng.IntN(1200))*time.Millisecond); n++ {
		now := l.wl.window(l.clock.Now())
		opts := gc.RunOptions{Resources: l.wl.resources(now-2, now)}
		if n%10 == 0 {
			opts = gc.RunOptions{All: true}
		}
		l.pass(opts)
	}
}

// pass runs one GC pass and logs it.
func (l *gcLoop) pass(opts gc.RunOptions) {
	l.gate.RLock()
	defer l.gate.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := GCPass{Collector: l.id, Start: l.clock.Now()}
	rep, err := l.col.Run(ctx, opts)
	p.End = l.clock.Now()
	if rep != nil {
		p.Resources, p.Deleted, p.Sealed, p.Errors = rep.Resources, rep.Deleted, rep.Sealed, len(rep.Errors)
	}
	if err != nil {
		p.Err = err.Error()
		if isAnomaly(err) {
			l.rec.Anomaly(Anomaly{Client: fmt.Sprintf("gc%d", l.id), Time: p.End, What: "gc pass", Err: err.Error()})
		}
	}
	l.rec.GC(p)
}

// objectsAt lists the objects of res at version v (any nonce): the objects
// an attempt at v wrote. At most a few keys.
func objectsAt(ctx context.Context, st objstore.Store, ns layout.Namespace, res string, v layout.Version) ([]string, error) {
	var keys []string
	for o, err := range st.List(ctx, ns.ObjectsPrefix(res)+layout.EncodeVersion(v), objstore.ListOptions{}) {
		if err != nil {
			return keys, err
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// etcdRevision returns the current revision of the cluster behind cli.
func etcdRevision(ctx context.Context, cli *clientv3.Client, key string) (int64, error) {
	resp, err := cli.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

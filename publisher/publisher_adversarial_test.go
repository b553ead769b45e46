package publisher

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/harness/faultproxy"
	"github.com/fencepub/fencepub/internal/harness/localstack"
	"github.com/fencepub/fencepub/internal/harness/testenv"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/reader"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Adversarial tests: faults and bad input aimed at the publish protocol's
// commit boundary (DESIGN.md invariants 1, 2, 4, 8).

// pausedWorkerChild names runPausedWorker as a child process of the test
// binary (testenv.StartChild).
const pausedWorkerChild = "publisher-paused-worker"

// pausedWorkerSpec is the helper's input.
type pausedWorkerSpec struct {
	testenv.Servers
	Resource string        `json:"resource"`
	Owner    string        `json:"owner"`
	TTL      time.Duration `json:"ttl"`
	Strict   bool          `json:"strict"`
	Key      string        `json:"key"`
	Body     string        `json:"body"`
}

// workerEvent is one JSON line of the helper: "grant", "written" or
// "result". The helper prints its errors on stderr and exits 1.
type workerEvent struct {
	Event   string           `json:"event"`
	Grant   *authority.Grant `json:"grant,omitempty"`
	Object  *layout.Object   `json:"object,omitempty"`
	Result  *Result          `json:"result,omitempty"`
	Err     string           `json:"err,omitempty"`
	IsStale bool             `json:"is_stale,omitempty"`
}

// runPausedWorker is worker A of the seed's timeline as a real process: it
// acquires a lease (no session: nothing renews it), writes its object
// exactly as Publish does, reports "written", then blocks on one line of
// stdin before it sends the publish transaction. The test SIGSTOPs it after
// "written" and gives it its line while it is stopped, so the pause falls
// between the object write and the publish transaction.
func runPausedWorker(specJSON []byte) error {
	out := json.NewEncoder(os.Stdout)
	var spec pausedWorkerSpec
	cli, st, err := testenv.ConnectSpec(specJSON, &spec)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := authority.New(authority.Config{Namespace: spec.Namespace, Etcd: cli, Store: st})
	if err != nil {
		return err
	}
	g, err := a.Acquire(ctx, authority.AcquireRequest{Resource: spec.Resource, Owner: spec.Owner, TTL: spec.TTL})
	if err != nil {
		return err
	}
	_ = out.Encode(workerEvent{Event: "grant", Grant: &g})
	c, err := New(Config{Namespace: spec.Namespace, Etcd: cli, Store: st})
	if err != nil {
		return err
	}
	p, err := c.BindGrant(ctx, g, spec.Strict)
	if err != nil {
		return err
	}
	// Publish, split at the pause point: take, write, [pause], prepare+commit.
	op, err := normalize(Operation{IdempotencyKey: spec.Key, Body: strings.NewReader(spec.Body), ContentType: "text/plain"})
	if err != nil {
		return err
	}
	v := p.take(0)
	obj, sum, err := c.writeObject(ctx, c.ns.ObjectKey(spec.Resource, v, layout.NewNonce()), op.Body, bodySize(op.Body, op.Size), op.ContentType, op.Metadata)
	if err != nil {
		return err
	}
	_ = out.Encode(workerEvent{Event: "written", Object: &obj})
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	pr := c.prepare(p.term, v, op.IdempotencyKey, requestDigest(sum, op.ContentType, op.Metadata), obj, op.ContentType)
	res, err := c.commit(ctx, pr)
	ev := workerEvent{Event: "result", Result: &res, IsStale: errors.Is(err, ErrStale)}
	if err != nil {
		ev.Err = err.Error()
	}
	_ = out.Encode(ev)
	return nil
}

// pausedWorker is a running helper process.
type pausedWorker struct {
	t     *testing.T
	child *testenv.Child
}

func startPausedWorker(t *testing.T, spec pausedWorkerSpec) *pausedWorker {
	t.Helper()
	return &pausedWorker{t: t, child: testenv.StartChild(t, pausedWorkerChild, spec)}
}

func (w *pausedWorker) next(want string) workerEvent {
	w.t.Helper()
	var ev workerEvent
	w.child.NextJSON(&ev, time.Minute)
	if ev.Event != want {
		w.t.Fatalf("worker: want event %q, got %+v", want, ev)
	}
	return ev
}

func (w *pausedWorker) signal(sig syscall.Signal) {
	w.t.Helper()
	if err := w.child.Signal(sig); err != nil {
		w.t.Fatal(err)
	}
}

// stop sends SIGSTOP and waits until every thread of the process is
// stopped: kill(2) returns before the stop takes effect, and a thread
// already running may still act on input sent right after it.
func (w *pausedWorker) stop() {
	w.t.Helper()
	w.signal(syscall.SIGSTOP)
	testenv.Eventually(w.t, fmt.Sprintf("every thread of process %d stopped", w.child.Pid()), 10*time.Second, func() bool {
		stopped, err := localstack.ThreadsStopped(w.child.Pid())
		if err != nil {
			w.t.Fatal(err)
		}
		return stopped
	})
}

// awaitLeaseGone blocks until etcd deleted the holder key created at rev
// (its lease expired), watching, not polling.
func (e *env) awaitLeaseGone(res string, rev int64) {
	e.t.Helper()
	ctx := ctxT(e.t, 20*time.Second)
	for wr := range e.Etcd.Watch(ctx, e.NS.HolderKey(res), clientv3.WithRev(rev), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			e.t.Fatal(err)
		}
		if len(wr.Events) > 0 {
			return
		}
	}
	e.t.Fatalf("the holder of %q created at revision %d is still there", res, rev)
}

// TestAdversarialPausedWorkerBetweenWriteAndPublish pauses real worker
// processes (SIGSTOP) after their object write and before their publish
// transaction, past their lease's TTL, and resumes them:
//   - "seed": meanwhile B acquires a larger fence and publishes; A's publish
//     is stale (pointer), B's state stays, A's object exists unreferenced;
//   - "lax": nobody else acts; A's publish applies — lease expiry alone does
//     not reject (the seed: fencing only orders against accepted writes);
//   - "strict": nobody else acts; A's strict-mode publish is refused
//     (reason lease) because etcd expired its holder.
func TestAdversarialPausedWorkerBetweenWriteAndPublish(t *testing.T) {
	e := newEnv(t)
	sh := testenv.Get(t)
	spec := func(res string, strict bool) pausedWorkerSpec {
		return pausedWorkerSpec{Servers: sh.Servers(e.NS), Resource: res, Owner: "A-" + res, TTL: 2 * time.Second,
			Strict: strict, Key: "a-" + res, Body: "A's stale result"}
	}
	workers := map[string]*pausedWorker{
		"seed":   startPausedWorker(t, spec("seed", false)),
		"lax":    startPausedWorker(t, spec("lax", false)),
		"strict": startPausedWorker(t, spec("strict", true)),
	}
	grants := map[string]authority.Grant{}
	objects := map[string]layout.Object{}
	for res, w := range workers {
		grants[res] = *w.next("grant").Grant
		objects[res] = *w.next("written").Object
		w.stop()
		if _, err := io.WriteString(w.child.Stdin(), "go\n"); err != nil { // read only after SIGCONT
			t.Fatal(err)
		}
	}
	for res := range workers {
		e.awaitLeaseGone(res, grants[res].HolderRevision)
	}

	// B: a strictly larger fence, and its state published while A sleeps.
	gb := e.acquire(authority.AcquireRequest{Resource: "seed", Owner: "B"})
	if gb.Generation <= grants["seed"].Generation {
		t.Fatalf("B's generation %d is not above A's %d", gb.Generation, grants["seed"].Generation)
	}
	rb, err := e.bind(gb, false).Publish(ctxT(t, 30*time.Second), op("b", "B's newer result"))
	mustOutcome(t, "B publishes", rb, err, Applied, ReasonNone)

	for _, w := range workers {
		w.signal(syscall.SIGCONT)
	}
	results := map[string]workerEvent{}
	for res, w := range workers {
		results[res] = w.next("result")
	}

	seed := results["seed"]
	if seed.Result.Outcome != Stale || seed.Result.Reason != ReasonPointer || !seed.IsStale {
		t.Fatalf("A's resumed publish after B's: %+v (%s); want stale (pointer)", seed.Result, seed.Err)
	}
	if ptr := e.Pointer("seed"); ptr.Version != rb.Version || ptr.Object != rb.Object {
		t.Fatalf("pointer %+v; want B's %s", ptr.Version, rb.Version)
	}
	if !e.Exists(objects["seed"].Key) {
		t.Fatalf("A's object %s is gone; only GC deletes", objects["seed"].Key)
	}
	if h := e.history("seed"); len(h) != 1 || h[0] != rb.Version {
		t.Fatalf("history %v; want only B's %s", h, rb.Version)
	}

	lax := results["lax"]
	if lax.Result.Outcome != Applied {
		t.Fatalf("A's resumed publish with nobody newer: %+v (%s); want applied", lax.Result, lax.Err)
	}
	if ptr := e.Pointer("lax"); ptr.Object != objects["lax"] {
		t.Fatalf("pointer of lax names %+v; want A's object", ptr.Object)
	}

	strict := results["strict"]
	if strict.Result.Outcome != Stale || strict.Result.Reason != ReasonLease {
		t.Fatalf("A's resumed strict publish: %+v (%s); want stale (lease)", strict.Result, strict.Err)
	}
	if ptr := e.Pointer("strict"); !ptr.Version.IsZero() {
		t.Fatalf("pointer of strict moved to %s", ptr.Version)
	}
}

// TestAdversarialResolveFutureVersion: Resolve raises the seal, and the seal
// never goes down, so a version that no publish can carry — an epoch above
// the domain's or a fence above the resource's generation — must be refused
// without writing. Before the fix one `fencepub resolve --epoch 2^63-1`
// sealed the resource for good: every later grant's publish was stale.
func TestAdversarialResolveFutureVersion(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	const res = "victim"
	g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
	p := e.bind(g, false)
	r1, err := p.Publish(ctx, op("k1", "one"))
	mustOutcome(t, "first publish", r1, err, Applied, ReasonNone)
	sealBefore := e.sealValue(res)

	for _, v := range []layout.Version{
		{Epoch: layout.MaxNumber, Fence: 1, Seq: 1},
		{Epoch: g.Epoch + 1, Fence: 1, Seq: 1},
		{Epoch: g.Epoch, Fence: layout.MaxNumber, Seq: 1},
		{Epoch: g.Epoch, Fence: g.Generation + 1, Seq: 1},
	} {
		r, err := e.pub.Resolve(ctx, res, "future", v, unsent)
		if !errors.Is(err, ErrInvalid) || r.Outcome != "" {
			t.Errorf("resolve %s: %+v, %v; want ErrInvalid and no outcome", v, r, err)
		}
		if got := e.sealValue(res); got != sealBefore {
			t.Fatalf("resolve %s moved the seal to %q", v, got)
		}
	}

	// The current term and later grants still publish.
	r2, err := p.Publish(ctx, op("k2", "two"))
	mustOutcome(t, "publish after the refused resolves", r2, err, Applied, ReasonNone)
	e.release(g)
	g2 := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w2"})
	r3, err := e.bind(g2, false).Publish(ctx, op("k3", "three"))
	mustOutcome(t, "publish under the next grant", r3, err, Applied, ReasonNone)

	// A real unknown attempt of the current term is still settled by a seal.
	r, err := e.pub.Resolve(ctx, res, "k-unknown", g2.Version(5), unsent)
	mustOutcome(t, "resolve of a granted fence", r, err, Stale, ReasonSeal)

	// An attempt of an older epoch is settled without a seal: the epoch
	// compare already refuses it for good.
	if _, err := e.Etcd.Put(ctx, e.NS.EpochKey(), layout.EncodeNumber(g.Epoch+1)); err != nil {
		t.Fatal(err)
	}
	sealBefore = e.sealValue(res)
	r, err = e.pub.Resolve(ctx, res, "k-old", layout.Version{Epoch: g.Epoch, Fence: g2.Generation + 7, Seq: 1}, unsent)
	mustOutcome(t, "resolve of an old-epoch attempt", r, err, Stale, ReasonEpoch)
	if got := e.sealValue(res); got != sealBefore {
		t.Fatalf("resolve of an old-epoch attempt moved the seal to %q", got)
	}
}

// sealValue returns the raw seal value of res.
func (e *env) sealValue(res string) string {
	e.t.Helper()
	resp, err := e.Etcd.Get(ctxT(e.t, 10*time.Second), e.NS.SealKey(res))
	if err != nil || len(resp.Kvs) != 1 {
		e.t.Fatalf("seal of %q: %v %v", res, resp, err)
	}
	return string(resp.Kvs[0].Value)
}

// TestAdversarialSeqBounds: an explicit seq above layout.MaxNumber is bad
// input (ErrInvalid, exit 2 in the CLI); the last seq publishes, and a
// publish after it is stale (the seq is never wrapped); a term sealed at its
// last seq (`resource delete --force` of a live holder) is stale (seal) for
// its holder, and a retry of a key applied before the seal is duplicate.
func TestAdversarialSeqBounds(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	for _, seq := range []uint64{layout.MaxNumber + 1, math.MaxUint64} {
		if _, err := p.PublishSeq(ctx, seq, op("k", "x")); !errors.Is(err, ErrInvalid) {
			t.Fatalf("seq %d: %v, want ErrInvalid", seq, err)
		}
	}
	r, err := p.PublishSeq(ctx, layout.MaxNumber, op("k-last", "last"))
	mustOutcome(t, "the last seq", r, err, Applied, ReasonNone)
	if n := p.NextSeq(); n != layout.MaxNumber {
		t.Fatalf("NextSeq after the last seq: %d", n)
	}
	r, err = p.Publish(ctx, op("k-next", "next"))
	mustOutcome(t, "past the last seq", r, err, Stale, ReasonPointer)
	if ptr := e.Pointer("r"); ptr.Version.Seq != layout.MaxNumber {
		t.Fatalf("pointer %s", ptr.Version)
	}

	g := e.acquire(authority.AcquireRequest{Resource: "sealed", Owner: "w"})
	p = e.bind(g, false)
	first, err := p.Publish(ctx, op("k1", "one"))
	mustOutcome(t, "before the seal", first, err, Applied, ReasonNone)
	seal, err := layout.EncodeSeal(layout.Seal{Version: layout.Version{Epoch: g.Epoch, Fence: g.Fence(), Seq: layout.MaxNumber}, Reason: "decommissioned", At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Etcd.Put(ctx, e.NS.SealKey("sealed"), seal); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*Publisher{p, e.bind(g, false)} { // bound before and after the seal
		r, err := q.Publish(ctx, op("k2", "two"))
		mustOutcome(t, "a sealed term", r, err, Stale, ReasonSeal)
		r, err = q.Publish(ctx, op("k1", "one"))
		mustOutcome(t, "a retry after the seal", r, err, Duplicate, ReasonNone)
	}
}

// proxiedStore returns a fault proxy in front of the shared MinIO and a
// publisher Client whose object store goes through it (PartSize 5 MiB).
func (e *env) proxiedStore() (*faultproxy.Proxy, *Client, *s3store.Store) {
	e.t.Helper()
	px, st := testenv.Get(e.t).StoreProxy(e.t)
	return px, e.client(e.Etcd, func(c *Config) { c.Store = st; c.PartSize = MinPartSize }), st
}

// proxiedPublisher binds a grant of res through a proxiedStore client and
// publishes once ("k0") to warm the client up: its first request looks up
// the bucket's location, which minio-go does not retry. It returns the
// warm-up's result.
func (e *env) proxiedPublisher(ctx context.Context, res string) (*faultproxy.Proxy, *Publisher, Result) {
	e.t.Helper()
	px, c, _ := e.proxiedStore()
	p, err := c.BindGrant(ctx, e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false)
	if err != nil {
		e.t.Fatal(err)
	}
	r0, err := p.Publish(ctx, op("k0", "warm-up"))
	mustOutcome(e.t, "warm-up publish", r0, err, Applied, ReasonNone)
	return px, p, r0
}

// TestAdversarialLostObjectResponse drops the response of the create-only
// PUT of a publish (the object is stored, the client sees a reset). The
// publisher re-sends it from the body's start (a strings.Reader can seek),
// meets 412 on the attempt's own key, reads the object there back to check
// it is its own, and the publish applies exactly once: one object under the
// version, the reader verifies its bytes.
func TestAdversarialLostObjectResponse(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, p, _ := e.proxiedPublisher(ctx, "r")
	fired := px.DropResponse(1, time.Second) // long enough for the store to answer under load
	r, err := p.Publish(ctx, op("k", "stored, but the answer was lost"))
	mustOutcome(t, "publish with a lost PUT response", r, err, Applied, ReasonNone)
	select {
	case <-fired:
	default:
		t.Fatal("the proxy never dropped a response")
	}
	if st := px.Stats(); st.DroppedDown == 0 || st.Resets == 0 {
		t.Fatalf("proxy %+v: no response was lost", st)
	}
	if keys := e.listObjects(e.NS.ObjectsPrefix("r")); len(keys) != 2 || keys[1] != r.Object.Key {
		t.Fatalf("objects %v; want the warm-up's and exactly %s", keys, r.Object.Key)
	}
	if got := e.readVerified("r"); got != "stored, but the answer was lost" {
		t.Fatalf("reader got %q", got)
	}
}

// TestAdversarialResetMidMultipart resets every store connection while a
// multipart body is uploading, several times per publish. Each publish
// either applies with exactly its bytes (the reader verifies them) or fails
// with nothing published and its upload aborted; never a published object
// with other bytes, never a leftover upload of a failed publish.
func TestAdversarialResetMidMultipart(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	px, c, st := e.proxiedStore()
	p, err := c.BindGrant(ctx, e.acquire(authority.AcquireRequest{Resource: "big", Owner: "w", TTL: time.Minute}), false)
	if err != nil {
		t.Fatal(err)
	}
	const size = 3*MinPartSize + 12345 // four parts
	applied := 0
	for i := range 3 {
		body := make([]byte, size)
		_, _ = rand.Read(body)
		before := px.Stats().BytesUp
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // reset mid-part, at about 1.5 and 2.5 parts
			for _, at := range []int64{3 * MinPartSize / 2, 5 * MinPartSize / 2} {
				for px.Stats().BytesUp-before < at {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
				}
				px.ResetAll()
			}
		})
		key := fmt.Sprintf("k%d", i)
		r, err := p.Publish(ctx, Operation{IdempotencyKey: key, Body: bytes.NewReader(body)})
		close(stop)
		wg.Wait()
		switch {
		case err == nil && r.Outcome == Applied:
			applied++
			if got := e.readVerified("big"); got != string(body) {
				t.Fatalf("publish %d applied but the reader got %d other bytes", i, len(got))
			}
		case err != nil && r.Outcome == "":
			t.Logf("publish %d failed cleanly: %v", i, err)
			if ptr := e.Pointer("big"); ptr.IdempotencyKey == key {
				t.Fatalf("publish %d reported failure but the pointer names it", i)
			}
		default:
			t.Fatalf("publish %d: %+v, %v", i, r, err)
		}
	}
	for u := range st.Client.ListIncompleteUploads(ctx, st.Bucket, e.NS.ObjectsPrefix("big"), true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		t.Errorf("leftover incomplete upload %s of %s", u.UploadID, u.Key)
	}
	t.Logf("%d of 3 publishes applied through resets; proxy %+v", applied, px.Stats())
	if px.Stats().Resets == 0 {
		t.Fatal("no connection was reset")
	}
}

// listObjects lists object keys under prefix.
func (e *env) listObjects(prefix string) []string {
	e.t.Helper()
	var keys []string
	for o := range e.Store.Client.ListObjectsIter(ctxT(e.t, 30*time.Second), e.Store.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			e.t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// readVerified reads res's published object through a reader, verified.
func (e *env) readVerified(res string) string {
	e.t.Helper()
	r, err := reader.New(reader.Config{Namespace: e.NS, Etcd: e.Etcd, Store: e.Store}, res)
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := r.Open(ctxT(e.t, time.Minute))
	if err != nil {
		e.t.Fatal(err)
	}
	defer b.Close()
	data, err := io.ReadAll(b)
	if err != nil {
		e.t.Fatalf("read %s: %v", res, err)
	}
	return string(data)
}

// TestAdversarialCorruptValues writes corrupt values under every key the
// publish transaction reads and checks that publishing, binding and
// resolving refuse with a typed error — never a panic, never a publish over
// the corrupt value, never a change of it.
//
// The transaction orders versions by comparing the stored value's bytes, so
// it can only notice corruption that sorts at or above the incoming version;
// a value that sorts below it (empty, truncated) passes the compare and is
// replaced by the new, valid pointer. The test pins both behaviours.
func TestAdversarialCorruptValues(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	v111 := layout.Version{Epoch: 1, Fence: 1, Seq: 1}.Encode()
	sortsHigh := []string{"not a pointer", "\xff", v111 + "|{bad json", layout.Version{Epoch: 2}.Encode(),
		v111 + `|{"version":{"epoch":1,"fence":1,"seq":2}}`}
	sortsLow := []string{"", "0", layout.Version{}.Encode(), layout.Version{}.Encode() + "|{bad json"}
	for i, bad := range append(sortsHigh, sortsLow...) {
		high := i < len(sortsHigh)
		for _, which := range []string{"pointer", "seal"} {
			res := fmt.Sprintf("%s-%d", which, i)
			g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
			if g.Version(1).Encode() != v111 {
				t.Fatalf("grant %s: want version 1.1.1 first", g.Version(1))
			}
			p := e.bind(g, false) // creates pointer and seal
			key := e.NS.PointerKey(res)
			if which == "seal" {
				key = e.NS.SealKey(res)
			}
			if _, err := e.Etcd.Put(ctx, key, bad); err != nil {
				t.Fatal(err)
			}
			if _, err := e.pub.BindGrant(ctx, g, false); !errors.Is(err, layout.ErrCorruptRecord) {
				t.Errorf("bind with %s %q: %v; want ErrCorruptRecord", which, bad, err)
			}
			r, err := p.Publish(ctx, op("k", "over a corrupt "+which))
			if !high {
				// Sorts below: the compare passes and a valid value replaces it.
				mustOutcome(t, fmt.Sprintf("publish over %s %q", which, bad), r, err, Applied, ReasonNone)
				if ptr := e.Pointer(res); ptr.Version != r.Version {
					t.Errorf("pointer %s after repairing %s %q", ptr.Version, which, bad)
				}
				continue
			}
			if !errors.Is(err, layout.ErrCorruptRecord) || r.Outcome != "" {
				t.Errorf("publish over %s %q: %+v, %v; want ErrCorruptRecord and no outcome", which, bad, r, err)
			}
			r, err = e.pub.Resolve(ctx, res, "k2", g.Version(1), unsent)
			switch which {
			case "seal":
				if !errors.Is(err, layout.ErrCorruptRecord) || r.Outcome != "" {
					t.Errorf("resolve with seal %q: %+v, %v; want ErrCorruptRecord", bad, r, err)
				}
			case "pointer": // informative only: the answer still comes
				mustOutcome(t, fmt.Sprintf("resolve with pointer %q", bad), r, err, Stale, ReasonSeal)
			}
			resp, err := e.Etcd.Get(ctx, key)
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != bad {
				t.Errorf("%s %q was overwritten: %v %v", which, bad, resp, err)
			}
		}
	}

	// A corrupt op record: the same key is refused with a typed error;
	// another key still publishes.
	g := e.acquire(authority.AcquireRequest{Resource: "ops", Owner: "w"})
	p := e.bind(g, false)
	if _, err := e.Etcd.Put(ctx, e.NS.OpKey("ops", "k"), "{not json"); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Publish(ctx, op("k", "x")); !errors.Is(err, layout.ErrCorruptRecord) || r.Outcome != "" {
		t.Errorf("publish with a corrupt op record: %+v, %v", r, err)
	}
	if r, err := e.pub.Resolve(ctx, "ops", "k", g.Version(9), unsent); !errors.Is(err, layout.ErrCorruptRecord) || r.Outcome != "" {
		t.Errorf("resolve with a corrupt op record: %+v, %v", r, err)
	}
	r, err := p.Publish(ctx, op("k-other", "y"))
	mustOutcome(t, "another key", r, err, Applied, ReasonNone)

	// A corrupt grant record or epoch: stale by grant or epoch, pointer
	// unchanged.
	for _, c := range []struct {
		key, value string
		reason     Reason
	}{
		{e.NS.GrantKey("ops", g.Generation), "garbage", ReasonGrant},
		{e.NS.GrantKey("ops", g.Generation), layout.GrantRecordValue(g.Epoch, "w") + " ", ReasonGrant},
		{e.NS.EpochKey(), "x", ReasonEpoch},
		{e.NS.EpochKey(), layout.EncodeNumber(g.Epoch) + "\x00", ReasonEpoch},
	} {
		old, err := e.Etcd.Get(ctx, c.key)
		if err != nil || len(old.Kvs) != 1 {
			t.Fatal(old, err)
		}
		if _, err := e.Etcd.Put(ctx, c.key, c.value); err != nil {
			t.Fatal(err)
		}
		r, err := p.Publish(ctx, op("k-"+string(c.reason)+fmt.Sprint(len(c.value)), "z"))
		mustOutcome(t, fmt.Sprintf("publish with %s = %q", c.key, c.value), r, err, Stale, c.reason)
		if _, err := e.Etcd.Put(ctx, c.key, string(old.Kvs[0].Value)); err != nil {
			t.Fatal(err)
		}
	}
	if ptr := e.Pointer("ops"); ptr.IdempotencyKey != "k-other" {
		t.Fatalf("pointer moved to %q", ptr.IdempotencyKey)
	}
}

// TestAdversarialLostResponseThenSuperseded: A's publish is applied but its
// answer is lost; while A waits, B publishes a newer version; A's re-send
// then meets a pointer above its version. The op record, classified first,
// tells A its own attempt was applied — a lost response is never reported
// as stale, even when it has since been superseded.
func TestAdversarialLostResponseThenSuperseded(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, c := e.proxied(nil)
	ga := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "A"})
	pa, err := c.BindGrant(ctx, ga, false)
	if err != nil {
		t.Fatal(err)
	}
	e.release(ga) // fencing, not the lease, orders the writes: A may still publish
	gb := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "B"})
	pb := e.bind(gb, false)

	fired := px.DropResponse(1, 1500*time.Millisecond)
	type outcome struct {
		r   Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := pa.Publish(ctx, op("a", "A's result"))
		done <- outcome{r, err}
	}()
	// A's transaction is applied (its op record exists) but A has no answer.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for wr := range e.Etcd.Watch(wctx, e.NS.OpKey("r", "a"), clientv3.WithRev(1)) {
		if len(wr.Events) > 0 {
			break
		}
	}
	if wctx.Err() != nil {
		t.Fatal("A's transaction never reached etcd")
	}
	select {
	case o := <-done:
		t.Fatalf("A got an answer before B published: %+v, %v", o.r, o.err)
	default:
	}
	rb, err := pb.Publish(ctx, op("b", "B's result"))
	mustOutcome(t, "B publishes over A", rb, err, Applied, ReasonNone)
	<-fired
	o := <-done
	mustOutcome(t, "A after its lost answer", o.r, o.err, Applied, ReasonNone)
	if o.r.Attempts < 2 {
		t.Fatalf("A's answer was not lost: %d sends", o.r.Attempts)
	}
	if ptr := e.Pointer("r"); ptr.Version != rb.Version {
		t.Fatalf("pointer %s; want B's %s", ptr.Version, rb.Version)
	}
	if h := e.history("r"); len(h) != 2 || h[0] != o.r.Version || h[1] != rb.Version {
		t.Fatalf("history %v; want A's %s then B's %s", h, o.r.Version, rb.Version)
	}
}

// TestAdversarialRepublishMultipart republishes an object written in a
// multipart upload — what `recover --republish` does with a large publish
// an etcd restore lost. Such an object carries no sha256 metadata; before
// the fix Republish refused it (ErrObjectMismatch), so a lost state larger
// than one part could not be brought back. It now hashes the object once
// (conditioned on its ETag), and the republished version carries the same
// bytes and the original request digest.
func TestAdversarialRepublishMultipart(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	c := e.client(e.Etcd, func(c *Config) { c.PartSize = MinPartSize })
	body := make([]byte, MinPartSize+4321)
	_, _ = rand.Read(body)
	ga := e.acquire(authority.AcquireRequest{Resource: "big", Owner: "A"})
	pa, err := c.BindGrant(ctx, ga, false)
	if err != nil {
		t.Fatal(err)
	}
	// A body of unknown length above PartSize goes through multipart.
	orig, err := pa.Publish(ctx, Operation{IdempotencyKey: "lost", Body: io.MultiReader(bytes.NewReader(body)), ContentType: "application/x-big",
		Metadata: map[string]string{"origin": "test"}})
	mustOutcome(t, "multipart publish", orig, err, Applied, ReasonNone)
	if !strings.Contains(orig.Object.ETag, "-") {
		t.Fatalf("ETag %q: not a multipart upload", orig.Object.ETag)
	}
	e.release(ga)
	gb := e.acquire(authority.AcquireRequest{Resource: "big", Owner: "B"})
	r, err := e.bind(gb, false).Republish(ctx, orig.Object.Key, "republish-lost")
	mustOutcome(t, "republish of a multipart object", r, err, Applied, ReasonNone)
	if r.Digest != orig.Digest || r.Object.SHA256 != orig.Object.SHA256 || r.Object.Key == orig.Object.Key {
		t.Fatalf("republished %+v; want the original digest %s and sha256 %s under a new key", r, orig.Digest, orig.Object.SHA256)
	}
	if got := e.readVerified("big"); got != string(body) {
		t.Fatalf("reader got %d other bytes", len(got))
	}
}

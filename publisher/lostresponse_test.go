//go:build !unit

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
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/reader"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lost responses at the publish protocol's commit boundary: of the object
// write, of the transaction, mid-multipart (DESIGN.md invariants 1, 2, 4, 8).

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

// runPausedWorker is worker A of the protocol source's timeline as a real process: it
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
	a, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(spec.Namespace), Etcd: cli, Store: st}})
	if err != nil {
		return err
	}
	g, err := a.Acquire(ctx, authority.AcquireRequest{Resource: spec.Resource, Owner: spec.Owner, TTL: spec.TTL})
	if err != nil {
		return err
	}
	_ = out.Encode(workerEvent{Event: "grant", Grant: &g})
	c, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(spec.Namespace), Etcd: cli, Store: st}})
	if err != nil {
		return err
	}
	p, err := c.Bind(ctx, GrantTerm(g, spec.Strict))
	if err != nil {
		return err
	}
	// Publish, split at the pause point: take, write, [pause], prepare+commit.
	op, err := normalize(Operation{IdempotencyKey: spec.Key, Body: strings.NewReader(spec.Body), ContentType: "text/plain"})
	if err != nil {
		return err
	}
	v := p.take(0).v
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
		stopped, err := devstack.ThreadsStopped(w.child.Pid())
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

// sealValue returns the raw seal value of res.
func (e *env) sealValue(res string) string {
	e.t.Helper()
	resp, err := e.Etcd.Get(ctxT(e.t, 10*time.Second), e.NS.SealKey(res))
	if err != nil || len(resp.Kvs) != 1 {
		e.t.Fatalf("seal of %q: %v %v", res, resp, err)
	}
	return string(resp.Kvs[0].Value)
}

// proxiedStore returns a fault proxy in front of the shared MinIO and a
// publisher Client whose object store goes through it (PartSize 5 MiB).
func (e *env) proxiedStore() (*faultproxy.Proxy, *Client, *s3store.Store) {
	e.t.Helper()
	px, st := testenv.Get(e.t).StoreProxy(e.t)
	return px, e.client(e.Etcd, func(c *Config) { c.Store = st; c.PartSize = minPartSize }), st
}

// proxiedPublisher binds a grant of res through a proxiedStore client and
// publishes once ("k0") to warm the client up: its first request looks up
// the bucket's location, which minio-go does not retry. It returns the
// warm-up's result.
func (e *env) proxiedPublisher(ctx context.Context, res string) (*faultproxy.Proxy, *Publisher, Result) {
	e.t.Helper()
	px, c, _ := e.proxiedStore()
	p, err := c.Bind(ctx, GrantTerm(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false))
	if err != nil {
		e.t.Fatal(err)
	}
	r0, err := p.Publish(ctx, op("k0", "warm-up"))
	mustOutcome(e.t, "warm-up publish", r0, err, Applied, reasonNone)
	return px, p, r0
}

// TestLostObjectResponse drops the response of the create-only
// PUT of a publish (the object is stored, the client sees a reset). The
// publisher re-sends it from the body's start (a strings.Reader can seek),
// meets 412 on the attempt's own key, reads the object there back to check
// it is its own, and the publish applies exactly once: one object under the
// version, the reader verifies its bytes.
func TestLostObjectResponse(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, p, _ := e.proxiedPublisher(ctx, "r")
	fired := px.DropResponse(1, time.Second) // long enough for the store to answer under load
	r, err := p.Publish(ctx, op("k", "stored, but the answer was lost"))
	mustOutcome(t, "publish with a lost PUT response", r, err, Applied, reasonNone)
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

// TestResetMidMultipart resets every store connection while a
// multipart body is uploading, several times per publish. Each publish
// either applies with exactly its bytes (the reader verifies them) or fails
// with nothing published and its upload aborted; never a published object
// with other bytes, never a leftover upload of a failed publish.
func TestResetMidMultipart(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 3*time.Minute)
	px, c, st := e.proxiedStore()
	p, err := c.Bind(ctx, GrantTerm(e.acquire(authority.AcquireRequest{Resource: "big", Owner: "w", TTL: time.Minute}), false))
	if err != nil {
		t.Fatal(err)
	}
	const size = 3*minPartSize + 12345 // four parts
	applied := 0
	for i := range 3 {
		body := make([]byte, size)
		_, _ = rand.Read(body)
		before := px.Stats().BytesUp
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // reset mid-part, at about 1.5 and 2.5 parts
			for _, at := range []int64{3 * minPartSize / 2, 5 * minPartSize / 2} {
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
	r, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}}, res)
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

// TestLostResponseThenSuperseded: A's publish is applied but its
// answer is lost; while A waits, B publishes a newer version; A's re-send
// then meets a pointer above its version. The op record, classified first,
// tells A its own attempt was applied — a lost response is never reported
// as stale, even when it has since been superseded.
func TestLostResponseThenSuperseded(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, c := e.proxied(nil)
	ga := e.acquire(authority.AcquireRequest{Resource: "r", Owner: "A"})
	pa, err := c.Bind(ctx, GrantTerm(ga, false))
	if err != nil {
		t.Fatal(err)
	}
	e.expire(ga) // fencing, not the lease, orders the writes: A may still publish
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
	e.awaitOpRecord("r", "a")
	select {
	case o := <-done:
		t.Fatalf("A got an answer before B published: %+v, %v", o.r, o.err)
	default:
	}
	rb, err := pb.Publish(ctx, op("b", "B's result"))
	mustOutcome(t, "B publishes over A", rb, err, Applied, reasonNone)
	<-fired
	o := <-done
	mustOutcome(t, "A after its lost answer", o.r, o.err, Applied, reasonNone)
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

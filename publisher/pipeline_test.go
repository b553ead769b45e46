//go:build !unit

package publisher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pipelined publishing (DESIGN.md "Pipelined publishing"): objects written
// ahead, transactions in seq order, every operation answered once, and a
// stale or unknown answer stopping the pipeline with the rest reported.

// gatedBody is a body whose first Read blocks until gate is closed: a
// holder paused in the middle of its pipeline.
type gatedBody struct {
	gate <-chan struct{}
	r    io.Reader
}

func (b *gatedBody) Read(p []byte) (int, error) {
	<-b.gate
	return b.r.Read(p)
}

// gated is op(key, body) whose body waits for the returned release.
func gated(t *testing.T, key, body string) (Operation, func()) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	o := op(key, body)
	o.Body = &gatedBody{gate: gate, r: o.Body}
	return o, release
}

// answer returns the one answer on ch and checks that ch is then closed.
func answer(t *testing.T, what string, ch <-chan PipelineResult) PipelineResult {
	t.Helper()
	var r PipelineResult
	select {
	case got, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed without an answer", what)
		}
		r = got
	case <-time.After(time.Minute):
		t.Fatalf("%s: no answer", what)
	}
	if extra, ok := <-ch; ok {
		t.Fatalf("%s: a second answer %+v", what, extra)
	}
	return r
}

// mustNotSent fails t unless r is the answer of an operation the pipeline
// did not send.
func mustNotSent(t *testing.T, what string, r PipelineResult) {
	t.Helper()
	if !errors.Is(r.Err, ErrPipelineStopped) || r.Result.Outcome != "" {
		t.Fatalf("%s: %+v, %v; want not sent (ErrPipelineStopped, no outcome)", what, r.Result, r.Err)
	}
	for _, other := range []error{ErrStale, ErrUnknown, ErrConflict} {
		if errors.Is(r.Err, other) {
			t.Fatalf("%s: a not-sent operation reported as %v: %v", what, other, r.Err)
		}
	}
}

// mustStopAt checks the answers of a pipeline that stopped at the
// operation of chans[0]: its outcome is want (reason), every later one was
// not sent, and Close returns the stopping operation's error.
func mustStopAt(t *testing.T, pl *Pipeline, chans []<-chan PipelineResult, want Outcome, reason Reason) PipelineResult {
	t.Helper()
	first := answer(t, "the stopping operation", chans[0])
	mustOutcome(t, "the stopping operation", first.Result, first.Err, want, reason)
	for i, ch := range chans[1:] {
		what := fmt.Sprintf("operation %d behind it", i+1)
		mustNotSent(t, what, answer(t, what, ch))
	}
	if err := pl.Close(); !errors.Is(err, first.Err) {
		t.Fatalf("Close: %v; want the answer that stopped it (%v)", err, first.Err)
	}
	return first
}

// proxiedEtcdPublisher binds a grant of res for owner "w" through a
// publisher Client whose etcd goes through a fault proxy (e.proxied), so
// the resource init has warmed the connection up.
func (e *env) proxiedEtcdPublisher(ctx context.Context, res string) (*faultproxy.Proxy, *Publisher) {
	e.t.Helper()
	px, c := e.proxied(nil)
	p, err := c.Bind(ctx, GrantTerm(e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"}), false))
	if err != nil {
		e.t.Fatal(err)
	}
	return px, p
}

// awaitOpRecord blocks until the op record of key on res exists (a
// transaction of it was applied), watching, not polling.
func (e *env) awaitOpRecord(res, key string) {
	e.t.Helper()
	ctx := ctxT(e.t, 10*time.Second)
	for wr := range e.Etcd.Watch(ctx, e.NS.OpKey(res, key), clientv3.WithRev(1)) {
		if len(wr.Events) > 0 {
			return
		}
	}
	e.t.Fatalf("no transaction of %q on %q reached etcd", key, res)
}

// historyRevisions returns the ModRevision of each of res's history
// entries, in version order.
func (e *env) historyRevisions(res string) []int64 {
	e.t.Helper()
	resp, err := e.Etcd.Get(ctxT(e.t, 10*time.Second), e.NS.HistoryPrefix(res), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]int64, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = kv.ModRevision
	}
	return out
}

// TestPipelineOrder submits 24 operations from 4 goroutines at once into a
// pipeline of depth 4: each gets exactly one answer, applied, with its own
// seq; the seqs are 1..24 and the transactions were applied in seq order
// (the history entries' revisions rise with their versions); the pointer
// ends at the last seq; Close reports no stop.
func TestPipelineOrder(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	pl := p.Pipeline(ctx, 4)
	const workers, each = 4, 6
	var (
		mu    sync.Mutex
		chans = map[string]<-chan PipelineResult{}
		wg    sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d-%d", w, i)
				ch := pl.Submit(op(key, strings.Repeat(key, 100*i+1)))
				mu.Lock()
				chans[key] = ch
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := pl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	answers := map[string]PipelineResult{}
	for key, ch := range chans {
		answers[key] = answer(t, key, ch)
	}
	seen := map[uint64]string{}
	var last layout.Version
	for key, r := range answers {
		mustOutcome(t, key, r.Result, r.Err, Applied, reasonNone)
		if other, dup := seen[r.Result.Version.Seq]; dup {
			t.Fatalf("%s and %s both got seq %d", key, other, r.Result.Version.Seq)
		}
		seen[r.Result.Version.Seq] = key
		if last.Compare(r.Result.Version) < 0 {
			last = r.Result.Version
		}
	}
	if len(answers) != workers*each || last.Seq != workers*each {
		t.Fatalf("%d answers, last seq %d; want %d of each", len(answers), last.Seq, workers*each)
	}
	h, revs := e.history("r"), e.historyRevisions("r")
	if len(h) != workers*each {
		t.Fatalf("history %v", h)
	}
	for i := range h {
		if h[i].Seq != uint64(i+1) || i > 0 && revs[i] <= revs[i-1] {
			t.Fatalf("history %v at revisions %v: not applied in seq order", h, revs)
		}
	}
	if ptr := e.Pointer("r"); ptr.Version != last || ptr.IdempotencyKey != seen[last.Seq] {
		t.Fatalf("pointer %s (%s); want the last seq %s (%s)", ptr.Version, ptr.IdempotencyKey, last, seen[last.Seq])
	}
	r := answer(t, "submit after Close", pl.Submit(op("late", "x")))
	mustNotSent(t, "submit after Close", r)
	if n := p.nextSeq(); n != workers*each+1 {
		t.Fatalf("NextSeq %d after Close; want %d", n, workers*each+1)
	}
}

// TestPipelineDepthOne: a pipeline of depth 1 publishes as successive
// Publish calls do: Submit returns only once the previous operation is
// answered, seqs follow on from an earlier Publish, and a Publish after
// Close continues above them.
func TestPipelineDepthOne(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	r0, err := p.Publish(ctx, op("k0", "before"))
	mustOutcome(t, "publish before", r0, err, Applied, reasonNone)
	pl := p.Pipeline(ctx, 0) // below 1: depth 1
	var prev <-chan PipelineResult
	var got []PipelineResult
	for i := 1; i <= 5; i++ {
		ch := pl.Submit(op(fmt.Sprintf("k%d", i), fmt.Sprintf("body %d", i)))
		if prev != nil {
			select {
			case r := <-prev:
				got = append(got, r)
			default:
				t.Fatalf("submit %d returned before operation %d was answered", i, i-1)
			}
		}
		prev = ch
	}
	got = append(got, answer(t, "last", prev))
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		mustOutcome(t, fmt.Sprint("op ", i+1), r.Result, r.Err, Applied, reasonNone)
		if r.Result.Version.Seq != uint64(i+2) {
			t.Fatalf("op %d at seq %d; want %d", i+1, r.Result.Version.Seq, i+2)
		}
	}
	r6, err := p.Publish(ctx, op("k6", "after"))
	mustOutcome(t, "publish after", r6, err, Applied, reasonNone)
	if r6.Version.Seq != 7 || len(e.history("r")) != 7 {
		t.Fatalf("publish after the pipeline at %s, history %v", r6.Version, e.history("r"))
	}
}

// TestPipelineDuplicateAndConflict: a duplicate and a conflict in the
// middle are answered as Publish answers them and let the later operations
// go; each consumes its seq, as it does for Publish.
func TestPipelineDuplicateAndConflict(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	pl := p.Pipeline(ctx, 4)
	ops := []Operation{op("a", "A"), op("b", "B"), op("a", "A"), op("c", "C"), op("b", "not B"), op("d", "D")}
	chans := make([]<-chan PipelineResult, len(ops))
	for i, o := range ops {
		chans[i] = pl.Submit(o)
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	want := []Outcome{Applied, Applied, Duplicate, Applied, Conflict, Applied}
	var rs []Result
	for i, ch := range chans {
		r := answer(t, fmt.Sprint("op ", i), ch)
		mustOutcome(t, fmt.Sprint("op ", i), r.Result, r.Err, want[i], reasonNone)
		if r.Result.Attempt == nil || r.Result.Attempt.Version.Seq != uint64(i+1) {
			t.Fatalf("op %d attempted %+v; want seq %d", i, r.Result.Attempt, i+1)
		}
		rs = append(rs, r.Result)
	}
	if rs[2].Version != rs[0].Version {
		t.Fatalf("duplicate reports %s; want the original %s", rs[2].Version, rs[0].Version)
	}
	if h := e.history("r"); len(h) != 4 || e.Pointer("r").Version != rs[5].Version {
		t.Fatalf("history %v, pointer %s; want 4 entries ending at %s", h, e.Pointer("r").Version, rs[5].Version)
	}
}

// TestPipelinePausedHolder: holder A's pipeline pauses on one operation's
// object write (its body stalls) past its lease's TTL, with three more
// operations written behind it; B acquires a larger fence and publishes;
// A resumes. A's paused operation is stale (pointer), the three behind it
// are reported not sent, their objects stay for GC, their seqs are given
// back, B's state stays, and later Submits are refused at once.
func TestPipelinePausedHolder(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	const res = "r"
	ga := e.acquire(authority.AcquireRequest{Resource: res, Owner: "A", TTL: 2 * time.Second})
	pa := e.bind(ga, false)
	pl := pa.Pipeline(ctx, 4)
	first := []<-chan PipelineResult{pl.Submit(op("a1", "one")), pl.Submit(op("a2", "two"))}
	paused, resume := gated(t, "a3", "three")
	chans := []<-chan PipelineResult{pl.Submit(paused)}
	for i := 4; i <= 6; i++ {
		chans = append(chans, pl.Submit(op(fmt.Sprintf("a%d", i), "later")))
	}
	for i, ch := range first {
		r := answer(t, fmt.Sprint("a", i+1), ch)
		mustOutcome(t, fmt.Sprint("a", i+1), r.Result, r.Err, Applied, reasonNone)
	}
	testenv.Eventually(t, "the objects of a4..a6 written behind the paused a3", 30*time.Second, func() bool {
		return len(e.listObjects(e.NS.ObjectsPrefix(res))) == 5
	})
	e.awaitLeaseGone(res, ga.HolderRevision)
	gb := e.acquire(authority.AcquireRequest{Resource: res, Owner: "B"})
	rb, err := e.bind(gb, false).Publish(ctx, op("b", "B's newer state"))
	mustOutcome(t, "B publishes", rb, err, Applied, reasonNone)

	resume()
	mustStopAt(t, pl, chans, Stale, ReasonPointer)
	mustNotSent(t, "submit after the stop", answer(t, "a7", pl.Submit(op("a7", "x"))))
	if ptr := e.Pointer(res); ptr.Version != rb.Version {
		t.Fatalf("pointer %s; want B's %s", ptr.Version, rb.Version)
	}
	if h := e.history(res); len(h) != 3 || h[2] != rb.Version {
		t.Fatalf("history %v; want a1, a2, then B's %s", h, rb.Version)
	}
	if n := len(e.listObjects(e.NS.ObjectsPrefix(res))); n != 7 {
		t.Fatalf("%d objects; want A's 6 (4 orphans for GC) and B's", n)
	}
	if n := pa.nextSeq(); n != 4 {
		t.Fatalf("A's NextSeq %d; want 4: the seqs of a4..a6 were never sent", n)
	}
}

// TestPipelineLostResponse: the transaction of the first operation is
// applied but its response is lost for 3 s; meanwhile the objects of the
// next three are written (object n+1 while transaction n is in flight) and
// none of their transactions is sent. The re-send finds its op record
// (applied), the others follow in order, each applied exactly once.
func TestPipelineLostResponse(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, p := e.proxiedEtcdPublisher(ctx, "r")
	pl := p.Pipeline(ctx, 4)
	first, resume := gated(t, "k1", "one")
	chans := []<-chan PipelineResult{pl.Submit(first)}
	for i := 2; i <= 4; i++ {
		chans = append(chans, pl.Submit(op(fmt.Sprintf("k%d", i), fmt.Sprintf("body %d", i))))
	}
	fired := px.DropResponse(1, 3*time.Second) // armed once nothing else is sent
	resume()
	e.awaitOpRecord("r", "k1")
	testenv.Eventually(t, "the objects of k2..k4 written while k1's transaction is in flight", 30*time.Second, func() bool {
		return len(e.listObjects(e.NS.ObjectsPrefix("r"))) == 4
	})
	select {
	case r := <-chans[0]:
		t.Fatalf("k1 answered before its lost response was re-sent: %+v, %v", r.Result, r.Err)
	default:
	}
	if h := e.history("r"); len(h) != 1 {
		t.Fatalf("history %v while k1 is unanswered: a later transaction overtook it", h)
	}
	<-fired
	for i, ch := range chans {
		r := answer(t, fmt.Sprint("k", i+1), ch)
		mustOutcome(t, fmt.Sprint("k", i+1), r.Result, r.Err, Applied, reasonNone)
		if i == 0 && r.Result.Attempts < 2 {
			t.Fatalf("k1's response was not lost: %d sends", r.Result.Attempts)
		}
		resp, err := e.Etcd.Get(ctx, e.NS.OpKey("r", fmt.Sprint("k", i+1)))
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 {
			t.Fatalf("op record of k%d: %+v, %v; want one record written once", i+1, resp, err)
		}
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	if h := e.history("r"); len(h) != 4 || h[3].Seq != 4 {
		t.Fatalf("history %v; want seqs 1..4", h)
	}
}

// TestPipelineUnknownStops: every response of etcd is lost while the
// second operation's transaction is sent, until the pipeline's deadline:
// that operation is unknown with its resolvable attempt, the ones behind
// it are not sent, and Close reports the unknown. Resolve then settles it
// (applied: the requests got through), and the Publisher goes on above it.
func TestPipelineUnknownStops(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	px, p := e.proxiedEtcdPublisher(ctx, "r")
	pctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	pl := p.Pipeline(pctx, 4)
	r1 := answer(t, "k1", pl.Submit(op("k1", "one")))
	mustOutcome(t, "k1", r1.Result, r1.Err, Applied, reasonNone)
	second, resume := gated(t, "k2", "two")
	chans := []<-chan PipelineResult{pl.Submit(second), pl.Submit(op("k3", "three")), pl.Submit(op("k4", "four"))}
	px.Set(faultproxy.Faults{DropDownstream: true})
	resume()
	r2 := mustStopAt(t, pl, chans, Unknown, reasonNone)
	px.Set(faultproxy.Faults{})
	px.ResetAll()
	got, err := e.pub.Resolve(ctx, "r", "k2", r2.Result.Version, r2.Result.AttemptID())
	mustOutcome(t, "resolve k2", got, err, Applied, reasonNone)
	if n := p.nextSeq(); n != r2.Result.Version.Seq+1 {
		t.Fatalf("NextSeq %d; want %d, right above the unknown", n, r2.Result.Version.Seq+1)
	}
	r5, err := p.Publish(ctx, op("k3", "three"))
	mustOutcome(t, "k3 published again", r5, err, Applied, reasonNone)
	if h := e.history("r"); len(h) != 3 || h[2] != r5.Version {
		t.Fatalf("history %v; want k1, k2, k3", h)
	}
}

// TestPipelineCancel: ending the pipeline's context while an operation's
// object write is paused stops it: that operation fails with the
// context's error (nothing published), the later ones are not sent, every
// one is answered, and all their seqs are given back.
func TestPipelineCancel(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bind(e.acquire(authority.AcquireRequest{Resource: "r", Owner: "w"}), false)
	pctx, cancel := context.WithCancel(ctx)
	pl := p.Pipeline(pctx, 3)
	r1 := answer(t, "k1", pl.Submit(op("k1", "one")))
	mustOutcome(t, "k1", r1.Result, r1.Err, Applied, reasonNone)
	paused, _ := gated(t, "k2", "two")
	chans := []<-chan PipelineResult{pl.Submit(paused), pl.Submit(op("k3", "three"))}
	cancel()
	r2 := answer(t, "k2", chans[0])
	if !errors.Is(r2.Err, context.Canceled) || errors.Is(r2.Err, ErrPipelineStopped) || r2.Result.Outcome != "" {
		t.Fatalf("k2: %+v, %v; want the context's error and no outcome", r2.Result, r2.Err)
	}
	mustNotSent(t, "k3", answer(t, "k3", chans[1]))
	if err := pl.Close(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	mustNotSent(t, "submit after cancel", answer(t, "k4", pl.Submit(op("k4", "x"))))
	if n := p.nextSeq(); n != 2 {
		t.Fatalf("NextSeq %d; want 2: nothing was sent after k1", n)
	}
	if h := e.history("r"); len(h) != 1 {
		t.Fatalf("history %v", h)
	}
}

// TestPipelineContiguous: in contiguous mode every seq must follow the
// pointer, so 8 operations in a pipeline of depth 4 apply only because
// their transactions go one at a time in seq order. A body that fails
// stops the pipeline; its seq and the later ones are given back, so the
// next publish follows the pointer with no gap.
func TestPipelineContiguous(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p := e.bindContiguous(ctx, "r")
	pl := p.Pipeline(ctx, 4)
	var chans []<-chan PipelineResult
	for i := 1; i <= 8; i++ {
		chans = append(chans, pl.Submit(op(fmt.Sprintf("k%d", i), fmt.Sprintf("body %d", i))))
	}
	broken := Operation{IdempotencyKey: "k9", Body: iotest.ErrReader(errors.New("disk gone"))}
	chans = append(chans, pl.Submit(broken), pl.Submit(op("k10", "ten")))
	for i, ch := range chans[:8] {
		r := answer(t, fmt.Sprint("k", i+1), ch)
		mustOutcome(t, fmt.Sprint("k", i+1), r.Result, r.Err, Applied, reasonNone)
	}
	if r := answer(t, "k9", chans[8]); !errors.Is(r.Err, ErrBody) || r.Result.Outcome != "" {
		t.Fatalf("k9: %+v, %v; want ErrBody and no outcome", r.Result, r.Err)
	}
	mustNotSent(t, "k10", answer(t, "k10", chans[9]))
	if err := pl.Close(); !errors.Is(err, ErrBody) {
		t.Fatalf("Close: %v", err)
	}
	if n := p.nextSeq(); n != 9 {
		t.Fatalf("NextSeq %d; want 9", n)
	}
	r, err := p.Publish(ctx, op("k10", "ten"))
	mustOutcome(t, "k10 after the stop", r, err, Applied, reasonNone)
	if h := e.history("r"); len(h) != 9 || h[8].Seq != 9 {
		t.Fatalf("history %v; want seqs 1..9", h)
	}
}

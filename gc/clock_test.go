//go:build !unit

package gc

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/publisher"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fakeTime is a wall clock and an in-memory lease API whose timer the test
// moves: elapse(d) adds d to the wall clock and to every live lease's run.
// Safe for concurrent use.
type fakeTime struct {
	mu      sync.Mutex
	wall    time.Time
	next    clientv3.LeaseID
	elapsed map[clientv3.LeaseID]time.Duration // live leases
	ttl     map[clientv3.LeaseID]int64
	granted []clientv3.LeaseID
}

func newFakeTime() *fakeTime {
	return &fakeTime{wall: time.Now(), next: 1000, elapsed: map[clientv3.LeaseID]time.Duration{}, ttl: map[clientv3.LeaseID]int64{}}
}

// elapse moves the wall clock by wall and etcd's lease timer by lease.
func (f *fakeTime) elapse(wall, lease time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(wall)
	for id := range f.elapsed {
		f.elapsed[id] += lease
	}
}

func (f *fakeTime) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wall
}

func (f *fakeTime) live(id clientv3.LeaseID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.elapsed[id]
	return ok
}

func (f *fakeTime) Grant(_ context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.elapsed[f.next], f.ttl[f.next] = 0, ttl
	f.granted = append(f.granted, f.next)
	return &clientv3.LeaseGrantResponse{ID: f.next, TTL: ttl}, nil
}

func (f *fakeTime) Revoke(_ context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.elapsed[id]; !ok {
		return nil, rpctypes.ErrLeaseNotFound
	}
	delete(f.elapsed, id)
	return &clientv3.LeaseRevokeResponse{}, nil
}

func (f *fakeTime) TimeToLive(_ context.Context, id clientv3.LeaseID, _ ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.elapsed[id]
	if !ok {
		return &clientv3.LeaseTimeToLiveResponse{ID: id, TTL: -1}, nil
	}
	return &clientv3.LeaseTimeToLiveResponse{ID: id, TTL: max(0, f.ttl[id]-int64(e/time.Second)), GrantedTTL: f.ttl[id]}, nil
}

// fakeClocked is a Config mod: wall clock and lease timer from f.
func fakeClocked(f *fakeTime) func(*Config) {
	return func(c *Config) { c.now, c.leases = f.now, f }
}

// head reads the clock's head.
func (e *env) head() clockHead {
	e.t.Helper()
	kv := e.get(e.NS.ClockHeadKey())
	if kv == nil {
		e.t.Fatal("no clock head")
	}
	var h clockHead
	if err := json.Unmarshal(kv.Value, &h); err != nil {
		e.t.Fatal(err)
	}
	return h
}

// advance advances c's clock (or reads it, with dry) and fails t on an error.
func advance(t *testing.T, c *Collector, dry bool) *clockReading {
	t.Helper()
	r, err := c.advanceClock(ctxT(t, 30*time.Second), dry)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rev returns etcd's current revision.
func (e *env) rev() int64 {
	e.t.Helper()
	resp, err := e.Etcd.Get(ctxT(e.t, 10*time.Second), e.NS.EpochKey())
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Header.Revision
}

// The clock advances by the smaller of the collector's wall-clock delta and
// the witness lease's run by etcd's timer, less a second; a wall clock that
// jumps ahead or back, or a witness that is gone, never moves it further.
func TestClockAdvance(t *testing.T) {
	e := newEnv(t)
	f := newFakeTime()
	c := e.collector(fakeClocked(f))
	before := e.rev()
	r := advance(t, c, false)
	t0 := f.now().UnixNano()
	if !r.advanced || r.t != t0 || len(r.points) != 1 || r.points[0].Rev != before+1 {
		t.Fatalf("first advance: %+v; want the wall time %d and one checkpoint before revision %d", r, t0, before+1)
	}
	if h := e.head(); h.T != t0 || !f.live(clientv3.LeaseID(h.Lease)) {
		t.Fatalf("head %+v", h)
	}
	step := func(name string, wall, lease, want time.Duration, advanced bool) *clockReading {
		t.Helper()
		prev := e.head()
		f.elapse(wall, lease)
		r := advance(t, c, false)
		if got := time.Duration(r.t - prev.T); got != want || r.advanced != advanced {
			t.Fatalf("%s: the clock moved %s (advanced %v); want %s (%v)", name, got, r.advanced, want, advanced)
		}
		if advanced && f.live(clientv3.LeaseID(prev.Lease)) {
			t.Fatalf("%s: the previous witness %d was not revoked", name, prev.Lease)
		}
		return r
	}
	step("an hour on both clocks", time.Hour, time.Hour, time.Hour-time.Second, true)
	step("wall clock jumps 10 days, etcd says a minute", 10*24*time.Hour, time.Minute, time.Minute-time.Second, true)
	step("wall clock goes back a day", -24*time.Hour, time.Hour, 0, false)
	step("wall clock back on time: its delta since the head is less than the lease", 25*time.Hour, 2*time.Hour, time.Hour, true)
	step("less than a step", 500*time.Millisecond, 500*time.Millisecond, 0, false)

	// A witness that is gone (revoked, or expired after its TTL) gives no
	// credit: the clock re-anchors on a new witness at the same time.
	h := e.head()
	if _, err := f.Revoke(context.Background(), clientv3.LeaseID(h.Lease)); err != nil {
		t.Fatal(err)
	}
	r = step("witness gone", 40*24*time.Hour, 40*24*time.Hour, 0, true)
	if e.head().Lease == h.Lease {
		t.Fatal("no new witness after the old one was gone")
	}
	// A dry run reads the virtual advance and writes nothing.
	n := len(r.points)
	f.elapse(time.Hour, time.Hour)
	headBefore := e.get(e.NS.ClockHeadKey()).ModRevision
	dry := advance(t, c, true)
	if dry.advanced || time.Duration(dry.t-r.t) != time.Hour-time.Second || len(dry.points) != n || e.get(e.NS.ClockHeadKey()).ModRevision != headBefore {
		t.Fatalf("dry run: %+v (head written: %v)", dry, e.get(e.NS.ClockHeadKey()).ModRevision != headBefore)
	}
	// Cutoffs: the latest checkpoint at least age old.
	for _, tc := range []struct {
		age  time.Duration
		want int64
	}{{0, dry.points[n-1].Rev}, {time.Hour - time.Second, dry.points[n-1].Rev}, {time.Hour, dry.points[n-2].Rev}, {100 * 24 * time.Hour, 0}} {
		if got := dry.cutoff(tc.age); got != tc.want {
			t.Errorf("cutoff(%s) = %d; want %d", tc.age, got, tc.want)
		}
	}
}

// Two advances racing: the one whose transaction lands second loses,
// revokes its witness and reads the winner's clock; no checkpoint is lost.
// Then collectors advancing concurrently keep the checkpoints ordered and
// leave one witness.
func TestClockConcurrentAdvance(t *testing.T) {
	e := newEnv(t)
	f := newFakeTime()
	a, b := e.collector(fakeClocked(f)), e.collector(fakeClocked(f))
	advance(t, a, false)
	f.elapse(time.Hour, time.Hour)
	var won *clockReading
	a.beforeClockTxn = func() {
		a.beforeClockTxn = nil
		won = advance(t, b, false)
	}
	lost := advance(t, a, false)
	a.beforeClockTxn = nil
	h := e.head()
	if !won.advanced || lost.advanced || lost.t != won.t || h.T != won.t || len(lost.points) != 2 {
		t.Fatalf("winner %+v, loser %+v, head %+v", won, lost, h)
	}
	if loser := f.granted[len(f.granted)-2]; f.live(loser) || !f.live(clientv3.LeaseID(h.Lease)) {
		t.Fatalf("the loser's witness %d is live: %v; the head's %d: %v", loser, f.live(loser), h.Lease, f.live(clientv3.LeaseID(h.Lease)))
	}

	var wg sync.WaitGroup
	cs := []*Collector{a, b, e.collector(fakeClocked(f)), e.collector(fakeClocked(f))}
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				f.elapse(time.Minute, time.Minute)
				if _, err := c.advanceClock(context.Background(), false); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	final := advance(t, a, true)
	h = e.head()
	for i := 1; i < len(final.points); i++ {
		if p, q := final.points[i-1], final.points[i]; p.T >= q.T || p.Rev >= q.Rev {
			t.Fatalf("checkpoints out of order: %+v then %+v", p, q)
		}
	}
	if last := final.points[len(final.points)-1]; last.T != h.T || len(final.points) < 3 {
		t.Fatalf("head %+v, checkpoints %+v", h, final.points)
	}
	for _, id := range f.granted {
		if f.live(id) != (id == clientv3.LeaseID(h.Lease)) {
			t.Errorf("witness %d live %v; the head's is %d", id, f.live(id), h.Lease)
		}
	}
}

// Thinning keeps every checkpoint of the last 10 minutes, one a minute to
// 2 h, one an hour beyond, the one each retention cuts at, and none older
// than the longest retention needs: the number stays bounded.
func TestClockThinning(t *testing.T) {
	e := newEnv(t)
	f := newFakeTime()
	c := e.collector(func(c *Config) { fakeClocked(f)(c); c.RequestRetention = 3 * time.Hour; c.OpRetention = 5 * time.Hour })
	advance(t, c, false)
	for range 40 { // 20 min apart
		f.elapse(20*time.Minute, 20*time.Minute)
		advance(t, c, false)
	}
	for range 30 { // 15 s apart
		f.elapse(15*time.Second, 15*time.Second)
		advance(t, c, false)
	}
	r := advance(t, c, true)
	if len(r.points) > 45 {
		t.Fatalf("%d checkpoints kept", len(r.points))
	}
	buckets := map[[2]int64]bool{}
	for _, p := range r.points {
		age := time.Duration(r.t - p.T)
		var b [2]int64
		switch {
		case age < clockKeepAll:
			continue
		case age < clockKeepMinutes:
			b = [2]int64{1, p.T / int64(time.Minute)}
		default:
			b = [2]int64{2, p.T / int64(time.Hour)}
		}
		if buckets[b] && p.Rev != r.cutoff(5*time.Hour) && p.Rev != r.cutoff(3*time.Hour) {
			t.Errorf("two checkpoints in bucket %v", b)
		}
		buckets[b] = true
	}
	oldest := time.Duration(r.t - r.points[0].T)
	// Past 2 h one checkpoint an hour is kept, so the one 5 h needs is at
	// most an hour (and a step) older than 5 h.
	if oldest < 5*time.Hour || oldest > 6*time.Hour+20*time.Minute {
		t.Fatalf("oldest checkpoint %s old; want within an hour and a step past the 5 h op retention", oldest)
	}
	if r.cutoff(5*time.Hour) == 0 || r.cutoff(3*time.Hour) == 0 || r.cutoff(11*time.Minute) == 0 {
		t.Fatal("a retention in use lost its checkpoint")
	}
	if recent := time.Duration(r.t - r.points[len(r.points)-30].T); recent > clockKeepAll {
		t.Fatalf("the last 30 checkpoints span %s; want all of the last %s kept", recent, clockKeepAll)
	}
}

// A collector whose wall clock jumps 10 days ahead, while etcd's lease
// timer says little time passed, prunes no op record, request record or
// history entry younger than its retention, and keeps what is inside the
// reader grace.
func TestClockJumpPrunesNothing(t *testing.T) {
	e := newEnv(t)
	const res = "jump"
	a, pa := e.worker(res, "a")
	p1 := e.publish(pa, "j1", publisher.Applied)
	e.publish(pa, "j2", publisher.Applied)
	e.release(a)
	_, pb := e.worker(res, "b")
	e.publish(pb, "j3", publisher.Applied)
	e.run(e.collector(nil), res)
	for _, d := range []time.Duration{10 * 24 * time.Hour, 20 * 24 * time.Hour} {
		rep := e.run(e.collector(jumped(d)), res)
		if rep.Records != (operator.GCRecordCounts{Grants: rep.Records.Grants}) || rep.Deleted != 0 {
			t.Fatalf("clock %s ahead: records %+v, %d objects deleted", d, rep.Records, rep.Deleted)
		}
		mustDecide(t, rep, p1.Object.Key, kindRetained, "kept", "within the reader grace")
	}
	if n := e.Count(e.NS.OpsPrefix(res)); n != 3 {
		t.Fatalf("%d op records left; want 3", n)
	}
	if n := e.Count(e.NS.RequestsPrefix(res)); n != 2 {
		t.Fatalf("%d request records left; want 2", n)
	}
}

//go:build !unit

package reader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// slowKV is the real etcd KV whose Get answers reach the caller delay after
// etcd served them (a slow network), counting the Gets sent, those whose
// context ended during the delay, and those that ended.
type slowKV struct {
	clientv3.KV
	delay                  time.Duration
	gets, cancelled, ended atomic.Int64
	panics                 atomic.Int64 // Gets that panic, left to do
}

func (s *slowKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	s.gets.Add(1)
	defer s.ended.Add(1)
	if s.panics.Add(-1) >= 0 {
		panic("boom in Get")
	}
	resp, err := s.KV.Get(ctx, key, opts...)
	select {
	case <-time.After(s.delay):
		return resp, err
	case <-ctx.Done():
		s.cancelled.Add(1)
		return nil, ctx.Err()
	}
}

// slowEtcd returns a client of the shared etcd whose Gets are slowed by
// delay, and its counter.
func slowEtcd(t *testing.T, delay time.Duration) (*clientv3.Client, *slowKV) {
	cli := testenv.Get(t).EtcdClient(t)
	kv := &slowKV{KV: cli.KV, delay: delay}
	kv.panics.Store(-1 << 40)
	cli.KV = kv
	return cli, kv
}

// Concurrent Current calls on one Reader share etcd reads, and every call
// still sees every pointer written before it began (linearizable): a call
// never joins a read already sent. The slowed answers leave a window in
// which a write completes after a read was served; a call that began after
// that write and took the served read would return an older version.
func TestSharedReadsAreLinearizable(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	p := e.publish("k0", "zero")
	cli, kv := slowEtcd(t, 5*time.Millisecond)
	for _, serializable := range []bool{false, true} {
		rd := e.reader(cli, func(c *Config) { c.Serializable = serializable })
		var written atomic.Uint64 // the highest seq whose put returned
		written.Store(p.Version.Seq)
		stop := make(chan struct{})
		var writer sync.WaitGroup
		writer.Go(func() {
			for i := 0; i < 60; i++ {
				p.Version.Seq++
				e.putPointer(p)
				written.Store(p.Version.Seq)
				time.Sleep(time.Millisecond)
			}
			close(stop)
		})
		gets := kv.gets.Load()
		var calls atomic.Int64
		errs := make(chan error, 16)
		var readers sync.WaitGroup
		for range 16 {
			readers.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					// Staggered arrivals: calls join reads at every stage.
					time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
					before := written.Load()
					cur, err := rd.Current(ctx)
					calls.Add(1)
					if err != nil {
						errs <- err
						return
					}
					if cur.Version.Seq < before {
						errs <- errors.New("stale read: got version " + cur.Version.String() + " though a later write had returned before the call")
						return
					}
				}
			})
		}
		writer.Wait()
		readers.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("serializable=%v: %v", serializable, err)
		}
		sent := kv.gets.Load() - gets
		if n := calls.Load(); sent*2 > n {
			t.Errorf("serializable=%v: %d calls sent %d etcd reads; want them shared (at most half)", serializable, n, sent)
		}
		t.Logf("serializable=%v: %d calls, %d etcd reads", serializable, calls.Load(), sent)
	}
}

// A call whose context ends while it waits for a shared read returns its
// context's error at once (not fencepub.ErrUnavailable), and the read still serves
// the calls that wait for it; a read whose callers all left is cancelled,
// so nobody after them waits for it; a panic of the read reaches its
// callers, not the process.
func TestSharedReadCallersLeave(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	p := e.publish("k0", "zero")
	cli, kv := slowEtcd(t, 300*time.Millisecond)
	rd := e.reader(cli)
	short := func() error {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err := rd.Current(sctx)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, fencepub.ErrUnavailable) {
			return fmt.Errorf("a caller whose context ended: %v; want its deadline, not fencepub.ErrUnavailable", err)
		}
		return nil
	}

	// A blocker's read is in flight; the patient and the short caller share
	// the read pending behind it, and the short one leaves.
	blocker, patient := make(chan error, 1), make(chan error, 1)
	current := func(ch chan<- error) {
		cur, err := rd.Current(ctx)
		if err == nil && cur.Version != p.Version {
			err = errors.New("got " + cur.Version.String())
		}
		ch <- err
	}
	go current(blocker)

	// state reports whether a linearizable read is in flight and how many
	// calls wait for the read pending behind it.
	state := func() (inflight bool, pending int) {
		rd.mu.Lock()
		defer rd.mu.Unlock()
		q := rd.reads[0]
		if q.pending != nil {
			pending = q.pending.waiters
		}
		return q.inflight != nil, pending
	}
	testenv.Eventually(t, "the blocker's read in flight", 10*time.Second, func() bool { in, _ := state(); return in })
	go current(patient)
	testenv.Eventually(t, "the patient waits for the pending read", 10*time.Second, func() bool { _, n := state(); return n == 1 })
	if err := short(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"blocker": blocker, "patient": patient} {
		if err := <-ch; err != nil {
			t.Fatalf("the %s: %v", name, err)
		}
	}
	if n := kv.cancelled.Load(); n != 0 {
		t.Fatalf("%d reads cancelled while a caller still waited", n)
	}

	// Alone, the short caller's read is orphaned: it must be cancelled,
	// not left to run (or to hold up the next caller).
	ended := kv.ended.Load()
	if err := short(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the orphaned read ends", 10*time.Second, func() bool { return kv.ended.Load() != ended })
	if n := kv.cancelled.Load(); n != 1 {
		t.Fatalf("the read whose only caller left: %d reads cancelled, want 1", n)
	}

	kv.panics.Store(1)
	func() {
		defer func() {
			if v := recover(); v != "boom in Get" {
				t.Fatalf("recovered %v; want the read's panic in its caller", v)
			}
		}()
		_, _ = rd.Current(ctx)
	}()
	if cur, err := rd.Current(ctx); err != nil || cur.Version != p.Version {
		t.Fatalf("after a read panicked: %s, %v", cur.Version, err)
	}
}

// Config.RequestTimeout bounds a call's wait for the pointer from the call's
// arrival, time spent behind the read in flight included: against an etcd
// that never answers, a call that arrives while another's read is in flight
// (its caller still waiting, or gone) gets fencepub.ErrUnavailable within
// RequestTimeout, before its own longer deadline, instead of waiting for
// two reads.
func TestSharedReadRequestTimeout(t *testing.T) {
	e := newEnv(t)
	const timeout = 2 * time.Second
	for _, firstStays := range []bool{true, false} {
		r := e.reader(unreachableEtcd(t), func(c *Config) { c.RequestTimeout = timeout })
		first := ctxT(t, time.Minute)
		if !firstStays {
			first = ctxT(t, 50*time.Millisecond)
		}
		done := make(chan error, 1)
		go func() { _, err := r.Current(first); done <- err }()
		testenv.Eventually(t, "the first caller's read in flight", 10*time.Second, func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.reads[0].inflight != nil
		})
		if !firstStays {
			<-done // the first caller is gone
		}
		_, err := r.Current(ctxT(t, timeout+timeout*3/4))
		if !errors.Is(err, fencepub.ErrUnavailable) {
			t.Errorf("first caller stays=%v: a later caller got %v; want fencepub.ErrUnavailable within RequestTimeout", firstStays, err)
		}
		if firstStays {
			<-done
		}
	}
}

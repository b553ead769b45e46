//go:build !unit

package gc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/internal/wait"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The race: GC passes run in a loop while 8 publishers —
// 7 goroutines, some of which stop renewing past their lease, and one child
// process that is paused with SIGSTOP past its lease — publish on 3
// resources and readers read continuously. A ninth, lossy publisher on a
// fourth resource loses the transaction of its last publish of every term
// and lets its lease expire, so GC seals and deletes abandoned objects while
// that publisher's next term publishes. Afterwards: no reader failed to
// fetch the object of a pointer it read within the grace period, nothing
// deleted was publishable, and after a final pass every object left is
// published or retained (the orphans are gone).
func TestRaceGCWithPublishersAndReaders(t *testing.T) {
	e := newEnv(t)
	resources := []string{"r0", "r1", "r2", "lossy"}
	const (
		ttl      = 2 * time.Second
		duration = 8 * time.Second
	)
	policy := Policy{Retain: 2, Grace: time.Second, ClockSkew: 200 * time.Millisecond, AbandonAfter: time.Second}
	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	var (
		wg       sync.WaitGroup
		failMu   sync.Mutex
		failures []string
		reads    atomic.Int64
		applied  atomic.Int64
		stale    atomic.Int64
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	ignorable := func(err error) bool { return err == nil || ctx.Err() != nil }

	// The paused worker: a child process on r0.
	kid := e.startChild("worker", helperConfig{Resource: "r0", Owner: "child", TTL: ttl})
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, at := range []time.Duration{time.Second, 4500 * time.Millisecond} {
			wait.Sleep(ctx, time.Until(start.Add(at)))
			if ctx.Err() != nil {
				return
			}
			if err := kid.Signal(syscall.SIGSTOP); err != nil {
				fail("SIGSTOP: %v", err)
				return
			}
			time.Sleep(ttl + 500*time.Millisecond) // past its lease
			if err := kid.Signal(syscall.SIGCONT); err != nil {
				fail("SIGCONT: %v", err)
				return
			}
		}
	}()

	// Seven goroutine publishers.
	for i := range 7 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			res := resources[i%3]
			for n := 0; ctx.Err() == nil; n++ {
				g, err := e.auth.Acquire(ctx, authority.AcquireRequest{Resource: res, Owner: fmt.Sprintf("p%d-%d", i, n), TTL: ttl, Wait: true})
				if err != nil {
					if !ignorable(err) {
						fail("acquire: %v", err)
					}
					continue
				}
				p, err := e.pub.Bind(ctx, publisher.GrantTerm(g, false))
				if err != nil {
					if !ignorable(err) {
						fail("bind: %v", err)
					}
					continue
				}
				pause := rng.IntN(3) == 0
				for k := range 2 + rng.IntN(4) {
					if pause && k == 1 {
						time.Sleep(ttl + 300*time.Millisecond) // stops renewing: paused past the lease
					}
					r, err := p.Publish(ctx, op(fmt.Sprintf("p%d-%d-%d", i, n, k), "goroutine"))
					switch {
					case r.Outcome == publisher.Applied:
						applied.Add(1)
					case r.Outcome == publisher.Stale:
						stale.Add(1)
					case !ignorable(err):
						fail("publish: %+v %v", r, err)
					}
					time.Sleep(30 * time.Millisecond)
				}
				if !pause {
					_ = e.auth.Release(context.Background(), g)
				}
			}
		}()
	}

	// The lossy publisher: its etcd client goes through a fault proxy.
	px, pxCli := testenv.Get(t).EtcdProxy(t)
	lossyPub := e.publisher(pxCli, func(c *publisher.Config) {
		c.RequestTimeout, c.ResendTimeout = 100*time.Millisecond, 300*time.Millisecond
	})
	var lost atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ctx.Err() == nil; n++ {
			g, err := e.auth.Acquire(ctx, authority.AcquireRequest{Resource: "lossy", Owner: fmt.Sprintf("lossy-%d", n), TTL: ttl, Wait: true})
			if err != nil {
				if !ignorable(err) {
					fail("acquire: %v", err)
				}
				continue
			}
			p, err := lossyPub.Bind(ctx, publisher.GrantTerm(g, false))
			if err != nil {
				if !ignorable(err) {
					fail("bind: %v", err)
				}
				continue
			}
			// Compute for a while first: the previous term's lost object
			// stays in flight of an expired grant meanwhile (abandoned).
			wait.Sleep(ctx, time.Second)
			for k := range 3 {
				if k == 2 {
					px.Set(faultproxy.Faults{DropUpstream: true})
				}
				// Without a deadline the publisher gives up after its
				// ResendTimeout (300 ms), not at the end of the test.
				r, err := p.Publish(context.WithoutCancel(ctx), op(fmt.Sprintf("lossy-%d-%d", n, k), "lossy"))
				switch {
				case r.Outcome == publisher.Applied:
					applied.Add(1)
				case r.Outcome == publisher.Unknown:
					lost.Add(1)
				case !ignorable(err):
					fail("lossy publish: %+v %v", r, err)
				}
			}
			px.Set(faultproxy.Faults{})
			px.ResetAll()
			// No release: the lease expires; the next term waits for it.
		}
	}()

	// Readers: the reader package, and a strict check that reads the
	// pointer, waits up to 300 ms (well within the 1 s grace) and fetches
	// exactly that object.
	for _, res := range resources {
		rd, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}}, res)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				b, err := rd.Open(ctx)
				if err == nil {
					_, err = io.Copy(io.Discard, b)
					b.Close()
				}
				if err != nil && !errors.Is(err, reader.ErrNotPublished) && !ignorable(err) {
					fail("reader of %s: %v", res, err)
				}
				reads.Add(1)
			}
		}()
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(len(res)), 9))
			for ctx.Err() == nil {
				ptr, err := rd.Current(ctx)
				if err != nil {
					if !errors.Is(err, reader.ErrNotPublished) && !ignorable(err) {
						fail("current of %s: %v", res, err)
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				readAt := time.Now()
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
				_, err = e.Store.Stat(context.Background(), ptr.Object.Key)
				if err != nil {
					fail("%s: the object of pointer %s, read %s ago, is gone: %v", res, ptr.Version, time.Since(readAt), err)
				}
				reads.Add(1)
			}
		}()
	}

	// GC in a loop.
	var (
		repMu sync.Mutex
		reps  []*passReport
	)
	gcDone := make(chan struct{})
	c := e.collector(func(c *Config) { c.Policy = policy })
	go func() {
		defer close(gcDone)
		for ctx.Err() == nil {
			rep, err := c.runPass(ctx, RunOptions{All: true}, true)
			if err != nil && ctx.Err() == nil {
				fail("gc pass: %v", err)
			}
			repMu.Lock()
			reps = append(reps, rep)
			repMu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	<-ctx.Done()
	wg.Wait()
	<-gcDone
	stopChild(t, kid, 10*time.Second)
	childLines := kid.Lines()
	childApplied := 0
	for _, l := range childLines {
		if strings.HasPrefix(l, "applied ") {
			childApplied++
		}
	}
	var deleted, sealed int64
	for _, r := range reps {
		deleted += r.Deleted
		sealed += r.Sealed
	}
	t.Logf("%d gc passes deleted %d objects (%d sealed first); publishes: %d applied, %d stale by goroutines, %d lost transactions, %d lines from the child (%d applied); %d reads",
		len(reps), deleted, sealed, applied.Load(), stale.Load(), lost.Load(), len(childLines), childApplied, reads.Load())
	for _, f := range failures {
		t.Error(f)
	}
	if applied.Load() == 0 || childApplied == 0 || deleted == 0 || sealed == 0 || reads.Load() == 0 {
		t.Fatal("the race did not exercise publishing, collection and reading")
	}
	for _, res := range resources {
		e.deletedSafelyUnder(res, reps...)
	}

	// Once every lease has expired or been released, final passes with the
	// clock past every grace and abandon period leave only published and
	// retained objects.
	for _, res := range resources {
		waitFor(t, "the leases of "+res+" end", 2*ttl, func() bool {
			_, held, err := e.auth.Holder(ctxT(t, 10*time.Second), res)
			if err != nil {
				t.Fatal(err)
			}
			return !held
		})
	}
	// The first of them puts a checkpoint of the domain clock after every
	// publish; the second is an hour past it.
	e.run(e.collector(func(c *Config) { c.Policy = policy; later(time.Hour)(c) }))
	final := e.run(e.collector(func(c *Config) { c.Policy = policy; later(2 * time.Hour)(c) }))
	for _, res := range resources {
		keep := map[string]bool{e.Pointer(res).Object.Key: true}
		hist, err := e.Etcd.Get(ctxT(t, 10*time.Second), e.NS.HistoryPrefix(res), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(policy.Retain)))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range hist.Kvs {
			p, err := decodePointerKV(kv)
			if err != nil {
				t.Fatal(err)
			}
			keep[p.Object.Key] = true
		}
		for _, k := range e.Keys(e.NS.ObjectsPrefix(res)) {
			if !keep[k] {
				d := decisionOf(t, final, k)
				t.Errorf("%s left after the final pass: %s (%s)", k, d.Kind, d.Reason)
			}
		}
		for k := range keep {
			if !e.Exists(k) {
				t.Errorf("%s: published or retained object %s is gone", res, k)
			}
		}
	}
}

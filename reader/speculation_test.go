//go:build !unit

package reader

// Open's speculation, OpenPointer, WriteTo and ErrWentBack while the
// pointer moves and objects go, against real etcd and MinIO. Run with -race.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
)

// atkBody is the body published under idempotency key key.
func atkBody(key string) string { return "body of " + key }

// checkBody reads b to EOF (verified) and checks that its bytes are those
// published under its pointer's idempotency key.
func checkBody(b *Body) error {
	defer b.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, b); err != nil { // WriteTo
		return fmt.Errorf("read %s: %w", b.Pointer.Version, err)
	}
	if want := atkBody(b.Pointer.IdempotencyKey); buf.String() != want {
		return fmt.Errorf("pointer %s (%s) served %q; want %q", b.Pointer.Version, b.Pointer.IdempotencyKey, buf.String(), want)
	}
	return nil
}

// publishWhileReading publishes k001..k<n> (bodies atkBody) while the
// readers in wg run, then calls stop, waits for them and reports every
// error they sent on errs.
func (e *env) publishWhileReading(ctx context.Context, n int, stop func(), wg *sync.WaitGroup, errs chan error) {
	e.t.Helper()
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("k%03d", i)
		if _, err := e.pub.Publish(ctx, publisher.Operation{IdempotencyKey: key, Body: strings.NewReader(atkBody(key))}); err != nil {
			e.t.Fatal(err)
		}
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Error(err)
	}
}

// Several goroutines Open (and read to EOF through WriteTo) one Reader while
// the pointer moves. Every body must verify and hold its pointer's bytes,
// each goroutine must see non-decreasing versions, and — etcd's history
// never goes back here — no call may fail with ErrWentBack, whose doc says
// only a restore or an out-of-band write explains it.
func TestConcurrentOpensWhilePointerMoves(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	e.publish("k000", atkBody("k000"))
	r := e.reader(e.Etcd)

	const readers, publishes = 6, 60
	var (
		stop     atomic.Bool
		wentBack atomic.Int64
		opens    atomic.Int64
		wg       sync.WaitGroup
		firstErr = make(chan error, readers*2)
	)
	for i := range readers {
		wg.Go(func() {
			var last layout.Version
			for !stop.Load() {
				var (
					b   *Body
					err error
				)
				if i%2 == 0 {
					b, err = r.Open(ctx)
				} else {
					var ptr layout.Pointer
					if ptr, err = r.Current(ctx); err == nil {
						b, err = r.OpenPointer(ctx, ptr)
					}
				}
				if errors.Is(err, ErrWentBack) {
					if wentBack.Add(1) == 1 {
						firstErr <- fmt.Errorf("goroutine %d: %w", i, err)
					}
					continue
				}
				if err != nil {
					firstErr <- fmt.Errorf("goroutine %d: open: %w", i, err)
					return
				}
				opens.Add(1)
				if b.Pointer.Version.Compare(last) < 0 {
					firstErr <- fmt.Errorf("goroutine %d: got %s after %s", i, b.Pointer.Version, last)
				}
				last = b.Pointer.Version
				if err := checkBody(b); err != nil {
					firstErr <- fmt.Errorf("goroutine %d: %w", i, err)
					return
				}
			}
		})
	}
	e.publishWhileReading(ctx, publishes, func() { stop.Store(true) }, &wg, firstErr)
	t.Logf("%d opens during %d publishes; %d spurious ErrWentBack", opens.Load(), publishes, wentBack.Load())
	if opens.Load() == 0 {
		t.Fatal("no open succeeded while the pointer moved")
	}
}

// A Watch and Opens share one Reader (a service that watches for cache
// invalidation and opens per request). The watch raises the Reader's
// highest version as events arrive; an Open whose linearizable pointer
// read was served just before that publish must still succeed (it read a
// pointer that was current when it read it) — never ErrWentBack.
func TestWatchAndOpenShareReader(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	e.publish("k000", atkBody("k000"))
	r := e.reader(e.Etcd)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := r.Watch(wctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range updates {
		}
	})

	const openers, publishes = 4, 60
	var stop atomic.Bool
	var wentBack, opens atomic.Int64
	errs := make(chan error, openers*4)
	for range openers {
		wg.Go(func() {
			for !stop.Load() {
				b, err := r.Open(ctx)
				if errors.Is(err, ErrWentBack) {
					if wentBack.Add(1) <= 2 {
						errs <- err
					}
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				opens.Add(1)
				if err := checkBody(b); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	e.publishWhileReading(ctx, publishes, func() { stop.Store(true); cancel() }, &wg, errs)
	t.Logf("%d opens alongside a watch during %d publishes; %d spurious ErrWentBack", opens.Load(), publishes, wentBack.Load())
	if opens.Load() == 0 {
		t.Fatal("no open succeeded alongside the watch")
	}
}

// The pointer moves while Open's speculative GET of the last object is in
// flight and before the (slowed) pointer read is answered: the speculative
// body must be dropped and the new pointer's object served, verified; the
// versions returned never go back.
func TestPointerMovesDuringSpeculation(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	e.publish("k000", atkBody("k000"))
	px, cli := testenv.Get(t).EtcdProxy(t)
	r := e.reader(cli)
	b, err := r.Open(ctx) // r.opened = k000: the next Open speculates
	if err != nil {
		t.Fatal(err)
	}
	if err := checkBody(b); err != nil {
		t.Fatal(err)
	}
	px.Set(faultproxy.Faults{Latency: 60 * time.Millisecond})
	var last layout.Version
	moved := 0
	for i := 1; i <= 15; i++ {
		key := fmt.Sprintf("k%03d", i)
		done := make(chan *Body, 1)
		errc := make(chan error, 1)
		go func() {
			b, err := r.Open(ctx)
			if err != nil {
				errc <- err
				return
			}
			done <- b
		}()
		time.Sleep(20 * time.Millisecond) // the speculative GET is out, the pointer read is on the wire
		pub := e.publish(key, atkBody(key))
		select {
		case err := <-errc:
			t.Fatalf("open %d: %v", i, err)
		case b := <-done:
			if b.Pointer.Version == pub.Version {
				moved++
			}
			if b.Pointer.Version.Compare(last) < 0 {
				t.Fatalf("open %d returned %s after %s", i, b.Pointer.Version, last)
			}
			last = b.Pointer.Version
			if err := checkBody(b); err != nil {
				t.Fatalf("open %d: %v", i, err)
			}
		}
	}
	t.Logf("%d of 15 opens saw the pointer that moved under their speculation", moved)
	if moved == 0 {
		t.Fatal("the pointer never moved between the speculative GET and the pointer read")
	}
}

// Objects deleted under the reader.
func TestObjectsDeletedUnderReader(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	r := e.reader(e.Etcd)
	del := func(key string) {
		t.Helper()
		if err := e.Store.Client.RemoveObject(ctx, e.Store.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// 1. The object Open speculates on is deleted while it is still the
	// pointer: data loss, reported loudly, never a success or a hang.
	p1 := e.publish("k1", atkBody("k1"))
	if err := checkBody(must(r.Open(ctx))); err != nil {
		t.Fatal(err)
	}
	del(p1.Object.Key)
	if b, err := r.Open(ctx); !errors.Is(err, ErrObjectMissing) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("open of a current pointer whose object is gone: %v; want ErrObjectMissing", err)
	}

	// 2. Superseded and collected: the speculation misses, the newer pointer
	// is served.
	p2 := e.publish("k2", atkBody("k2"))
	if err := checkBody(must(r.Open(ctx))); err != nil {
		t.Fatal(err)
	}
	e.publish("k3", atkBody("k3"))
	del(p2.Object.Key)
	b := must(r.Open(ctx))
	if b.Pointer.IdempotencyKey != "k3" {
		t.Fatalf("served %s; want k3", b.Pointer.IdempotencyKey)
	}
	if err := checkBody(b); err != nil {
		t.Fatal(err)
	}

	// 3. OpenPointer of a superseded, collected pointer follows the newer one.
	b = must(r.OpenPointer(ctx, p2))
	if b.Pointer.IdempotencyKey != "k3" {
		t.Fatalf("OpenPointer of a collected pointer served %s; want k3", b.Pointer.IdempotencyKey)
	}
	if err := checkBody(b); err != nil {
		t.Fatal(err)
	}

	if err := e.Store.Client.RemoveObject(ctx, e.Store.Bucket, b.Pointer.Object.Key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	openStart := time.Now()
	if _, err := r.Open(ctx); !errors.Is(err, ErrObjectMissing) {
		t.Fatalf("open after the current object was deleted: %v; want ErrObjectMissing", err)
	}
	t.Logf("the open after the delete took %s", time.Since(openStart).Round(time.Millisecond))
}

func must(b *Body, err error) *Body {
	if err != nil {
		panic(err)
	}
	return b
}

// A reader whose etcd stops answering after it has opened an object: each
// Open (which now speculates) fails with fencepub.ErrUnavailable within about
// RequestTimeout, never returns the speculative body unverified against a
// pointer, and leaves no goroutine or open GET behind. OpenPointer still
// works without etcd.
func TestEtcdUnreachableDuringSpeculation(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	p1 := e.publish("k1", atkBody("k1"))
	px, cli := testenv.Get(t).EtcdProxy(t)
	const timeout = 400 * time.Millisecond
	r := e.reader(cli, func(c *Config) { c.RequestTimeout = timeout })
	if err := checkBody(must(r.Open(ctx))); err != nil {
		t.Fatal(err)
	}
	px.Set(faultproxy.Faults{DropUpstream: true, DropDownstream: true})
	for i := range 5 {
		start := time.Now()
		b, err := r.Open(ctx)
		took := time.Since(start)
		if b != nil {
			b.Close()
			t.Fatalf("open %d with etcd unreachable returned a body", i)
		}
		if !errors.Is(err, fencepub.ErrUnavailable) || took > 5*timeout {
			t.Fatalf("open %d: %v after %s; want fencepub.ErrUnavailable within ~%s", i, err, took, timeout)
		}
	}
	if err := checkBody(must(r.OpenPointer(ctx, p1))); err != nil {
		t.Fatalf("OpenPointer with etcd unreachable: %v", err)
	}
	if left := testenv.Leaked("reader.(*Reader).open"); left != "" {
		t.Fatalf("goroutines left:\n%s", left)
	}
	px.Set(faultproxy.Faults{})
	px.ResetAll()
}

// Many Opens whose pointer read fails or misses while the speculative GET is
// in flight must close the speculative bodies: the store connections they
// hold are released (no growth of open connections through a proxy).
func TestSpeculationReleasesConnections(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 2*time.Minute)
	spx, st := testenv.Get(t).StoreProxy(t)
	big := make([]byte, 4<<20) // larger than socket buffers: an unread body holds its connection
	_, _ = rand.Read(big)
	if _, err := e.pub.Publish(ctx, publisher.Operation{IdempotencyKey: "k0", Body: bytes.NewReader(big)}); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: st}}, res)
	if err != nil {
		t.Fatal(err)
	}
	b := must(r.Open(ctx))
	b.Close()
	for i := 1; i <= 20; i++ { // each Open speculates on the previous object, then misses
		if _, err := e.pub.Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprint("k", i), Body: bytes.NewReader(big)}); err != nil {
			t.Fatal(err)
		}
		b := must(r.Open(ctx))
		if _, err := io.Copy(io.Discard, b); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	// Closed bodies release their connections at once; idle ones stay
	// pooled (at most a few).
	testenv.Eventually(t, "at most 4 store connections open after 20 missed speculations", 10*time.Second,
		func() bool { return spx.Stats().Open <= 4 })
	t.Logf("store proxy %+v", spx.Stats())
}

//go:build !unit

package reader

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one test's domain with a bound publisher of resource "r".
type env struct {
	*testenv.Domain
	t   *testing.T
	pub *publisher.Publisher
}

const res = "r"

func newEnv(t *testing.T) *env {
	t.Helper()
	return newDomainEnv(t, testenv.NewDomain(t))
}

// newDomainEnv is newEnv on domain d (testenv.ClusterDomain: a cluster's).
func newDomainEnv(t *testing.T, d *testenv.Domain) *env {
	t.Helper()
	e := &env{Domain: d, t: t}
	ctx := ctxT(t, 30*time.Second)
	a, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Init(ctx, a); err != nil {
		t.Fatal(err)
	}
	g, err := a.Acquire(ctx, authority.AcquireRequest{Resource: res, Owner: "w", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := publisher.New(publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}})
	if err != nil {
		t.Fatal(err)
	}
	if e.pub, err = c.Bind(ctx, publisher.GrantTerm(g, false)); err != nil {
		t.Fatal(err)
	}
	return e
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) reader(cli *clientv3.Client, mods ...func(*Config)) *Reader {
	e.t.Helper()
	cfg := Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: cli, Store: e.Store}}
	for _, m := range mods {
		m(&cfg)
	}
	r, err := New(cfg, res)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) publish(key, body string) layout.Pointer {
	e.t.Helper()
	r, err := e.pub.Publish(ctxT(e.t, 30*time.Second), publisher.Operation{IdempotencyKey: key, Body: strings.NewReader(body)})
	if err != nil || r.Outcome != publisher.Applied {
		e.t.Fatalf("publish %s: %+v %v", key, r, err)
	}
	return *r.Pointer
}

// putPointer writes a pointer value straight to etcd (a corruption or a
// bug elsewhere).
func (e *env) putPointer(p layout.Pointer) {
	e.t.Helper()
	v, err := layout.EncodePointer(p)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.Etcd.Put(ctxT(e.t, 10*time.Second), e.NS.PointerKey(res), v); err != nil {
		e.t.Fatal(err)
	}
}

// readAll opens r's current object with Open and reads it to EOF.
func readAll(t *testing.T, r *Reader) (string, error) {
	t.Helper()
	return drain(r.Open(ctxT(t, 30*time.Second)))
}

// drain reads an opened body to EOF (the digest is checked there) and
// closes it.
func drain(b *Body, err error) (string, error) {
	if err != nil {
		return "", err
	}
	defer b.Close()
	data, err := io.ReadAll(b)
	return string(data), err
}

// unreachableEtcd returns an etcd client of an address where nothing
// listens (closed at the end of the test).
func unreachableEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cli, err := devstack.NewEtcdClient([]string{"http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func TestCurrentAndOpen(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	for _, ser := range []bool{false, true} {
		r := e.reader(e.Etcd, func(c *Config) { c.Serializable = ser })
		if _, err := r.Current(ctx); !errors.Is(err, ErrNotPublished) {
			t.Fatalf("serializable=%v: current before any publish: %v", ser, err)
		}
		if _, err := r.Open(ctx); !errors.Is(err, ErrNotPublished) {
			t.Fatalf("open before any publish: %v", err)
		}
	}
	p1 := e.publish("k1", "first")
	p2 := e.publish("k2", "second")
	r := e.reader(e.Etcd)
	cur, err := r.Current(ctx)
	if err != nil || cur.Version != p2.Version || cur.Object != p2.Object {
		t.Fatalf("current %+v, %v; want %s", cur.Version, err, p2.Version)
	}
	if got, err := readAll(t, r); err != nil || got != "second" {
		t.Fatalf("read %q, %v", got, err)
	}
	if p1.Version == p2.Version {
		t.Fatal("versions must differ")
	}
}

// The bytes are checked against the pointer's sha256 and size while they
// stream; a mismatch is an error at the end, never a silent success.
func TestVerification(t *testing.T) {
	e := newEnv(t)
	good := e.publish("k1", "the published bytes")
	r := e.reader(e.Etcd)

	bad := good
	bad.Object.SHA256 = strings.Repeat("0", 64)
	e.putPointer(bad)
	if _, err := readAll(t, r); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("wrong sha256: %v, want ErrDigestMismatch", err)
	}

	short := good
	short.Object.Size = 5
	e.putPointer(short)
	if _, err := readAll(t, r); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("wrong size: %v, want ErrDigestMismatch", err)
	}

	changed := good
	changed.Object.ETag = "0123456789abcdef0123456789abcdef"
	e.putPointer(changed)
	if _, err := readAll(t, r); !errors.Is(err, ErrObjectChanged) {
		t.Fatalf("wrong ETag: %v, want ErrObjectChanged", err)
	}

	e.putPointer(good)
	if got, err := readAll(t, r); err != nil || got != "the published bytes" {
		t.Fatalf("read %q, %v", got, err)
	}

	if _, err := e.Etcd.Put(ctxT(t, 10*time.Second), e.NS.PointerKey(res), "not a pointer"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Current(ctxT(t, 10*time.Second)); !errors.Is(err, layout.ErrCorruptRecord) {
		t.Fatalf("corrupt pointer: %v, want ErrCorruptRecord", err)
	}
}

// An object collected after its pointer was superseded is retried against
// the fresh pointer; the current pointer's object missing is loud.
func TestMissingObjects(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	p1 := e.publish("k1", "old")
	e.publish("k2", "new")
	r := e.reader(e.Etcd)
	remove := func(key string) {
		if err := e.Store.Client.RemoveObject(ctx, e.Store.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	remove(p1.Object.Key) // GC collected the superseded object
	b, err := r.openFrom(ctx, p1)
	if err != nil {
		t.Fatalf("open through a superseded pointer: %v", err)
	}
	data, err := io.ReadAll(b)
	b.Close()
	if err != nil || string(data) != "new" {
		t.Fatalf("read %q, %v; want the newer object", data, err)
	}

	cur, err := r.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	remove(cur.Object.Key)
	if _, err := r.Open(ctx); !errors.Is(err, ErrObjectMissing) || errors.Is(err, ErrDecommissioned) {
		t.Fatalf("current object gone: %v, want ErrObjectMissing", err)
	}
	// Retired by `resource delete` (a decommission seal above the pointer)
	// and collected: said so, not reported as data loss.
	seal, err := layout.EncodeSeal(layout.Seal{Version: layout.Version{Epoch: cur.Version.Epoch, Fence: cur.Version.Fence, Seq: layout.MaxNumber},
		Reason: layout.SealReasonDecommissioned, At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Etcd.Put(ctx, e.NS.SealKey(res), seal); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Open(ctx); !errors.Is(err, ErrDecommissioned) {
		t.Fatalf("a decommissioned resource's collected object: %v, want ErrDecommissioned", err)
	}
}

// Watch sends the current pointer and then every newer one in order,
// reports a corrupt value as an error without stopping, and closes when ctx
// ends.
func TestWatch(t *testing.T) {
	e := newEnv(t)
	p1 := e.publish("k1", "one")
	r := e.reader(e.Etcd)
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	defer cancel()
	ch := r.Watch(ctx)
	next := func() Update {
		t.Helper()
		select {
		case u, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			return u
		case <-time.After(10 * time.Second):
			t.Fatal("no update in 10 s")
		}
		return Update{}
	}
	if u := next(); u.Err != nil || u.Pointer.Version != p1.Version || u.Resync {
		t.Fatalf("first update %+v, want %s", u, p1.Version)
	}
	p2 := e.publish("k2", "two")
	p3 := e.publish("k3", "three")
	for _, want := range []layout.Pointer{p2, p3} {
		if u := next(); u.Err != nil || u.Pointer.Version != want.Version || u.Revision == 0 {
			t.Fatalf("update %+v, want %s", u, want.Version)
		}
	}
	// A corrupt value that sorts below every version: reported, and the
	// next publish goes through and is delivered.
	if _, err := e.Etcd.Put(ctx, e.NS.PointerKey(res), layout.EncodeVersion(layout.Version{})+"|{broken"); err != nil {
		t.Fatal(err)
	}
	if u := next(); !errors.Is(u.Err, layout.ErrCorruptRecord) {
		t.Fatalf("corrupt value: %+v, want ErrCorruptRecord", u)
	}
	p4 := e.publish("k4", "four")
	if u := next(); u.Err != nil || u.Pointer.Version != p4.Version {
		t.Fatalf("update %+v, want %s", u, p4.Version)
	}
	cancel()
	for range ch { // drains until closed
	}
}

// A watch that misses events while its connection is broken and the revisions
// are compacted re-syncs with a fresh read instead of waiting silently.
func TestWatchResyncsAfterCompaction(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	p1 := e.publish("k1", "one")
	px, cli := testenv.Get(t).EtcdProxy(t)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var logs syncBuffer
	ch := e.reader(cli, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }).Watch(wctx)
	if u := <-ch; u.Pointer.Version != p1.Version {
		t.Fatalf("first update %+v", u)
	}
	px.Set(faultproxy.Faults{DropDownstream: true})
	e.publish("k2", "two")
	p3 := e.publish("k3", "three")
	now, err := e.Etcd.Get(ctx, e.NS.PointerKey(res))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Etcd.Compact(ctx, now.Header.Revision); err != nil {
		t.Fatal(err)
	}
	px.Set(faultproxy.Faults{})
	px.ResetAll()
	for {
		select {
		case u := <-ch:
			if u.Err != nil {
				continue // the broken stream may surface as an error first
			}
			if u.Pointer.Version != p3.Version || !u.Resync {
				t.Fatalf("update %+v, want a re-synced %s", u, p3.Version)
			}
			if !strings.Contains(logs.String(), "pointer watch compacted") {
				t.Fatalf("re-synced without seeing the compaction:\n%s", logs.String())
			}
			return
		case <-ctx.Done():
			t.Fatal("the watch never re-synced")
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the watch goroutine's logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

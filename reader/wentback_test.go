//go:build !unit

package reader

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// A pointer below a version the reader already returned (etcd's history
// went back: a restore not yet followed by recover --republish) is
// ErrWentBack from Current and Open, for linearizable and serializable
// readers, and a Watch reports it without sending the older pointer; a new
// Reader starts afresh, and a newer version is served again.
func TestWentBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	p1 := e.publish("k1", "one")
	p2 := e.publish("k2", "two")
	lin := e.reader(e.Etcd)
	ser := e.reader(e.Etcd, func(c *Config) { c.Serializable = true })
	for _, r := range []*Reader{lin, ser} {
		if cur, err := r.Current(ctx); err != nil || cur.Version != p2.Version {
			t.Fatalf("current %s, %v; want %s", cur.Version, err, p2.Version)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := lin.Watch(wctx)
	if u := <-ch; u.Err != nil || u.Pointer.Version != p2.Version {
		t.Fatalf("first watch update %+v; want %s", u, p2.Version)
	}

	e.putPointer(p1) // history went back
	for name, r := range map[string]*Reader{"linearizable": lin, "serializable": ser} {
		if cur, err := r.Current(ctx); !errors.Is(err, ErrWentBack) {
			t.Fatalf("%s: current after the pointer went back: %s, %v; want ErrWentBack", name, cur.Version, err)
		}
		if _, err := r.Open(ctx); !errors.Is(err, ErrWentBack) {
			t.Fatalf("%s: open after the pointer went back: %v; want ErrWentBack", name, err)
		}
	}
	select {
	case u := <-ch:
		if !errors.Is(u.Err, ErrWentBack) || !u.Pointer.Version.IsZero() {
			t.Fatalf("watch update after the pointer went back: %+v; want ErrWentBack and no pointer", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not report the pointer going back")
	}
	if got, err := readAll(t, e.reader(e.Etcd)); err != nil || got != "one" {
		t.Fatalf("a new reader: %q, %v; want the restored %q", got, err, "one")
	}

	p3 := e.publish("k3", "three")
	if got, err := readAll(t, lin); err != nil || got != "three" {
		t.Fatalf("after a newer publish: %q, %v", got, err)
	}
	if u := <-ch; u.Err != nil || u.Pointer.Version != p3.Version {
		t.Fatalf("watch after a newer publish: %+v; want %s", u, p3.Version)
	}
}

// A watch that re-syncs after an etcd restore to an older snapshot (with
// --bump-revision --mark-compacted, as the runbook says) and finds the
// pointer lower than a version it sent, or missing, reports ErrWentBack
// instead of going on silently with the old version.
func TestWatchWentBackAfterRestore(t *testing.T) {
	etcd := testenv.StartEtcd(t, devstack.EtcdOptions{})
	cli := testenv.EtcdClient(t, etcd)
	ns := testenv.Namespace(t)
	ctx := ctxT(t, 2*time.Minute)
	put := func(res string, seq uint64) layout.Version {
		t.Helper()
		v := layout.Version{Epoch: 1, Fence: 1, Seq: seq}
		val, err := layout.EncodePointer(layout.Pointer{Version: v, Object: layout.Object{Bucket: "b", Key: ns.ObjectKey(res, v, layout.NewNonce())}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, ns.PointerKey(res), val); err != nil {
			t.Fatal(err)
		}
		return v
	}
	put("lower", 1)
	snap := filepath.Join(t.TempDir(), "snap.db")
	if err := etcd.Members[0].SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	sent := map[string]layout.Version{"lower": put("lower", 2), "missing": put("missing", 1)}
	wctx := ctxT(t, time.Minute)
	watches := map[string]<-chan Update{}
	for res, v := range sent {
		r, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli}}, res)
		if err != nil {
			t.Fatal(err)
		}
		ch := r.Watch(wctx)
		if u := <-ch; u.Err != nil || u.Pointer.Version != v {
			t.Fatalf("%s: first update %+v; want %s", res, u, v)
		}
		watches[res] = ch
	}
	if err := etcd.RestoreSnapshot(ctx, snap, devstack.RestoreOptions{BumpRevision: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	for res, ch := range watches {
		for u := range ch {
			if u.Pointer.Version.Compare(sent[res]) < 0 && !u.Pointer.Version.IsZero() {
				t.Fatalf("%s: the watch sent %s after %s", res, u.Pointer.Version, sent[res])
			}
			if errors.Is(u.Err, ErrWentBack) {
				t.Logf("%s: %v", res, u.Err)
				break
			}
			// Unavailable while etcd restarts: the watch goes on.
		}
		if wctx.Err() != nil {
			t.Fatalf("%s: the watch never reported the restore", res)
		}
	}
}

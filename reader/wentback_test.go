package reader

import (
	"context"
	"errors"
	"testing"
	"time"
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

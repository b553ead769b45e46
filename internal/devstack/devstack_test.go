//go:build !unit

package devstack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestSharedServersAnswer(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := env.EtcdClient(t)
	ns := testenv.Namespace(t)
	if _, err := c.Put(ctx, ns.EpochKey(), "x"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, ns.EpochKey())
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "x" {
		t.Fatalf("get back: %v %v", r, err)
	}
	st := env.Store(t)
	key := ns.MetaPrefix() + "probe"
	if _, err := objstore.PutSmallCreateOnly(ctx, st, key, []byte("hello"), "text/plain"); err != nil {
		t.Fatal(err)
	}
	// Create-only: the second write of the same key is refused with 412.
	if _, err := objstore.PutSmallCreateOnly(ctx, st, key, []byte("other"), "text/plain"); !errorsIs(err, objstore.ErrExists) {
		t.Fatalf("second create-only put: got %v, want ErrExists", err)
	}
	b, err := objstore.GetSmall(ctx, st, key, 1024)
	if err != nil || string(b) != "hello" {
		t.Fatalf("get: %q %v", b, err)
	}
}

// TestEtcdClusterSurvivesMemberLoss kills the leader of a 3-member cluster,
// writes through the survivors, restarts the killed member and reads every
// value back through the restarted member alone.
func TestEtcdClusterSurvivesMemberLoss(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{Members: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := testenv.EtcdClient(t, e)
	for i := range 5 {
		if _, err := c.Put(ctx, fmt.Sprintf("k%d", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	leader, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	// Until the survivors elect a new leader a put may time out; etcd does
	// not retry mutations on its own, so the test does (the put is the same
	// value each time).
	for i := 5; i < 10; i++ {
		for {
			_, err := c.Put(ctx, fmt.Sprintf("k%d", i), fmt.Sprint(i))
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("put with leader %s down: %v", leader.Name, err)
			}
		}
	}
	if err := leader.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	only, err := devstack.NewEtcdClient([]string{leader.ClientURL})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	r, err := only.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 10 {
		t.Fatalf("restarted member sees %d keys, want 10", len(r.Kvs))
	}
}

// TestEtcdPauseResume pauses a single member with SIGSTOP: a read times out,
// and after SIGCONT it answers again.
func TestEtcdPauseResume(t *testing.T) {
	e := testenv.StartEtcd(t, devstack.EtcdOptions{})
	c := testenv.EtcdClient(t, e)
	m := e.Members[0]
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := c.Get(ctx, "x")
	cancel()
	if err == nil {
		t.Fatal("read from a paused etcd succeeded")
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitReady(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestMinIOErasureSet starts a 4-drive erasure set on one disk, writes,
// restarts the server and reads the object back.
func TestMinIOErasureSet(t *testing.T) {
	m := testenv.StartMinIO(t, devstack.MinIOOptions{Drives: 4})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("fence"), 1000)
	if _, err := objstore.PutSmallCreateOnly(ctx, st, "a/b", body, ""); err != nil {
		t.Fatal(err)
	}
	m.Stop()
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := objstore.GetSmall(ctx, st, "a/b", 1<<20)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read after restart: %d bytes, %v", len(got), err)
	}
}

func errorsIs(err, target error) bool { return err != nil && errors.Is(err, target) }

// TestSeaweedFSServesCreateOnly starts a SeaweedFS server of its own (in
// every run, whichever store is shared) and checks what fencepub needs of
// it right after StartSeaweedFS returns: a create-only PUT is served at
// once, a second one onto the same key is refused, and the bytes stay.
func TestSeaweedFSServesCreateOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := devstack.StartSeaweedFS(ctx, t.TempDir(), devstack.SeaweedFSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	st, err := s.Store()
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if _, err := objstore.PutSmallCreateOnly(pctx, st, "k", []byte("first"), "text/plain"); err != nil {
		t.Fatalf("first create-only put right after start: %v", err)
	}
	if _, err := objstore.PutSmallCreateOnly(ctx, st, "k", []byte("second"), "text/plain"); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second create-only put: %v, want ErrExists", err)
	}
	if b, err := objstore.GetSmall(ctx, st, "k", 1024); err != nil || string(b) != "first" {
		t.Fatalf("get: %q %v", b, err)
	}
}

// TestSeaweedFSSeparateVolume starts SeaweedFS with its volume server as a
// process of its own: pausing that process stalls reads of stored bytes
// while the gateway still answers, resuming it serves them again, and a
// kill of both processes and a restart keep every object.
func TestSeaweedFSSeparateVolume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := devstack.StartSeaweedFS(ctx, t.TempDir(), devstack.SeaweedFSOptions{SeparateVolume: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if s.Volume == nil || s.Volume.PID() == 0 || s.Volume.PID() == s.PID() {
		t.Fatalf("volume server pid %v, server pid %d: want a process of its own", s.Volume, s.PID())
	}
	st, err := s.Store()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := objstore.PutSmallCreateOnly(ctx, st, "k", []byte("kept"), "text/plain"); err != nil {
		t.Fatal(err)
	}
	if err := s.Volume.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = objstore.GetSmall(pctx, st, "k", 1024)
	pcancel()
	if err := s.Volume.Resume(); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("a read served while the volume server was paused: the bytes are not behind it")
	}
	if b, err := objstore.GetSmall(ctx, st, "k", 1024); err != nil || string(b) != "kept" {
		t.Fatalf("get after resume: %q %v", b, err)
	}
	s.Kill()
	if !s.Exited() {
		t.Fatal("Exited false after Kill")
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := objstore.GetSmall(ctx, st, "k", 1024); err != nil || string(b) != "kept" {
		t.Fatalf("get after restart: %q %v", b, err)
	}
	// Ready after a restart means conditional writes of new keys are
	// served, not only refusals of existing ones.
	pctx, pcancel = context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if _, err := objstore.PutSmallCreateOnly(pctx, st, "new", []byte("x"), "text/plain"); err != nil {
		t.Fatalf("create-only put of a new key right after Restart: %v", err)
	}
}

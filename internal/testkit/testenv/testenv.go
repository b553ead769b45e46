//go:build !unit

// Package testenv gives tests real etcd and MinIO servers (through
// internal/devstack) on free loopback ports in temporary directories. A
// test never skips because a server is missing: a missing binary fails the
// test and says to run `make deps`.
//
// Packages share one single-member etcd and one object store per test
// binary through Main: MinIO, or SeaweedFS when the environment variable
// FENCEPUB_TEST_STORE is "seaweedfs" (`make test` runs the store-facing
// suites once per store); each test isolates itself with its own Namespace domain
// (NewDomain gives one with its clients). Tests that kill, pause or restart
// servers start their own with StartEtcd and StartMinIO. When a test fails,
// the server logs are printed. Tests that kill or pause a worker run it as
// a child process of the test binary (StartChild, RunChild).
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Shared is the per-binary environment started by Main.
type Shared struct {
	Etcd *devstack.Etcd
	// S3 is the shared object store, of the kind StoreKind names.
	S3 devstack.ObjectStore
}

// StoreEnv is the environment variable that chooses the shared object
// store: one of devstack.StoreKinds, default devstack.StoreMinIO.
const StoreEnv = "FENCEPUB_TEST_STORE"

// StoreKind returns the kind of object store Main starts (StoreEnv).
func StoreKind() string {
	if k := os.Getenv(StoreEnv); k != "" {
		return k
	}
	return devstack.StoreMinIO
}

var shared *Shared

// Main starts the shared etcd and object store (StoreKind), runs the tests, prints the server
// logs if any test failed, stops the servers and exits. Call it from
// TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencepub-testenv-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	e, err := devstack.StartEtcd(ctx, dir+"/etcd", devstack.EtcdOptions{})
	if err != nil {
		cancel()
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	mi, err := devstack.StartStore(ctx, dir+"/store", StoreKind(), false)
	cancel()
	if err != nil {
		e.Stop()
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	shared = &Shared{Etcd: e, S3: mi}
	code := m.Run()
	if code != 0 {
		for _, mem := range e.Members {
			fmt.Fprintf(os.Stderr, "--- %s log (tail) ---\n%s\n", mem.Name, mem.LogTail(8192))
		}
		fmt.Fprintf(os.Stderr, "--- %s log (tail) ---\n%s\n", StoreKind(), mi.LogTail(8192))
	}
	mi.Stop()
	e.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

// Get returns the shared environment. It fails t if Main did not run.
func Get(t testing.TB) *Shared {
	t.Helper()
	if shared == nil {
		t.Fatal("testenv: shared servers not started; call testenv.Main from TestMain")
	}
	return shared
}

// EtcdClient returns a client of the shared etcd, closed when t ends.
func (s *Shared) EtcdClient(t testing.TB) *clientv3.Client {
	t.Helper()
	return EtcdClient(t, s.Etcd)
}

// EtcdClient returns a client of e (the shared etcd or one from StartEtcd),
// closed when t ends. It fails t if the client cannot be made.
func EtcdClient(t testing.TB, e *devstack.Etcd) *clientv3.Client {
	t.Helper()
	c, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// EtcdProxy starts a fault proxy (internal/faultproxy) in front of the
// shared etcd and returns it with a client that reaches etcd only through
// it, so the test can drop, delay or cut that client's traffic. Both are
// closed when t ends. It fails t if either cannot be made.
func (s *Shared) EtcdProxy(t testing.TB) (*faultproxy.Proxy, *clientv3.Client) {
	t.Helper()
	px, err := faultproxy.Start(strings.TrimPrefix(s.Etcd.Members[0].ClientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cli, err := devstack.NewEtcdClient([]string{px.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return px, cli
}

// StoreProxy starts a fault proxy in front of the shared object store and
// returns it with a Store of the shared bucket that reaches the store only
// through it.
// The proxy is closed when t ends. It fails t if either cannot be made.
func (s *Shared) StoreProxy(t testing.TB) (*faultproxy.Proxy, *s3store.Store) {
	t.Helper()
	cfg := s.S3.S3Config()
	px, err := faultproxy.Start(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cfg.Endpoint = px.Addr()
	st, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return px, st
}

// Store returns a Store of the shared object store's bucket.
func (s *Shared) Store(t testing.TB) *s3store.Store {
	t.Helper()
	st, err := s3store.New(s.S3.S3Config())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Namespace returns a fresh namespace ("fencepub-test/<random domain>") so
// tests sharing servers never see each other's keys or objects.
func Namespace(t testing.TB) layout.Namespace {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	ns, err := layout.NewNamespace("fencepub-test", "t"+hex.EncodeToString(b[:]))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// StartEtcd starts a dedicated etcd cluster for t (members = 1 or 3, ...),
// stopped when t ends; its logs are printed if t failed.
func StartEtcd(t testing.TB, opts devstack.EtcdOptions) *devstack.Etcd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := devstack.StartEtcd(ctx, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range e.Members {
				t.Logf("--- %s log (tail) ---\n%s", m.Name, m.LogTail(8192))
			}
		}
		e.Stop()
	})
	return e
}

// StartMinIO starts a dedicated MinIO for t (Drives = 1 or 4), stopped when t
// ends; its log is printed if t failed.
func StartMinIO(t testing.TB, opts devstack.MinIOOptions) *devstack.MinIO {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := devstack.StartMinIO(ctx, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- minio log (tail) ---\n%s", m.LogTail(8192))
		}
		m.Stop()
	})
	return m
}

// StartCluster starts a dedicated etcd cluster and MinIO deployment for t
// (devstack.StartCluster: Etcd.Members members, MinIO.Nodes nodes),
// stopped when t ends; every server's log is printed if t failed.
func StartCluster(t testing.TB, opts devstack.ClusterOptions) *devstack.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := devstack.StartCluster(ctx, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.Etcd.Members {
				t.Logf("--- %s log (tail) ---\n%s", m.Name, m.LogTail(8192))
			}
			t.Logf("--- minio log (tail) ---\n%s", c.MinIO.LogTail(8192))
		}
		c.Stop()
	})
	return c
}

// PauseFollower stops (SIGSTOP) a member of e that is not the raft
// leader and returns it; it is continued when t ends. It fails t when no
// follower is found or the member cannot be stopped.
func PauseFollower(t testing.TB, e *devstack.Etcd) *devstack.EtcdMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := e.Follower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Resume() })
	return m
}

// CLIStack starts a dedicated etcd and MinIO for t, puts the store's
// credentials in t's environment (FENCEPUB_S3_ACCESS_KEY and
// FENCEPUB_S3_SECRET_KEY: secrets have no flags) and returns the
// connection flags of the fencepub binaries for domain d1 under prefix,
// plus the servers. It calls t.Setenv, so t must not be parallel.
func CLIStack(t testing.TB, prefix string) ([]string, *devstack.Etcd, *devstack.MinIO) {
	t.Helper()
	e := StartEtcd(t, devstack.EtcdOptions{})
	m := StartMinIO(t, devstack.MinIOOptions{})
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", m.Config.AccessKey)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", m.Config.SecretKey)
	return []string{"--etcd-endpoints", e.Endpoints()[0], "--s3-endpoint", m.Config.Endpoint,
		"--s3-bucket", m.Config.Bucket, "--prefix", prefix, "--domain", "d1"}, e, m
}

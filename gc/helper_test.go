//go:build !unit

package gc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/internal/wallclock"
	"github.com/fencepub/fencepub/publisher"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The test binary runs as a child process (testenv.StartChild): a GC
// daemon ("daemon") or a publishing worker ("worker") that the parent test
// kills or pauses with SIGSTOP, or a publisher whose clock is off
// ("skewed"). All take a helperConfig. The daemon's authority logs to stdout
// (JSON lines), where a test sees it wait for the GC lease; the worker's and
// the skewed publisher's stdout carry only their publish lines.
var helpers = map[string]testenv.ChildFunc{
	"daemon": helperMain(helperDaemon, true),
	"worker": helperMain(helperWorker, false),
	"skewed": helperMain(helperSkewed, false),
}

type helperConfig struct {
	testenv.Servers
	Resource string        `json:"resource"`
	Owner    string        `json:"owner"`
	TTL      time.Duration `json:"ttl"`
	Interval time.Duration `json:"interval"`
	Policy   Policy        `json:"policy"`
	// Skew offsets the skewed publisher's clock; Keys are its idempotency
	// keys.
	Skew time.Duration `json:"skew"`
	Keys []string      `json:"keys"`
}

// helperFunc is the body of a helper process; ctx ends on SIGTERM.
type helperFunc func(ctx context.Context, cfg helperConfig, cli *clientv3.Client, st objstore.Store, auth *authority.Authority) error

// helperMain returns the child process that connects to the servers of its
// helperConfig and runs run; with logAuthority its authority logs to stdout
// at debug level.
func helperMain(run helperFunc, logAuthority bool) testenv.ChildFunc {
	return func(spec []byte) error {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		var cfg helperConfig
		cli, st, err := testenv.ConnectSpec(spec, &cfg)
		if err != nil {
			return err
		}
		defer cli.Close()
		var log *slog.Logger
		if logAuthority {
			log = slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(cfg.Namespace), Etcd: cli, Store: st}, Logger: log})
		if err != nil {
			return err
		}
		return run(ctx, cfg, cli, st, auth)
	}
}

// helperDaemon runs a GC daemon over every resource until SIGTERM.
func helperDaemon(ctx context.Context, cfg helperConfig, cli *clientv3.Client, st objstore.Store, auth *authority.Authority) error {
	c, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(cfg.Namespace), Etcd: cli, Store: st}, Authority: auth, Policy: cfg.Policy})
	if err != nil {
		return err
	}
	d, err := newDaemon(daemonConfig{Collector: c, Interval: cfg.Interval, LeaseTTL: cfg.TTL, Owner: cfg.Owner})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// helperWorker publishes to cfg.Resource in a loop: acquire (waiting),
// keep the lease with a Session, publish every 30 ms until a publish is
// not applied or the session is lost, then start over. It prints one line
// per publish: "<outcome> <reason> <version> <object key>".
func helperWorker(ctx context.Context, cfg helperConfig, cli *clientv3.Client, st objstore.Store, auth *authority.Authority) error {
	pub, err := publisher.New(publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(cfg.Namespace), Etcd: cli, Store: st}, ResendTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for n := 0; ctx.Err() == nil; n++ {
		g, err := auth.Acquire(ctx, authority.AcquireRequest{Resource: cfg.Resource, Owner: fmt.Sprintf("%s-%d", cfg.Owner, n), TTL: cfg.TTL, Wait: true})
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		sess, err := auth.NewSession(ctx, g)
		if err != nil {
			continue
		}
		p, err := pub.Bind(ctx, publisher.GrantTerm(g, false))
		for i := 0; err == nil && ctx.Err() == nil; i++ {
			var r publisher.Result
			r, err = p.Publish(ctx, op(fmt.Sprintf("%s-%d-%d", cfg.Owner, n, i), "child"))
			if r.Attempt != nil {
				fmt.Fprintf(out, "%s %s %s %s\n", r.Outcome, r.Reason, r.Attempt.Version, r.Attempt.Object.Key)
				out.Flush()
			}
			select {
			case <-sess.Lost():
				err = sess.Err()
			case <-time.After(30 * time.Millisecond):
			}
		}
		_ = sess.Close()
	}
	return nil
}

// helperSkewed publishes cfg.Keys (bodies "body of <key>") to cfg.Resource
// under one grant (TTL cfg.TTL), with a publisher whose clock is
// time.Now() + cfg.Skew: all but the last key at once, the last after a
// line on stdin. It prints each Result as one JSON line, then releases the
// grant.
func helperSkewed(ctx context.Context, cfg helperConfig, cli *clientv3.Client, st objstore.Store, auth *authority.Authority) error {
	pub, err := publisher.New(wallclock.With(publisher.Config{
		Env: fencepub.Env{Namespace: fencepub.Namespace(cfg.Namespace), Etcd: cli, Store: st}, RequestTimeout: 300 * time.Millisecond, ResendTimeout: 2 * time.Minute,
	}, func() time.Time { return time.Now().Add(cfg.Skew) }))
	if err != nil {
		return err
	}
	g, err := auth.Acquire(ctx, authority.AcquireRequest{Resource: cfg.Resource, Owner: cfg.Owner, TTL: cfg.TTL, Wait: true})
	if err != nil {
		return err
	}
	p, err := pub.Bind(ctx, publisher.GrantTerm(g, false))
	if err != nil {
		return err
	}
	in, out := bufio.NewScanner(os.Stdin), json.NewEncoder(os.Stdout)
	for i, k := range cfg.Keys {
		if i == len(cfg.Keys)-1 && !in.Scan() {
			return fmt.Errorf("stdin ended before the last key")
		}
		r, err := p.Publish(ctx, op(k, "body of "+k))
		if r.Outcome == "" {
			return err
		}
		if err := out.Encode(r); err != nil {
			return err
		}
	}
	return auth.Release(ctx, g)
}

// startChild starts the helper mode ("daemon" or "worker") as a child
// process with cfg (the shared servers' endpoints and e's namespace are
// filled in). The child is killed when t ends.
func (e *env) startChild(mode string, cfg helperConfig) *testenv.Child {
	e.t.Helper()
	cfg.Servers = testenv.Get(e.t).Servers(e.NS)
	return testenv.StartChild(e.t, mode, cfg)
}

// stopChild sends c SIGTERM and waits up to timeout for it to exit.
func stopChild(t *testing.T, c *testenv.Child, timeout time.Duration) {
	t.Helper()
	_ = c.Signal(syscall.SIGCONT)
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal %v: %v", syscall.SIGTERM, err)
	}
	select {
	case <-c.Done():
	case <-time.After(timeout):
		t.Fatalf("child did not exit within %s of SIGTERM", timeout)
	}
}

package gc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/localstack"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/testenv"
	"github.com/fencepub/fencepub/publisher"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The test binary runs as a child process when helperEnv is set: a GC
// daemon ("daemon") or a publishing worker ("worker") that the parent test
// kills or pauses with SIGSTOP. helperConfigEnv carries a helperConfig as
// JSON.
const (
	helperEnv       = "FENCEPUB_GC_HELPER"
	helperConfigEnv = "FENCEPUB_GC_HELPER_CONFIG"
)

type helperConfig struct {
	Etcd     []string        `json:"etcd"`
	S3       objstore.Config `json:"s3"`
	Prefix   string          `json:"prefix"`
	Domain   string          `json:"domain"`
	Resource string          `json:"resource"`
	Owner    string          `json:"owner"`
	TTL      time.Duration   `json:"ttl"`
	Interval time.Duration   `json:"interval"`
	Policy   Policy          `json:"policy"`
}

// helperMain runs a child process and returns its exit status. It stops on
// SIGTERM.
func helperMain(mode string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var cfg helperConfig
	if err := json.Unmarshal([]byte(os.Getenv(helperConfigEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "helper config:", err)
		return 2
	}
	cli, err := localstack.NewEtcdClient(cfg.Etcd)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	st, err := objstore.New(cfg.S3)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ns, err := layout.NewNamespace(cfg.Prefix, cfg.Domain)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	auth, err := authority.New(authority.Config{Namespace: ns, Etcd: cli, Store: st})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch mode {
	case "daemon":
		err = helperDaemon(ctx, cfg, ns, cli, st, auth)
	case "worker":
		err = helperWorker(ctx, cfg, ns, cli, st, auth)
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// helperDaemon runs a GC daemon over every resource until SIGTERM.
func helperDaemon(ctx context.Context, cfg helperConfig, ns layout.Namespace, cli *clientv3.Client, st *objstore.Store, auth *authority.Authority) error {
	c, err := New(Config{Namespace: ns, Etcd: cli, Store: st, Authority: auth, Policy: cfg.Policy})
	if err != nil {
		return err
	}
	d, err := NewDaemon(DaemonConfig{Collector: c, Interval: cfg.Interval, LeaseTTL: cfg.TTL, Owner: cfg.Owner})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// helperWorker publishes to cfg.Resource in a loop: acquire (waiting),
// keep the lease with a Session, publish every 30 ms until a publish is
// not applied or the session is lost, then start over. It prints one line
// per publish: "<outcome> <reason> <version> <object key>".
func helperWorker(ctx context.Context, cfg helperConfig, ns layout.Namespace, cli *clientv3.Client, st *objstore.Store, auth *authority.Authority) error {
	pub, err := publisher.New(publisher.Config{Namespace: ns, Etcd: cli, Store: st, ResendTimeout: 2 * time.Second})
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
		p, err := pub.BindGrant(ctx, g, false)
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

// child is a helper process started by a test.
type child struct {
	cmd *exec.Cmd

	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

// startChild starts the test binary in helper mode with cfg (the shared
// servers' endpoints and e's namespace are filled in). The child is killed
// when t ends.
func (e *env) startChild(mode string, cfg helperConfig) *child {
	e.t.Helper()
	sh := testenv.Get(e.t)
	cfg.Etcd, cfg.S3, cfg.Prefix, cfg.Domain = sh.Etcd.Endpoints(), sh.MinIO.Config, e.ns.Prefix, e.ns.Domain
	b, err := json.Marshal(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperConfigEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.done
		if e.t.Failed() && stderr.Len() > 0 {
			e.t.Logf("%s child stderr:\n%s", mode, stderr.String())
		}
	})
	return c
}

func (c *child) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// stop sends SIGTERM and waits up to timeout for the child to exit.
func (c *child) stop(t *testing.T, timeout time.Duration) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	c.signal(t, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(timeout):
		t.Fatalf("child did not exit within %s of SIGTERM", timeout)
	}
}

func (c *child) output() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

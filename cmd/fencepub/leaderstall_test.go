//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/internal/wait"
)

// Leader-stall scenario (DESIGN.md invariant 12): how many times it runs,
// how long the leader stays stopped, and when A's command finishes within
// the stall.
const (
	leaderStallRuns    = 20
	leaderStallHold    = 8 * time.Second
	leaderStallRelease = time.Second
)

// cliRun is one in-process `fencepub run` started by startRun.
type cliRun struct {
	stderr *testenv.SyncBuffer
	done   chan struct{}
	stdout string
	code   int
}

// startRun runs `fencepub args...` in a goroutine; stderr can be watched
// while it runs, stdout and the exit code are set when done closes.
func startRun(t *testing.T, ctx context.Context, args ...string) *cliRun {
	r := &cliRun{stderr: &testenv.SyncBuffer{}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		root := newRootCmd()
		var out strings.Builder
		root.SetIn(strings.NewReader(""))
		root.SetOut(&out)
		root.SetErr(r.stderr)
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		if err != nil {
			fmt.Fprint(r.stderr, err.Error())
		}
		r.stdout, r.code = out.String(), cli.ExitCode(err, ctx.Err() != nil)
	}()
	return r
}

// waitStderr polls r's stderr until it contains want, r ends, or timeout.
func (r *cliRun) waitStderr(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(r.stderr.String(), want) {
		select {
		case <-r.done:
			t.Fatalf("fencepub run ended (exit %d) before printing %q:\n%s", r.code, want, r.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("fencepub run did not print %q within %s:\n%s", want, timeout, r.stderr.String())
		}
	}
}

// result waits for r to end and decodes its -o json document.
func (r *cliRun) result(t *testing.T, timeout time.Duration) (runOutput, bool) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("fencepub run still running after %s:\n%s", timeout, r.stderr.String())
	}
	var o runOutput
	err := json.Unmarshal([]byte(r.stdout), &o)
	return o, err == nil
}

// TestRunSurvivesLeaderStall is the leader stall on the multi-node topology
// (devstack.MultiNode: a 3-member etcd, a 4-node distributed MinIO): worker
// A holds a resource through `fencepub run --ttl 3s`, worker B waits for it
// with `--wait 150s`, and the raft leader is stopped (SIGSTOP) for 8 s while
// the two other members keep a quorum; A's command finishes one second into
// the stall. B must never give up while a quorum serves: it publishes, with
// a fence above A's, every time.
func TestRunSurvivesLeaderStall(t *testing.T) {
	cl := testenv.StartCluster(t, devstack.MultiNode())
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", cl.MinIO.Config.AccessKey)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", cl.MinIO.Config.SecretKey)
	conn := []string{"--etcd-endpoints", strings.Join(cl.Etcd.Endpoints(), ","), "--s3-endpoint", cl.MinIO.Config.Endpoint,
		"--s3-bucket", cl.MinIO.Config.Bucket, "--prefix", "stall", "--domain", "d1"}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var failures []string
	start := time.Now()
	for i := range leaderStallRuns {
		res := fmt.Sprintf("r%d", i)
		release := filepath.Join(dir, res+".release")
		a := startRun(t, ctx, append(append([]string{"run", "--resource", res, "--ttl", "3s", "--max-wait", "150s", "--key", "a", "-o", "json"}, conn...),
			"--", "sh", "-c", "while [ ! -e "+release+" ]; do sleep 0.05; done; echo a")...)
		a.waitStderr(t, "run: granted", 30*time.Second)
		b := startRun(t, ctx, append(append([]string{"run", "--resource", res, "--ttl", "3s", "--max-wait", "150s", "--key", "b", "-o", "json"}, conn...),
			"--", "echo", "b")...)
		b.waitStderr(t, "acquiring the lease", 30*time.Second)
		leader, err := cl.Etcd.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.Pause(); err != nil {
			t.Fatal(err)
		}
		stalled := time.Now()
		wait.Sleep(ctx, leaderStallRelease)
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wait.Sleep(ctx, leaderStallHold-time.Since(stalled))
		if err := leader.Resume(); err != nil {
			t.Fatal(err)
		}
		ao, _ := a.result(t, time.Minute)
		bo, ok := b.result(t, time.Minute)
		t.Logf("run %d: leader %s stalled; A exit %d fence %d %s; B exit %d fence %d %s (%.1f s after the stall began)",
			i, leader.Name, a.code, ao.Fence, ao.Outcome, b.code, bo.Fence, bo.Outcome, time.Since(stalled).Seconds())
		switch {
		case !ok || b.code != 0 || bo.Outcome != "applied":
			failures = append(failures, fmt.Sprintf("run %d: B exit %d: %s", i, b.code, lastLine(b.stderr.String())))
		case ao.Fence == 0 || bo.Fence <= ao.Fence:
			failures = append(failures, fmt.Sprintf("run %d: B published with fence %d, A held fence %d", i, bo.Fence, ao.Fence))
		}
		if err := leader.WaitReady(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d leader stalls in %s: B failed %d times", leaderStallRuns, time.Since(start).Round(time.Second), len(failures))
	if len(failures) > 0 {
		t.Errorf("B gave up while a quorum served in %d of %d runs:\n%s", len(failures), leaderStallRuns, strings.Join(failures, "\n"))
	}
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

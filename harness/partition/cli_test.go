//go:build !unit

package partition

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub/harness/chaos"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/layout"
)

// The fencepub command's exit codes (cmd/fencepub: publish --help).
const (
	exitStale       = 110
	exitConflict    = 111
	exitUnknown     = 112
	exitLeaseLost   = 114
	exitUnavailable = 115
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// fencepubCLI builds the fencepub command of this checkout once per test
// binary and returns its path.
func fencepubCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencepub-partition-cli-")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "fencepub")
		// Built in fencepub's own module (the harness's replace of it).
		root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/fencepub/fencepub").Output()
		if err != nil {
			cliErr = fmt.Errorf("find fencepub's module: %w", err)
			return
		}
		out, err := exec.Command("go", "-C", string(bytes.TrimSpace(root)), "build", "-o", cliPath, "./cmd/fencepub").CombinedOutput()
		if err != nil {
			cliErr = fmt.Errorf("build fencepub: %w\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

// cliClient drives the fencepub command on one worker host of a Topology
// and logs what it does to a chaos run's Recorder, as client "cli": the
// checker judges its grants and publishes with the run's. Every publish
// runs with --timeout; an unknown one is settled with `fencepub resolve`
// on the same host.
type cliClient struct {
	bin     string
	host    Host
	env     []string // the command's configuration (FENCEPUB_*)
	dir     string   // bodies and JSON documents
	timeout time.Duration
	ttl     time.Duration // of each publish's grant

	mu   sync.Mutex
	took []cliCall // every publish and resolve
}

// cliCall is one command the client ran.
type cliCall struct {
	Args  []string
	Start time.Time
	Took  time.Duration
	Exit  int
}

const cliID = "cli"

// newCLIClient returns a client running bin (fencepubCLI) on topo's worker
// host slot, whose commands reach topo's servers directly, in domain ns,
// with its files in dir.
func newCLIClient(bin, dir string, topo *Topology, slot int, ns layout.Namespace, timeout time.Duration) *cliClient {
	m := topo.Cluster.MinIO.Config
	return &cliClient{
		bin: bin, host: topo.Workers[slot], dir: dir, timeout: timeout, ttl: 5 * time.Second,
		env: []string{
			"FENCEPUB_ETCD_ENDPOINTS=" + joinComma(topo.Cluster.Etcd.Endpoints()),
			"FENCEPUB_S3_ENDPOINT=" + m.Endpoint, "FENCEPUB_S3_ACCESS_KEY=" + m.AccessKey,
			"FENCEPUB_S3_SECRET_KEY=" + m.SecretKey, "FENCEPUB_S3_BUCKET=" + m.Bucket,
			"FENCEPUB_NAMESPACE_PREFIX=" + ns.Prefix, "FENCEPUB_NAMESPACE_DOMAIN=" + ns.Domain,
			"FENCEPUB_LOG_LEVEL=error",
		},
	}
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}

// run runs fencepub with args on the client's host and returns its
// stdout and exit code (-1: it could not run).
func (c *cliClient) run(ctx context.Context, args ...string) ([]byte, int) {
	cmd := exec.CommandContext(ctx, "ip", c.host.Command(append([]string{c.bin}, args...))[1:]...)
	cmd.Env = append(os.Environ(), c.env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	start := time.Now()
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		code = -1
	}
	if len(args) > 0 && (args[0] == "publish" || args[0] == "resolve" || args[0] == "run") {
		c.mu.Lock()
		c.took = append(c.took, cliCall{Args: args, Start: start, Took: time.Since(start), Exit: code})
		c.mu.Unlock()
	}
	return stdout.Bytes(), code
}

// calls returns the publishes, resolves and runs made so far.
func (c *cliClient) calls() []cliCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cliCall(nil), c.took...)
}

// loop publishes fresh bodies, to a resource of its own beside each of the
// current window's, with `fencepub publish --ttl --wait` (acquire,
// publish, release in one command), until env.Stop closes. The TTL is 5 s: three round trips of a
// lossy link with retransmissions, as docs/cluster.md advises.
func (c *cliClient) loop(env chaos.ClientEnv) {
	rng := rand.New(rand.NewPCG(7, 7))
	for n := 1; ; n++ {
		select {
		case <-env.Stop:
			return
		default:
		}
		// A resource of its own beside each of the window's: the link's
		// cost, not the wait for the workers' leases.
		c.publish(context.Background(), env, fmt.Sprintf("%s/%d", cliID, n), env.Resource(rng)+"-cli", rng)
	}
}

// cliResult is the part of publish's and resolve's JSON the client reads.
type cliResult struct {
	Outcome string         `json:"outcome"`
	Reason  string         `json:"reason"`
	Digest  string         `json:"digest"`
	Version layout.Version `json:"version"`
	Object  struct {
		Key string `json:"key"`
	} `json:"object"`
	// Attempt is what this call wrote (publish's JSON; its version is the
	// grant's).
	Attempt *struct {
		Version layout.Version `json:"version"`
	} `json:"attempt"`
}

// publish publishes one fresh body to res under a grant of its own with
// `fencepub publish --ttl`, settles an unknown outcome with `fencepub
// resolve --from` on the same host, and logs the grant (the version's
// epoch and fence, which the command reports) and the publish.
func (c *cliClient) publish(ctx context.Context, env chaos.ClientEnv, id, res string, rng *rand.Rand) {
	clock := env.Recorder.Clock()
	body := make([]byte, 64+rng.IntN(4096))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	sum := sha256.Sum256(body)
	key := "cli-" + hex.EncodeToString(sum[:8])
	owner := "cli-" + hex.EncodeToString(sum[8:12])
	file := filepath.Join(c.dir, key)
	if err := os.WriteFile(file, body, 0o644); err != nil {
		env.Recorder.Anomaly(chaos.Anomaly{Client: cliID, Time: clock.Now(), What: "write body", Err: err.Error()})
		return
	}
	op := chaos.PublishOp{
		ID: id, Client: cliID, Resource: res, Key: key, Digest: hex.EncodeToString(sum[:]), Size: int64(len(body)),
		Owner: owner, Call: clock.Now(),
	}
	env.Recorder.Invoke(op)
	out, code := c.run(ctx, "publish", "--resource", res, "--ttl", c.ttl.String(), "--wait", "--owner", owner,
		"--key", key, "--file", file, "-o", "json", "--timeout", c.timeout.String())
	var r cliResult
	_ = json.Unmarshal(out, &r)
	op.RequestDigest = r.Digest
	op.Version, op.Result, op.Object = r.Version, r.Version, r.Object.Key
	if r.Attempt != nil {
		op.Version = r.Attempt.Version
	}
	if op.Version.Fence > 0 {
		env.Recorder.Grant(chaos.GrantEvent{Client: cliID, Time: op.Call, Resource: res, Owner: owner, Epoch: op.Version.Epoch, Fence: op.Version.Fence})
	}
	switch code {
	case 0:
		op.Reported = r.Outcome // applied or duplicate
	case exitStale:
		op.Reported = chaos.Stale
	case exitConflict:
		op.Reported = chaos.Conflict
	case exitUnknown:
		op.Reported = chaos.Unknown
	default:
		op.Reported = chaos.Failed // not sent: nothing was published
		op.Err = fmt.Sprintf("exit %d: %s", code, bytes.TrimSpace(out))
	}
	op.Outcome, op.Reason = op.Reported, r.Reason
	env.Recorder.Attempt(chaos.Attempt{Client: cliID, Op: "publish", Call: op.Call, Return: clock.Now(),
		Failed: code == exitUnknown || code == exitUnavailable, Err: op.Err})
	if op.Reported == chaos.Unknown {
		c.resolve(ctx, &op, out)
	}
	op.Return, op.Done = clock.Now(), true
	env.Recorder.Complete(op)
}

// resolve settles op with `fencepub resolve --from` given publish's JSON,
// on the client's host, retrying while etcd is unreachable from it (for up
// to 5 minutes).
func (c *cliClient) resolve(ctx context.Context, op *chaos.PublishOp, doc []byte) {
	from := filepath.Join(c.dir, op.Key+".json")
	if err := os.WriteFile(from, doc, 0o644); err != nil {
		op.Err = err.Error()
		return
	}
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, code := c.run(ctx, "resolve", "--from", from, "-o", "json")
		var r cliResult
		_ = json.Unmarshal(out, &r)
		switch {
		case code == 0 && r.Outcome == "applied":
			op.Outcome, op.Result, op.Object = chaos.Applied, r.Version, r.Object.Key
		case code == 0 && r.Outcome == "duplicate":
			op.Outcome, op.Result, op.Object = chaos.Duplicate, r.Version, r.Object.Key
		case code == exitConflict:
			op.Outcome, op.Result, op.Object = chaos.Conflict, r.Version, r.Object.Key
		case code == exitStale:
			op.Outcome, op.Reason, op.Result, op.Object = chaos.ResolvedNotApplied, r.Reason, op.Version, ""
		case code == exitUnavailable || code == exitUnknown:
			continue
		default:
			op.Err = fmt.Sprintf("resolve: exit %d: %s", code, bytes.TrimSpace(out))
			return
		}
		op.ResolvedBy = "worker"
		return
	}
}

// runOnce runs `fencepub run` on the client's host with a command that
// marks its start in a file and then sleeps for cmdFor; once the mark is
// there, cut (called once) cuts the host. It returns run's exit code, how
// long after the cut it exited, and an error when run ended before its
// command started or reported a lost lease with something published. The
// grant run reports is logged, so the checker judges any publish of it.
func (c *cliClient) runOnce(env chaos.ClientEnv, res string, ttl, grace, cmdFor time.Duration, cut func()) (code int, afterCut time.Duration, err error) {
	clock := env.Recorder.Clock()
	mark := filepath.Join(c.dir, fmt.Sprintf("run-%d.started", time.Now().UnixNano()))
	script := fmt.Sprintf("touch %s; sleep %d; echo result", mark, int(cmdFor.Seconds()))
	owner := fmt.Sprintf("cli-run-%d", time.Now().UnixNano())
	type done struct {
		out  []byte
		code int
		at   time.Time
	}
	ch := make(chan done, 1)
	go func() {
		out, code := c.run(context.Background(), "run", "--resource", res, "--owner", owner, "--ttl", ttl.String(),
			"--grace", grace.String(), "-o", "json", "--", "sh", "-c", script)
		ch <- done{out, code, time.Now()}
	}()
	var cutAt time.Time
	for cutAt.IsZero() {
		select {
		case d := <-ch:
			return d.code, 0, fmt.Errorf("run ended (exit %d) before its command started: %s", d.code, d.out)
		case <-time.After(20 * time.Millisecond):
			if _, err := os.Stat(mark); err == nil {
				cut()
				cutAt = time.Now()
			}
		}
	}
	d := <-ch
	var r struct {
		Epoch   uint64 `json:"epoch"`
		Fence   uint64 `json:"fence"`
		Outcome string `json:"outcome"`
	}
	if json.Unmarshal(d.out, &r) == nil && r.Fence > 0 {
		env.Recorder.Grant(chaos.GrantEvent{Client: cliID, Time: clock.Now(), Resource: res, Owner: owner, Epoch: r.Epoch, Fence: r.Fence})
	}
	if d.code == exitLeaseLost && r.Outcome != "not_published" {
		err = fmt.Errorf("run exited %d with outcome %q, want not_published: %s", d.code, r.Outcome, d.out)
	}
	return d.code, d.at.Sub(cutAt), err
}

// cliTimeoutBound is how long after its start a publish with --timeout d
// may return: d and a second of slack for the process's start and exit.
func cliTimeoutBound(d time.Duration) time.Duration { return d + time.Second }

// runExitBound is how long after the cut `fencepub run` may exit: its
// lease's TTL (when it notices the loss), --grace for its command, and
// etcd.request_timeout for the release (run --help), plus a second.
func runExitBound(ttl, grace time.Duration) time.Duration {
	return ttl + grace + config.DefaultRequestTimeout + time.Second
}

// injectOnCLI applies fault (which returns its heal) for hold, logs it to
// env's Recorder as a fault of kind on the fencepub command's client (so
// Liveness leaves the client's operations meanwhile out) and returns once
// it is healed.
func injectOnCLI(env chaos.ClientEnv, kind chaos.FaultKind, detail string, hold time.Duration, fault func() (func() error, error)) error {
	clock := env.Recorder.Clock()
	heal, err := fault()
	rec := chaos.FaultRecord{Kind: kind, Target: cliID, Start: clock.Now(), Detail: detail}
	if err == nil {
		time.Sleep(hold)
		err = heal()
	}
	rec.End = clock.Now()
	if err != nil {
		rec.Err = err.Error()
	}
	env.Recorder.Fault(rec)
	return err
}

// TestPartitionsCLI runs the fencepub command on a worker host of a
// Topology while a chaos run goes on, and partitions that host: its
// publishes and grants are judged by the chaos checker with the run's.
func TestPartitionsCLI(t *testing.T) {
	Require(t)
	bin := fencepubCLI(t)
	// A lossy, slow link between the command's host and etcd: no command
	// fails while a quorum is up, every publish returns within its
	// --timeout, every unknown one is settled by resolve from that host.
	t.Run("lossy_slow_link_to_etcd", func(t *testing.T) {
		const timeout = 15 * time.Second
		hold := 20 * time.Second
		if full() {
			hold = 90 * time.Second
		}
		var cli *cliClient
		var window [2]time.Time
		res := runScenario(t, 6, wl, chaos.Schedule{Seed: 6, Duration: hold + 10*time.Second}, func(topo *Topology, env chaos.ClientEnv) {
			cli = newCLIClient(bin, t.TempDir(), topo, 2, env.Namespace, timeout)
			faulted := make(chan struct{})
			defer func() { <-faulted }() // Run waits for this client: window is then set
			go func() {
				defer close(faulted)
				time.Sleep(3 * time.Second)
				window[0] = time.Now()
				_ = injectOnCLI(env, chaos.PartitionLossyEtcd, fmt.Sprintf("link to etcd loses %.0f %% and delays %s each way for %s", chaos.LossyShare*100, chaos.LossyDelay, hold), hold,
					func() (func() error, error) {
						return topo.DegradeWorker(2, false, chaos.LossyShare, chaos.LossyDelay)
					})
				window[1] = time.Now()
			}()
			cli.loop(env)
		})
		checkCLI(t, res.History, cli, timeout, window)
	})
	// `fencepub run` losing etcd mid-command: it kills the command, publishes
	// nothing and exits 114 within its lease's TTL + --grace +
	// etcd.request_timeout of the cut.
	t.Run("run_loses_etcd", func(t *testing.T) {
		const ttl, grace = 2 * time.Second, 2 * time.Second
		hold := 15 * time.Second
		var code int
		var after time.Duration
		var runErr error
		runScenario(t, 7, wl, chaos.Schedule{Seed: 7, Duration: hold + 12*time.Second}, func(topo *Topology, env chaos.ClientEnv) {
			cli := newCLIClient(bin, t.TempDir(), topo, 2, env.Namespace, 15*time.Second)
			time.Sleep(3 * time.Second)
			healed := make(chan struct{})
			code, after, runErr = cli.runOnce(env, env.Resource(rand.New(rand.NewPCG(1, 2))), ttl, grace, 60*time.Second, func() {
				go func() {
					defer close(healed)
					_ = injectOnCLI(env, chaos.PartitionWorkerEtcd, fmt.Sprintf("fencepub run's host cut from etcd for %s", hold), hold,
						func() (func() error, error) { return topo.CutWorker(2, false, false) })
				}()
			})
			<-healed
		})
		if runErr != nil {
			t.Error(runErr)
		}
		t.Logf("COST run: exit %d, %s after its host was cut from etcd (bound %s)", code, after.Round(time.Millisecond), runExitBound(ttl, grace))
		if code != exitLeaseLost {
			t.Errorf("fencepub run exited %d after losing etcd, want %d (lease lost)", code, exitLeaseLost)
		}
		if after > runExitBound(ttl, grace) {
			t.Errorf("fencepub run exited %s after the cut, want within %s (TTL + --grace + etcd.request_timeout + 1 s)", after, runExitBound(ttl, grace))
		}
	})
}

// checkCLI asserts what the lossy link may cost the command: no failure
// (exit 115) during window, every publish back within its --timeout, and
// logs the costs.
func checkCLI(t *testing.T, h *chaos.History, cli *cliClient, timeout time.Duration, window [2]time.Time) {
	t.Helper()
	if cli == nil {
		t.Fatal("the fencepub client never started")
	}
	// A command that acquires works until its --timeout less the release's
	// reserve (min(etcd.request_timeout, --timeout/4), `publish --help`).
	budget := timeout - min(config.DefaultRequestTimeout, timeout/4)
	var n, failed, exhausted, slow int
	var longest time.Duration
	for _, c := range cli.calls() {
		if c.Start.Before(window[0]) || c.Start.After(window[1]) {
			continue
		}
		n++
		longest = max(longest, c.Took)
		switch {
		case c.Exit < 0:
			failed++
			t.Errorf("fencepub %s did not exit on the lossy link", c.Args[0])
		case c.Exit == exitUnavailable && c.Took < budget:
			// Given up with time left: a check or a retry loop shorter
			// than the command's deadline.
			failed++
			t.Errorf("fencepub %s failed (exit %d) after %s, with its --timeout %s not used up", c.Args[0], c.Exit, c.Took, timeout)
		case c.Exit == exitUnavailable:
			// Lost packets ate its whole deadline; it failed cleanly.
			exhausted++
		}
		if c.Args[0] == "publish" && c.Took > cliTimeoutBound(timeout) {
			slow++
			t.Errorf("fencepub publish --timeout %s took %s", timeout, c.Took)
		}
	}
	outcomes := map[string]int{}
	for _, p := range h.Publishes {
		if p.Client == cliID && p.Reported == chaos.Failed {
			t.Logf("fencepub publish %s failed at %.1fs-%.1fs of the run: %s", p.ID, float64(p.Call)/1e9, float64(p.Return)/1e9, p.Err)
		}
		if p.Client == cliID {
			o := p.Reported
			if p.Reported == chaos.Unknown {
				o = "unknown→" + p.Outcome
			}
			outcomes[o]++
		}
	}
	t.Logf("COST cli lossy link: %d publishes/resolves on it, %d failed with time left, %d ran out of --timeout, %d over --timeout, longest %s; outcomes %v", n, failed, exhausted, slow, longest.Round(time.Millisecond), outcomes)
	if n == 0 || exhausted == n {
		t.Errorf("no fencepub command succeeded while its link was lossy (%d ran, %d ran out of --timeout)", n, exhausted)
	}
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"al.essio.dev/pkg/shellescape"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
)

// runOutput is `fencepub run -o json`'s document.
type runOutput struct {
	Resource    string         `json:"resource"`
	Owner       string         `json:"owner"`
	Epoch       uint64         `json:"epoch"`
	Fence       uint64         `json:"fence"`
	Key         string         `json:"key"`
	CommandExit int            `json:"command_exit"` // -1 when the command was not run to completion
	Outcome     string         `json:"outcome"`      // publisher outcome, or "not_published"
	Reason      string         `json:"reason"`
	Version     layout.Version `json:"version"`
	Object      layout.Object  `json:"object"`
	DurationMS  int64          `json:"duration_ms"`
	Error       string         `json:"error,omitempty"`
}

// newRunCmd builds `fencepub run`: a batch command under a fenced lease whose
// result is published with the grant's fence.
func newRunCmd() *cobra.Command {
	var (
		resource, owner, key, runID, output, contentType string
		ttl, wait, grace, timeout                        time.Duration
		allowEmpty                                       bool
	)
	cmd := &cobra.Command{
		Use:   "run --resource R [--owner O] [--ttl 15s] [--wait 1m] [--key K] [--output FILE] -- CMD ARGS...",
		Short: "Run a batch command under a fenced lease and publish its result",
		Long: `run is the fenced replacement for wrapping a cron job in flock or 'etcdctl lock':

  1. acquire the lease on --resource (waiting up to --wait while another owner
     holds it) and mint its fence in the same etcd transaction;
  2. run CMD with FENCEPUB_RESOURCE, FENCEPUB_EPOCH, FENCEPUB_FENCE and
     FENCEPUB_OWNER in its environment, renewing the lease meanwhile;
  3. capture its result: its stdout, or the file it wrote at --output (CMD
     must create or rewrite it: a file left as it was before the run is not
     published, and fencepub never deletes it); an empty result is refused
     unless --allow-empty, so a job that silently produced nothing does not
     replace the last good result;
  4. publish the result with the grant's fence, in one etcd transaction that
     rejects it if a newer state is already published;
  5. release the lease.

If the lease is lost while CMD runs (a pause, a partition, a revoke), CMD gets
SIGTERM, then SIGKILL after --grace, and nothing is published (exit 114). Even a
publish that slipped through late would be refused by the pointer: the fence
travels with it.

The idempotency key (--key) names the job run. Its default is
run-<first 16 hex digits of sha256(resource, CMD ARGS..., run id)>, where the run
id is --run-id, else $FENCEPUB_RUN_ID (set it from your scheduler: the cron slot,
an Airflow run_id, a Kubernetes Job name), else the current UTC hour. A re-run of
the same run with the same output is "duplicate" (exit 0); with different
output it is "conflict" (exit 111) — so jobs should produce deterministic
output (sorted entries, no timestamps).

-o json (or --format json) prints one JSON document with the grant, the
command's exit status and the publish outcome.

Exit codes: 0 published (applied or duplicate; stderr and the JSON tell which),
CMD's own exit code when CMD fails (nothing is published), 2 usage, 110 stale,
111 conflict, 112 unknown (settle with 'fencepub resolve'), 113 lease held past
--wait, 114 lease lost, 115 etcd or the object store unavailable.`,
		Args: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 || len(args) == 0 {
				return exitcode.Usagef("give the command after --: fencepub run --resource R -- CMD ARGS...")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&resource, "resource", "", "resource to publish (required)")
	f.StringVar(&owner, "owner", "", "owner id of this run (default <hostname>-<pid>-<random>)")
	f.DurationVar(&ttl, "ttl", 15*time.Second, "lease TTL (whole seconds, at least 2s); renewed while CMD runs")
	f.DurationVar(&wait, "wait", time.Minute, "how long to wait for the lease while another owner holds it (0: fail at once with 113)")
	f.StringVar(&key, "key", "", "idempotency key of this run's publish (default: see above)")
	f.StringVar(&runID, "run-id", "", "identity of this job run, part of the default key (default $FENCEPUB_RUN_ID, else the UTC hour)")
	f.StringVar(&output, "output", "", "publish the file CMD writes (creates or rewrites) here instead of its stdout; never deleted, and not published if left unchanged")
	f.StringVar(&contentType, "content-type", "", "content type of the result (default application/octet-stream)")
	f.BoolVar(&allowEmpty, "allow-empty", false, "publish an empty (0-byte) result instead of refusing it")
	f.DurationVar(&grace, "grace", 10*time.Second, "after SIGTERM on lease loss, wait this long before SIGKILL")
	f.DurationVar(&timeout, "publish-timeout", 5*time.Minute, "deadline for writing and publishing the result; an unanswered transaction is then unknown (112)")
	_ = cmd.MarkFlagRequired("resource")
	out := addFormatFlag(cmd, "format") // --output names the result file

	addConnFlags(cmd)
	cmd.PreRunE = func(c *cobra.Command, _ []string) error {
		if err := c.ValidateRequiredFlags(); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		start := time.Now()
		if owner == "" {
			host, _ := os.Hostname()
			owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), authority.NewID()[:8])
		}
		if err := layout.ValidateResource(resource, false); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		if err := layout.ValidateOwner(owner); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		if output == "json" || output == "text" {
			return exitcode.Usagef("--output names the file CMD writes its result to; for the output format use -o %s (--format %s)", output, output)
		}
		switch {
		case wait < 0 || grace < 0:
			return exitcode.Usagef("--wait and --grace must not be negative (got %s, %s)", wait, grace)
		case timeout <= 0:
			return exitcode.Usagef("--publish-timeout %s: want a positive duration", timeout)
		}
		var prior os.FileInfo // --output as it was before the run
		if output != "" {
			fi, err := os.Stat(output)
			switch {
			case err == nil && fi.IsDir():
				return exitcode.Usagef("--output %s is a directory; give the file CMD writes its result to (nothing acquired)", output)
			case err == nil:
				prior = fi
			case !errors.Is(err, os.ErrNotExist):
				return exitcode.Usagef("--output %s: %v (nothing acquired)", output, err)
			}
		}
		if _, err := exec.LookPath(args[0]); err != nil {
			return exitcode.Usagef("CMD %q: %v (nothing acquired)", args[0], err)
		}
		if key == "" {
			key = defaultRunKey(resource, args, runID)
		}
		if err := layout.ValidateKey("key", key); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		r := &runner{c: c, args: args, output: output, prior: prior, allowEmpty: allowEmpty, grace: grace, res: runOutput{Resource: resource, Owner: owner, Key: key, CommandExit: -1, Outcome: "not_published"}}
		err := r.run(resource, owner, key, contentType, ttl, wait, timeout)
		r.res.DurationMS = time.Since(start).Milliseconds()
		if err != nil {
			r.res.Error = err.Error()
		}
		if *out == "json" {
			if perr := printJSON(c.OutOrStdout(), r.res); perr != nil && err == nil {
				err = perr
			}
		}
		return err
	}
	return cmd
}

// defaultRunKey is run-<16 hex of sha256(resource, argv, run id)>; the run id
// is id, else $FENCEPUB_RUN_ID, else the current UTC hour.
func defaultRunKey(resource string, argv []string, id string) string {
	if id == "" {
		id = os.Getenv("FENCEPUB_RUN_ID")
	}
	if id == "" {
		id = time.Now().UTC().Format("2006-01-02T15")
	}
	h := sha256.New()
	for _, s := range append([]string{resource, id}, argv...) {
		fmt.Fprintf(h, "%d:%s", len(s), s) // length-prefixed: no two lists collide
	}
	return "run-" + hex.EncodeToString(h.Sum(nil))[:16]
}

type runner struct {
	c      *cobra.Command
	args   []string
	output string
	prior  os.FileInfo // --output before the run; nil when it did not exist
	grace  time.Duration
	// allowEmpty publishes a 0-byte result (--allow-empty).
	allowEmpty bool
	res        runOutput
}

func (r *runner) say(format string, a ...any) {
	fmt.Fprintf(r.c.ErrOrStderr(), "fencepub run: "+format+"\n", a...)
}

func (r *runner) run(resource, owner, key, contentType string, ttl, wait, timeout time.Duration) error {
	env, err := openEnv(r.c)
	if err != nil {
		return err
	}
	defer env.Close()
	ctx := r.c.Context()
	a, err := authority.New(authority.Config{Namespace: env.NS, Etcd: env.Etcd, Store: env.Store, Logger: env.Log})
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	r.say("acquiring the lease on %q as %q (ttl %s, wait %s)", resource, owner, ttl, wait)
	actx, cancel := context.WithTimeout(ctx, max(wait, time.Second))
	g, err := a.Acquire(actx, authority.AcquireRequest{Resource: resource, Owner: owner, TTL: ttl, Wait: wait > 0})
	cancel()
	if err != nil {
		return authorityExit(err)
	}
	r.res.Epoch, r.res.Fence = g.Epoch, g.Fence()
	r.say("granted: epoch %d, fence %d", g.Epoch, g.Fence())
	sess, err := a.NewSession(ctx, g)
	if err != nil {
		return authorityExit(err)
	}
	defer func() {
		if err := sess.Close(); err != nil && !errors.Is(err, authority.ErrLeaseLost) {
			env.Log.Warn("release failed; the lease expires by itself", "err", err)
		}
	}()

	result, cleanup, err := r.execute(sess, g)
	defer cleanup()
	if err != nil {
		return err
	}
	select {
	case <-sess.Lost():
		return exitcode.With(exitcode.LeaseLost, fmt.Errorf("lease lost after the command finished; not publishing: %w", sess.Err()))
	default:
	}

	pctx, pcancel := context.WithTimeout(ctx, timeout)
	defer pcancel()
	client, err := publisher.New(publisher.Config{Namespace: env.NS, Etcd: env.Etcd, Store: env.Store, Logger: env.Log})
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	p, err := client.BindGrant(pctx, g, false)
	if err != nil {
		return publishExit(publisher.Result{}, err)
	}
	body, err := os.Open(result)
	if err != nil {
		return exitcode.With(exitcode.Usage, fmt.Errorf("result %s: %w", result, err))
	}
	defer body.Close()
	r.say("publishing the result with fence %d (key %s)", g.Fence(), key)
	res, err := p.Publish(pctx, publisher.Operation{IdempotencyKey: key, Body: body, ContentType: contentType})
	r.res.Outcome, r.res.Reason, r.res.Version, r.res.Object = string(res.Outcome), string(res.Reason), res.Version, res.Object
	switch res.Outcome {
	case publisher.Applied:
		r.say("applied: %s is at %s", resource, res.Version)
	case publisher.Duplicate:
		r.say("duplicate: this run (key %s) was already published at %s; the pointer did not move", key, res.Version)
	case publisher.Unknown:
		r.say("unknown; settle it with: fencepub resolve --resource %s --key %s --epoch %d --fence %d --seq %d",
			resource, key, res.Version.Epoch, res.Version.Fence, res.Version.Seq)
	case "":
	case publisher.Conflict:
		r.say("conflict: key %s was already published with a different result; nothing published (is the job's output deterministic?)", key)
	default:
		r.say("%s (reason %s): nothing published", res.Outcome, res.Reason)
	}
	return publishExit(res, err)
}

// execute runs the command with the grant in its environment and returns the
// path of its result. If the lease is lost meanwhile the command gets SIGTERM
// (its process group), then SIGKILL after the grace period. A failing
// command's exit status is passed through. cleanup removes temporary files.
func (r *runner) execute(sess *authority.Session, g authority.Grant) (string, func(), error) {
	noop := func() {}
	cmd := exec.Command(r.args[0], r.args[1:]...)
	cmd.Env = append(os.Environ(),
		"FENCEPUB_RESOURCE="+g.Resource, "FENCEPUB_EPOCH="+strconv.FormatUint(g.Epoch, 10),
		"FENCEPUB_FENCE="+strconv.FormatUint(g.Fence(), 10), "FENCEPUB_OWNER="+g.Owner)
	cmd.Stdin = r.c.InOrStdin()
	cmd.Stderr = r.c.ErrOrStderr()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	result, cleanup := r.output, noop
	var stdout *os.File
	if r.output == "" {
		f, err := os.CreateTemp("", "fencepub-run-stdout-")
		if err != nil {
			return "", noop, err
		}
		stdout, result = f, f.Name()
		cleanup = func() { _ = f.Close(); _ = os.Remove(f.Name()) }
		cmd.Stdout = f
	} else {
		cmd.Stdout = r.c.OutOrStdout()
	}
	r.say("running %s", shellescape.QuoteCommand(r.args))
	if err := cmd.Start(); err != nil {
		if stdout != nil {
			stdout.Close()
		}
		return "", cleanup, exitcode.With(exitcode.Usage, fmt.Errorf("start %s: %w", r.args[0], err))
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var waitErr error
	lost := false
	select {
	case waitErr = <-done:
	case <-sess.Lost():
		lost = true
		r.say("lease lost while the command runs (%v): SIGTERM, SIGKILL after %s", sess.Err(), r.grace)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case waitErr = <-done:
		case <-time.After(r.grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitErr = <-done
		}
	case <-r.c.Context().Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-done
		return "", cleanup, exitcode.With(exitcode.Internal, fmt.Errorf("interrupted; nothing published: %w", r.c.Context().Err()))
	}
	if stdout != nil {
		if err := stdout.Close(); err != nil && waitErr == nil {
			waitErr = err
		}
	}
	if lost {
		return "", cleanup, exitcode.With(exitcode.LeaseLost, fmt.Errorf("lease on %q lost while the command ran; command terminated, nothing published: %w", g.Resource, sess.Err()))
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		code = ee.ExitCode()
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			code = 128 + int(st.Signal())
		}
	} else if waitErr != nil {
		return "", cleanup, waitErr
	}
	r.res.CommandExit = code
	if code != 0 {
		return "", cleanup, &exitcode.Error{Code: code, Err: fmt.Errorf("command %s exited with %d; nothing published", r.args[0], code)}
	}
	fi, err := os.Stat(result)
	if err != nil {
		return "", cleanup, exitcode.With(exitcode.Usage, fmt.Errorf("the command succeeded but wrote no result at --output %s: %w; nothing published", r.output, err))
	}
	if fi.Size() == 0 && !r.allowEmpty {
		return "", cleanup, exitcode.Usagef("the command succeeded but its result (%s) is empty; nothing published (pass --allow-empty to publish an empty result)", resultName(r.output))
	}
	if r.prior != nil && unchanged(r.prior, fi) {
		return "", cleanup, exitcode.Usagef("the command succeeded but did not write --output %s: it is unchanged since before the run (%d bytes, modified %s); nothing published",
			r.output, fi.Size(), fi.ModTime().Format(time.RFC3339))
	}
	return result, cleanup, nil
}

// resultName names where a run's result came from.
func resultName(output string) string {
	if output == "" {
		return "its stdout"
	}
	return "--output " + output
}

// unchanged reports whether b is the same file as a with the same size and
// modification and change times: nobody wrote it in between.
func unchanged(a, b os.FileInfo) bool {
	sa, oka := a.Sys().(*syscall.Stat_t)
	sb, okb := b.Sys().(*syscall.Stat_t)
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) &&
		oka && okb && sa.Ctim == sb.Ctim
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"al.essio.dev/pkg/shellescape"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	Digest      string         `json:"digest,omitempty"` // request digest; with key, version and object it names the attempt for resolve --from
	Duration    float64        `json:"duration_seconds"`
	Error       string         `json:"error,omitempty"`
	ExitCode    int            `json:"exit_code"` // fencepub's: CMD's own when CMD failed
	// DatasetStats are the counts of an --output-dir publish (files,
	// bytes, uploaded_files, uploaded_bytes, reused_files, sha256).
	*publisher.DatasetStats
}

// runOptions are the flags of `fencepub run` (addFlags) and the command
// line after "--"; Complete fills the defaults that need the environment,
// Validate checks them before anything is acquired, Run does the work.
type runOptions struct {
	resource, owner, key, runID, file, contentType, requestID string
	ttl, maxWait, wait, grace, timeout                        time.Duration
	allowEmpty                                                bool
	format                                                    string
	// outputFile is the result file given in the deprecated form
	// --output FILE (runOutputValue).
	outputFile string
	outputDir  string   // rundir.go
	sets       []string // --set RESOURCE=PATH: a group (rungroup.go)
	members    []groupMember
	args       []string // CMD ARGS...
}

// newRunCmd builds `fencepub run`: a batch command under a fenced lease whose
// result is published with the grant's fence.
func newRunCmd() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run (--resource R [--file FILE | --output-dir DIR] | --set R=PATH...) [--owner O] [--ttl 15s] [--max-wait 1m] [--key K] -- CMD ARGS...",
		Short: "Run a batch command under a fenced lease and publish its result",
		Long: `run is the fenced replacement for wrapping a cron job in flock or 'etcdctl lock':

  1. acquire the lease on --resource (waiting up to --max-wait while another
     owner holds it) and mint its fence in the same etcd transaction;
  2. run CMD with FENCEPUB_RESOURCE, FENCEPUB_EPOCH, FENCEPUB_FENCE and
     FENCEPUB_OWNER in its environment, renewing the lease meanwhile;
  3. capture its result: its stdout, streamed into the object store while CMD
     runs (no file is written: run needs no writable directory), or the
     regular file it wrote at --file, read once CMD ended (then CMD's
     stdout goes to stderr: fencepub's stdout is its own output).
     An existing --file is moved to FILE.fencepub-prev before CMD starts, so
     only what CMD writes in this run can be published; it is removed once
     the new result is published, and put back whenever nothing is
     published (CMD failed, wrote nothing, was refused as stale, ...), with
     what CMD wrote kept as FILE.fencepub-failed. --file must be a regular
     file or missing (not a symlink, directory, FIFO or device). A
     FILE.fencepub-prev found once the lease is held (fencepub itself was
     killed mid-run) stops the run (exit 2) until you restore or remove it.
     An empty result is refused unless --allow-empty, so a job that silently
     produced nothing does not replace the last good result. CMD's leftover background processes (its process
     group) are killed when it exits, before the result is read;
     With --output-dir DIR, every regular file CMD wrote under DIR is
     published as one dataset version (docs/datasets.md), reusing the
     files of the current dataset version that did not change; DIR must be
     missing or empty when run starts (nothing is acquired otherwise), and
     publish --dir's refusals (symbolic links, special files, bad names)
     apply once CMD ended;
  4. once CMD exited 0 with the lease held, publish the result with the
     grant's fence, in one etcd transaction that rejects it if a newer state
     is already published (an upload of a CMD that failed is aborted);
  5. release the lease.

A group (docs/groups.md): with --set RESOURCE=PATH (repeated, instead of
--resource) run acquires every resource as one group (all or none, one
lease), runs CMD with FENCEPUB_RESOURCES (the names, sorted, space-separated),
FENCEPUB_EPOCH and FENCEPUB_OWNER, and CMD writes each resource's result at
its PATH: a regular file (one object, --content-type) or a directory (a
dataset). Once CMD exited 0, every member is published in one etcd
transaction: all pointers move, or none. Each PATH must be missing or an
empty directory when run starts (exit 2, nothing acquired); a PATH CMD did
not write, an empty one (unless --allow-empty) or one holding what a
dataset cannot stops the run with exit 2 and nothing published. -o json
prints the group's result as publish --set does (resolve --from settles an
unknown one), with owner, epoch, command_exit and exit_code.

If the lease is lost while CMD runs (a pause, a partition, a revoke), CMD gets
SIGTERM, then SIGKILL after --grace, and nothing is published (exit 114). Even a
publish that slipped through late would be refused by the pointer: the fence
travels with it.

Time bounds. CMD runs as long as it takes. Everything after it has a bound:
when CMD succeeded, --publish-timeout bounds writing and publishing the
result and releasing the lease (the release keeps the last
etcd.request_timeout of it, at most a quarter); otherwise (CMD failed, the
lease was lost, an interrupt) the release gets etcd.request_timeout. So run
exits at most --grace + etcd.request_timeout after it notices a lost lease
(plus the --pushgateway push, if any, at most 10s). What is not done in time
is left, and said so on stderr: the lease expires by itself within --ttl,
and GC aborts an unfinished upload.

--request-id names the acquire: when etcd or the store could not confirm a
grant (exit 115, "retry with request id"), run the same command again with
that --request-id and --owner (both printed) and it gets that grant back
instead of minting another. Given from the start (say, the scheduler's run
id), --request-id alone suffices: the default owner is derived from it.

The idempotency key (--key) names the job run. Its default is
run-<first 16 hex digits of sha256(resource, CMD ARGS..., run id)>, where the run
id is --run-id, else $FENCEPUB_RUN_ID (set it from your scheduler: the cron slot,
an Airflow run_id, a Kubernetes Job name), else the current UTC hour. A re-run of
the same run with the same output is "duplicate" (exit 0); with different
output it is "conflict" (exit 111) — so jobs should produce deterministic
output (sorted entries, no timestamps).

-o json prints one JSON document with the grant, the command's exit status, the
publish outcome, "error" and "exit_code" — also when nothing was published.
-o (--output) is the output format, as in every command; the result file is
--file. The former spellings --output FILE, --format and --wait still work,
with a warning.

Exit codes: 0 published (applied or duplicate; stderr and the JSON tell which),
CMD's own exit code when CMD fails (nothing is published), 2 usage, 110 stale,
111 conflict, 112 unknown (settle with 'fencepub resolve'), 113 lease held past
--max-wait, 114 lease lost, 115 etcd or the object store unavailable.`,
		Args: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 || len(args) == 0 {
				return exitcode.Usagef("give the command after --: fencepub run --resource R -- CMD ARGS...")
			}
			return nil
		},
	}
	o.addFlags(cmd)
	cli.AddConnFlags(cmd)
	cmd.PreRunE = func(c *cobra.Command, _ []string) error {
		if err := c.ValidateRequiredFlags(); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		start := time.Now()
		if err := o.Complete(c, args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(c, start)
	}
	addRunMetrics(cmd, func() []string {
		if len(o.members) > 0 {
			return memberNames(o.members)
		}
		return []string{o.resource}
	})
	return cmd
}

// addFlags registers run's own flags on cmd.
func (o *runOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.resource, "resource", "", "resource to publish (required, unless --set)")
	f.StringVar(&o.owner, "owner", "", "owner id of this run (default <hostname>-<pid>-<random>; with --request-id, derived from it)")
	f.DurationVar(&o.ttl, "ttl", 15*time.Second, "lease TTL (whole seconds, at least 2s); renewed while CMD runs")
	f.DurationVar(&o.maxWait, "max-wait", time.Minute, "how long to wait for the lease while another owner holds it (0: fail at once with 113)")
	f.DurationVar(&o.wait, "wait", time.Minute, "how long to wait for the lease while another owner holds it")
	cli.Deprecate(f, "wait", "use --max-wait (the same duration), as publish and authority acquire do")
	f.StringVar(&o.requestID, "request-id", "", "acquire request id (default random); a retry with the same id gets the same grant")
	f.StringVar(&o.key, "key", "", "idempotency key of this run's publish (default: see above)")
	f.StringVar(&o.runID, "run-id", "", "identity of this job run, part of the default key (default $FENCEPUB_RUN_ID, else the UTC hour)")
	f.StringVar(&o.file, "file", "", "publish the regular file CMD writes here instead of its stdout (an existing one is set aside as FILE.fencepub-prev while CMD runs; see above)")
	f.StringArrayVar(&o.sets, "set", nil, "RESOURCE=PATH (repeatable, instead of --resource): CMD writes each resource's result at PATH (a file, or a directory: a dataset); all are published as one group")
	f.StringVar(&o.outputDir, "output-dir", "", "publish every regular file CMD writes under this directory as one dataset version (it must be missing or empty when run starts)")
	f.StringVar(&o.contentType, "content-type", "", "content type of the result (default application/octet-stream)")
	f.BoolVar(&o.allowEmpty, "allow-empty", false, "publish an empty (0-byte) result instead of refusing it")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "after SIGTERM on lease loss, wait this long before SIGKILL")
	f.DurationVar(&o.timeout, "publish-timeout", 5*time.Minute, "deadline, from CMD's end, for writing and publishing the result and releasing the lease; an unanswered transaction is then unknown (112)")
	o.format = "text"
	f.VarP(&runOutputValue{format: &o.format, file: &o.outputFile}, cli.OutputFlag, "o", "output format: text or json")
	completeOutput(cmd)
	f.Var(&choice{value: &o.format, allowed: outputFormats, def: "text"}, "format", "output format: text or json")
	cli.Deprecate(f, "format", "use -o/--output, as every command does")
}

// runOutputValue is run's -o/--output: the output format (text or json),
// as in every command. Any other value is a result file, the flag's former
// meaning, kept working as a deprecated spelling of --file (Complete warns).
type runOutputValue struct{ format, file *string }

var _ pflag.Value = (*runOutputValue)(nil)

func (v *runOutputValue) String() string {
	if v.format == nil {
		return "text"
	}
	return *v.format
}

func (v *runOutputValue) Set(s string) error {
	switch s {
	case "text", "json":
		*v.format = s
	case "":
		return fmt.Errorf("must be text or json")
	default:
		*v.file = s
	}
	return nil
}

func (v *runOutputValue) Type() string { return "string" }

// Complete takes CMD ARGS, the deprecated spellings (--wait, --output
// FILE: warned about on c's log) and fills the default owner
// (<hostname>-<pid>-<random>, or run-<16 hex of sha256(--request-id)> when
// a request id is given), key (defaultRunKey) and request id (random). Errors: usage, for a
// former and a current spelling given together.
func (o *runOptions) Complete(c *cobra.Command, args []string) error {
	o.args = args
	fl := c.Flags()
	if fl.Changed("wait") {
		if fl.Changed("max-wait") {
			return exitcode.Usagef("give --max-wait, not also the deprecated --wait")
		}
		o.maxWait = o.wait
	}
	if o.outputFile != "" {
		if o.file != "" {
			return exitcode.Usagef("give --file, not also --output FILE (its deprecated spelling)")
		}
		cli.Logger(c).Warn("--output FILE is deprecated and will be removed: use --file FILE (-o/--output is the output format, as in every command)", "file", o.outputFile)
		o.file = o.outputFile
	}
	switch {
	case o.owner == "" && o.requestID != "":
		// A retry with the request id is the same lease request: the same
		// owner, or the authority refuses it (ErrRequestConflict).
		o.owner = "run-" + hexDigest(o.requestID)
	case o.owner == "":
		host, _ := os.Hostname()
		o.owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), authority.NewID()[:8])
	}
	if len(o.sets) > 0 {
		ms, err := parseSetSpecs(o.sets)
		if err != nil {
			return err
		}
		o.members = ms
	}
	if o.key == "" {
		o.key = defaultRunKey(o.keyResource(), args, o.runID)
	}
	if fl.Changed("request-id") && o.requestID == "" {
		// An unset shell variable must not silently become a random id:
		// the retry would then mint a second grant.
		return exitcode.Usagef("--request-id is empty")
	}
	if o.requestID == "" {
		o.requestID = authority.NewID()
	}
	return nil
}

// Validate checks the options before anything is acquired: names, durations,
// the --file and CMD's executable. Errors are usage errors (exit 2).
func (o *runOptions) Validate() error {
	if len(o.sets) > 0 {
		return o.validateGroup()
	}
	if o.resource == "" {
		return exitcode.Usagef(`required flag(s) "resource" not set (or give --set RESOURCE=PATH for a group)`)
	}
	if err := layout.ValidateResource(o.resource, false); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if err := o.checkTerms(); err != nil {
		return err
	}
	if o.file != "" {
		if err := checkOutput(o.file); err != nil {
			return err
		}
	}
	if o.outputDir != "" {
		if o.file != "" || o.contentType != "" {
			return exitcode.Usagef("--output-dir publishes a directory: not with --file or --content-type")
		}
		if err := checkOutputDir(o.outputDir); err != nil {
			return err
		}
	}
	return o.checkCommand()
}

// checkTerms checks what a single run and a group run share: the owner and
// the durations. Errors: usage.
func (o *runOptions) checkTerms() error {
	if err := layout.ValidateOwner(o.owner); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	switch {
	case o.maxWait < 0 || o.grace < 0:
		return exitcode.Usagef("--max-wait and --grace must not be negative (got %s, %s)", o.maxWait, o.grace)
	case o.timeout <= 0:
		return exitcode.Usagef("--publish-timeout %s: want a positive duration", o.timeout)
	}
	return nil
}

// checkCommand checks, last, that CMD's executable is found and that the
// idempotency key is valid. Errors: usage.
func (o *runOptions) checkCommand() error {
	if _, err := exec.LookPath(o.args[0]); err != nil {
		return exitcode.Usagef("CMD %q: %v (nothing acquired)", o.args[0], err)
	}
	if err := layout.ValidateKey("key", o.key); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	return nil
}

// Run acquires, runs CMD, publishes its result and releases (runner.run),
// then prints the JSON report with -o json. start is when the command
// began, for the report's duration.
func (o *runOptions) Run(c *cobra.Command, start time.Time) error {
	if len(o.sets) > 0 {
		return o.runGroup(c, start)
	}
	stderr := shareWriter(c.ErrOrStderr())
	r := &runner{c: c, stderr: stderr, log: cli.LoggerTo(c, stderr), args: o.args, output: o.file, outputDir: o.outputDir, allowEmpty: o.allowEmpty, grace: o.grace, res: runOutput{Resource: o.resource, Owner: o.owner, Key: o.key, CommandExit: -1, Outcome: "not_published"}}
	err := r.run(o)
	r.res.Duration = time.Since(start).Seconds()
	r.res.ExitCode = cli.ExitCode(err, c.Context().Err() != nil)
	if err != nil {
		r.res.Error = cli.Message(err)
	}
	if o.format == "json" {
		if perr := printJSON(c.OutOrStdout(), r.res); perr != nil && err == nil {
			err = perr
		}
	}
	return err
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
	return "run-" + hexDigest(append([]string{resource, id}, argv...)...)
}

// hexDigest is the first 16 hex digits of sha256 over parts, each
// length-prefixed so that no two lists collide.
func hexDigest(parts ...string) string {
	h := sha256.New()
	for _, s := range parts {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

type runner struct {
	c *cobra.Command
	// stderr carries fencepub's messages and CMD's stderr (and, with
	// --file, its stdout): shareWriter of the command's stderr.
	stderr io.Writer
	// log is the command's logger on stderr.
	log    *slog.Logger
	args   []string
	output string
	// outputDir is --output-dir (rundir.go).
	outputDir string
	// saved is where an existing --file waits while CMD runs
	// (settleOutput); "" when there was none.
	saved string
	grace time.Duration
	// allowEmpty publishes a 0-byte result (--allow-empty).
	allowEmpty bool
	// requestTimeout is etcd.request_timeout: the release's time after a
	// CMD that did not succeed. reserve is the part of --publish-timeout
	// kept for the release (releaseReserve); releaseBy, set once CMD
	// succeeded (afterCommand), is the release's deadline.
	requestTimeout, reserve time.Duration
	releaseBy               time.Time
	res                     runOutput
}

// childOutput returns the writer of CMD's stderr (and, with --file, its
// stdout): stderr itself, or in JSON log mode a lineLogger, so that
// fencepub's stderr stays JSON lines (docs/cli.md "Logs"). The caller flushes
// a lineLogger once CMD's output is closed.
func (r *runner) childOutput() io.Writer {
	if cli.LogsJSON(r.c) {
		return &lineLogger{log: r.log}
	}
	return r.stderr
}

// lineLogger logs each line written to it as an info record "command
// output" with the line in attribute "line". Writes come from one
// goroutine at a time (os/exec's copy of CMD's output).
type lineLogger struct {
	log     *slog.Logger
	partial []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.log.Info("command output", "line", string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
}

// flush logs an unterminated last line.
func (l *lineLogger) flush() {
	if len(l.partial) > 0 {
		l.log.Info("command output", "line", string(l.partial))
		l.partial = nil
	}
}

// shareWriter returns w for use by fencepub and CMD at once. A file (the
// terminal, a log) is handed to CMD as its descriptor and written by
// fencepub directly; any other writer (fencepub embedded in a program or a
// test) is written by a goroutine os/exec starts for CMD's output while
// fencepub writes its own messages, so its writes are serialized.
func shareWriter(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// lockedWriter serializes the writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// connect opens the command's environment with r's logger and an
// authority on it, and checks the store (checkStore). The caller closes
// env. Errors: OpenEnv's, a bad authority config (exit 2), checkStore's.
func (r *runner) connect() (*cli.Env, *authority.Authority, error) {
	env, err := cli.OpenEnv(r.c)
	if err != nil {
		return nil, nil, err
	}
	env.Log = r.log
	a, err := authority.New(env.AuthorityConfig())
	if err == nil {
		err = checkStore(r.c.Context(), env, a)
	} else {
		err = exitcode.With(exitcode.Usage, err)
	}
	if err != nil {
		env.Close()
		return nil, nil, err
	}
	return env, a, nil
}

func (r *runner) run(o *runOptions) error {
	resource, owner, key := o.resource, o.owner, o.key
	env, a, err := r.connect()
	if err != nil {
		return err
	}
	defer env.Close()
	ctx := r.c.Context()
	r.log.Info("run: acquiring the lease", "resource", resource, "owner", owner, "ttl", o.ttl, "max_wait", o.maxWait, "request_id", o.requestID)
	// MaxWait bounds only the wait for another holder: a grant in progress
	// when it passes is finished, never cut in half.
	g, err := a.Acquire(ctx, authority.AcquireRequest{Resource: resource, Owner: owner, RequestID: o.requestID, TTL: o.ttl, Wait: o.maxWait > 0, MaxWait: o.maxWait})
	if err != nil {
		return authorityExit(retryHint(err, owner, o.requestID))
	}
	r.res.Epoch, r.res.Fence = g.Epoch, g.Generation
	r.log.Info("run: granted", "resource", resource, "epoch", g.Epoch, "fence", g.Generation)
	// Renewed until closed, not until Ctrl-C: an interrupted command is
	// stopped (wait) before the lease is released.
	sess, err := a.NewSession(context.WithoutCancel(ctx), g)
	if err != nil {
		return authorityExit(err)
	}
	// The release's deadline: the publish's (--publish-timeout from CMD's
	// end, afterCommand) once CMD succeeded, else etcd.request_timeout
	// from now.
	r.requestTimeout, r.reserve = env.Config.Etcd.RequestTimeout, releaseReserve(env.Config, o.timeout)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.requestTimeout)
		if !r.releaseBy.IsZero() {
			cancel()
			rctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), r.releaseBy)
		}
		defer cancel()
		releaseGrant(rctx, env.Log, sess)
	}()

	published := false
	defer func() { r.settleOutput(published) }()
	// Bound before CMD starts: its stdout streams into the store while it
	// runs. Re-sends of the transaction go on until --publish-timeout.
	cfg := env.PublisherConfig()
	cfg.ResendTimeout = o.timeout
	client, err := publisher.New(cfg)
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	bctx, bcancel := context.WithTimeout(ctx, o.timeout)
	p, err := client.Bind(bctx, publisher.GrantTerm(g, false))
	bcancel()
	if err != nil {
		return publishExit(publisher.Result{}, err)
	}
	op := publisher.Operation{IdempotencyKey: key, ContentType: o.contentType}
	var res publisher.Result
	switch {
	case r.outputDir != "":
		res, err = r.publishOutputDir(sess, g, p, op, o.timeout)
	case r.output == "":
		res, err = r.publishStdout(sess, g, p, op, o.timeout)
	default:
		res, err = r.publishOutput(sess, g, p, op, o.timeout)
	}
	if res.Outcome != "" { // else not_published: the publish never reached etcd
		r.res.Outcome, r.res.Reason, r.res.Version, r.res.Object, r.res.Digest = string(res.Outcome), string(res.Reason), res.Version, res.Object, res.Digest
	}
	published = res.Outcome == publisher.Applied || res.Outcome == publisher.Duplicate
	attrs := []any{"resource", resource, "version", res.Version.String(), "key", key, "outcome", res.Outcome}
	switch res.Outcome {
	case publisher.Applied:
		r.log.Info("run: applied", attrs...)
	case publisher.Duplicate:
		r.log.Info("run: duplicate: this run was already published; the pointer did not move", attrs...)
	case publisher.Unknown:
		r.log.Info("run: unknown: settle it with the command in resolve (or pass this command's -o json output to: fencepub resolve --from -)",
			append(attrs, "resolve", resolveHint(res, key))...)
	case "":
	case publisher.Conflict:
		r.log.Info("run: conflict: the key was already published with a different result; nothing published (is the job's output deterministic?)", attrs...)
	default:
		r.log.Info("run: nothing published", append(attrs, "reason", res.Reason)...)
	}
	return publishExit(res, err)
}

// publishOutput runs CMD to its end and then publishes the regular file it
// wrote at --file, within timeout.
func (r *runner) publishOutput(sess *authority.Session, g authority.Grant, p *publisher.Publisher, op publisher.Operation, timeout time.Duration) (publisher.Result, error) {
	cmd, childOut, err := r.start(g, nil)
	if err != nil {
		return publisher.Result{}, err
	}
	if err := r.wait(sess, g, cmd, childOut); err != nil {
		return publisher.Result{}, err
	}
	// One handle, checked and published: the file cannot be swapped
	// between the check and the upload. (Stat first: opening a FIFO would
	// block.)
	if fi, err := os.Lstat(r.output); err == nil && !fi.Mode().IsRegular() {
		return publisher.Result{}, exitcode.Usagef("the command's result at --file %s is %s, not a regular file; nothing published", r.output, fileKind(fi.Mode()))
	}
	body, err := os.Open(r.output)
	if err != nil {
		return publisher.Result{}, exitcode.With(exitcode.Usage, fmt.Errorf("the command succeeded but wrote no result at --file %s: %w; nothing published", r.output, err))
	}
	defer body.Close()
	fi, err := body.Stat()
	switch {
	case err != nil:
		return publisher.Result{}, exitcode.With(exitcode.Usage, fmt.Errorf("result %s: %w", r.output, err))
	case !fi.Mode().IsRegular():
		return publisher.Result{}, exitcode.Usagef("the command's result at --file %s is %s, not a regular file; nothing published", r.output, fileKind(fi.Mode()))
	case fi.Size() == 0 && !r.allowEmpty:
		return publisher.Result{}, errEmptyResult(r.output)
	}
	if err := leaseHeld(sess); err != nil {
		return publisher.Result{}, err
	}
	pctx, pcancel := context.WithDeadline(r.c.Context(), r.afterCommand(timeout))
	defer pcancel()
	r.log.Info("run: publishing the result", "resource", g.Resource, "fence", g.Generation, "key", op.IdempotencyKey)
	op.Body = body
	return p.Publish(pctx, op)
}

// afterCommand starts the bound on everything after a CMD that exited 0:
// --publish-timeout (timeout) from now, which the release keeps
// (releaseBy). It returns the publish's deadline, r.reserve earlier, so
// that a publish running into the bound still leaves the release its time
// (as workContext does for publish).
func (r *runner) afterCommand(timeout time.Duration) time.Time {
	r.releaseBy = time.Now().Add(timeout)
	return r.releaseBy.Add(-r.reserve)
}

// errEmptyResult refuses an empty result (exit 2) unless --allow-empty.
func errEmptyResult(output string) error {
	return exitcode.Usagef("the command succeeded but its result (%s) is empty; nothing published (pass --allow-empty to publish an empty result)", resultName(output))
}

// leaseHeld returns the lease-lost error (exit 114) once sess has lost the
// lease, else nil: checked after CMD's end, right before the result is
// published.
func leaseHeld(sess *authority.Session) error {
	select {
	case <-sess.Lost():
		return exitcode.With(exitcode.LeaseLost, fmt.Errorf("lease lost after the command finished; not publishing: %w", sess.Err()))
	default:
		return nil
	}
}

// leftoverWait is how long run waits, once CMD has exited, for the
// processes CMD left behind to close the stdin and stderr pipes fencepub
// copies (a writer that is not a file, such as the JSON log of CMD's
// lines); then fencepub closes them and kills CMD's process group (wait).
const leftoverWait = 2 * time.Second

// start starts CMD with the grant in its environment, its stdout on stdout
// (nil: the writer of CMD's stderr, as with --file, since fencepub's
// stdout is its own), and returns it with the writer of its stderr.
func (r *runner) start(g authority.Grant, stdout io.Writer) (*exec.Cmd, io.Writer, error) {
	return r.startEnv([]string{"FENCEPUB_RESOURCE=" + g.Resource, "FENCEPUB_EPOCH=" + strconv.FormatUint(g.Epoch, 10),
		"FENCEPUB_FENCE=" + strconv.FormatUint(g.Generation, 10), "FENCEPUB_OWNER=" + g.Owner}, stdout)
}

// startEnv is start with env (NAME=VALUE) added to CMD's environment.
func (r *runner) startEnv(env []string, stdout io.Writer) (*exec.Cmd, io.Writer, error) {
	cmd := exec.Command(r.args[0], r.args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = r.c.InOrStdin()
	childOut := r.childOutput()
	cmd.Stderr = childOut
	cmd.Stdout = stdout
	if stdout == nil {
		cmd.Stdout = childOut
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = leftoverWait
	if err := r.setAsideOutput(); err != nil {
		return nil, nil, err
	}
	r.log.Info("run: running the command", "command", shellescape.QuoteCommand(r.args))
	if err := cmd.Start(); err != nil {
		return nil, nil, exitcode.With(exitcode.Usage, fmt.Errorf("start %s: %w", r.args[0], err))
	}
	return cmd, childOut, nil
}

// wait waits for CMD, started by start, and returns nil when it exited 0.
// If the lease is lost meanwhile CMD gets SIGTERM (its process group), then
// SIGKILL after the grace period (exit 114); so it does on Ctrl-C. A
// failing command's exit status is passed through. CMD's leftover
// background processes (its process group) are killed once it ended.
func (r *runner) wait(sess *authority.Session, g authority.Grant, cmd *exec.Cmd, childOut io.Writer) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var waitErr error
	lost, interrupted := false, false
	// stop ends CMD: SIGTERM to its process group, SIGKILL after --grace.
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case waitErr = <-done:
		case <-time.After(r.grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitErr = <-done
		}
	}
	select {
	case waitErr = <-done:
	case <-sess.Lost():
		lost = true
		r.log.Info("run: lease lost while the command runs: SIGTERM, then SIGKILL after the grace period", "resource", g.Resource, "fence", g.Generation, "grace", r.grace, "err", sess.Err())
		stop()
	case <-r.c.Context().Done():
		// The lease is still renewed (the session's context is not the
		// command's) until CMD is gone, so no other holder's command
		// overlaps with it.
		interrupted = true
		r.log.Info("run: interrupted: SIGTERM to the command, then SIGKILL after the grace period", "grace", r.grace)
		stop()
	}
	// Leftover background processes must not write the result (or anything
	// else) after the command's end, outside the lease.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if ll, ok := childOut.(*lineLogger); ok {
		ll.flush() // CMD's Wait returned: its output is copied
	}
	switch {
	case interrupted:
		return exitcode.With(exitcode.Internal, fmt.Errorf("interrupted; nothing published: %w", r.c.Context().Err()))
	case lost:
		return exitcode.With(exitcode.LeaseLost, fmt.Errorf("lease on %q lost while the command ran; command terminated, nothing published: %w", g.Resource, sess.Err()))
	}
	code := 0
	var ee *exec.ExitError
	if errors.Is(waitErr, exec.ErrWaitDelay) { // CMD exited 0; what it left behind held its output
		waitErr = nil
	}
	if errors.As(waitErr, &ee) {
		code = ee.ExitCode()
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			code = 128 + int(st.Signal())
		}
	} else if waitErr != nil {
		return waitErr
	}
	r.res.CommandExit = code
	if code != 0 {
		return &exitcode.Error{Code: code, Err: fmt.Errorf("command %s exited with %d; nothing published", r.args[0], code)}
	}
	return nil
}

// resultName names where a run's result came from.
func resultName(output string) string {
	if output == "" {
		return "its stdout"
	}
	return "--file " + output
}

// savedSuffix names where an existing --file waits while CMD runs;
// failedSuffix where the output of a run that published nothing is kept
// when the previous file goes back.
const (
	savedSuffix  = ".fencepub-prev"
	failedSuffix = ".fencepub-failed"
)

// checkOutput refuses an --file that cannot receive this run's result:
// an existing path that is not a regular file (a directory, FIFO, device,
// or a symlink, whose target a rename would leave behind). Errors carry
// exit code 2. It runs before the lease and again, with the
// FILE.fencepub-prev check, in setAsideOutput.
func checkOutput(output string) error {
	fi, err := os.Lstat(output)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return exitcode.Usagef("--file %s is %s; give the regular file CMD writes its result to", output, fileKind(fi.Mode()))
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return exitcode.Usagef("--file %s: %v", output, err)
	}
	return nil
}

// fileKind names a non-regular file's kind for messages.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symlink"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// exists reports whether anything is at path (a dangling symlink counts).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// setAsideOutput moves an existing --file to FILE.fencepub-prev, after the
// grant and just before CMD starts, so that only what CMD writes in this
// run can be published (settleOutput ends it). A FILE.fencepub-prev already
// there was left by a fencepub killed mid-run (a live run of this resource
// would hold the lease): it stops the run rather than be overwritten.
func (r *runner) setAsideOutput() error {
	if r.output == "" {
		return nil
	}
	if err := checkOutput(r.output); err != nil { // it may have changed while we waited
		return err
	}
	saved := r.output + savedSuffix
	if exists(saved) {
		return exitcode.Usagef("--file %s: %s was left by an interrupted run (fencepub killed before it could put the file back); restore or remove it", r.output, saved)
	}
	if !exists(r.output) {
		return nil
	}
	if err := os.Rename(r.output, saved); err != nil {
		return exitcode.Usagef("--file %s: cannot set the existing file aside: %v", r.output, err)
	}
	r.saved = saved
	r.log.Info("run: --file existed: set aside while the command runs", "output", r.output, "saved", saved)
	return nil
}

// settleOutput ends setAsideOutput. Published: the previous file is
// removed (this run's result replaced it). Not published: the previous
// file is put back, so the next run finds things as they were; whatever the
// command left at FILE is kept as FILE.fencepub-failed (replacing an older
// one) for inspection.
func (r *runner) settleOutput(published bool) {
	if r.saved == "" {
		return
	}
	if published {
		_ = os.Remove(r.saved)
		return
	}
	if !exists(r.saved) {
		r.log.Info("run: nothing published; the previous --file, set aside, was removed during the run", "output", r.output, "saved", r.saved)
		return
	}
	failed := ""
	if fi, err := os.Lstat(r.output); err == nil && (!fi.Mode().IsRegular() || fi.Size() > 0) {
		failed = r.output + failedSuffix
		err := os.RemoveAll(failed)
		if err == nil {
			err = os.Rename(r.output, failed)
		}
		if err != nil {
			r.log.Info("run: could not put the previous --file back", "output", r.output, "saved", r.saved, "err", err)
			return
		}
	}
	if err := os.Rename(r.saved, r.output); err != nil {
		r.log.Info("run: could not put the previous --file back", "output", r.output, "saved", r.saved, "err", err)
		return
	}
	if failed != "" {
		r.log.Info("run: nothing published; the previous --file is back in place", "output", r.output, "command_output", failed)
	} else {
		r.log.Info("run: nothing published; the previous --file is back in place", "output", r.output)
	}
}

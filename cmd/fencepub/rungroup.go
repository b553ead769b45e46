package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
)

// runGroupOutput is `fencepub run --set ... -o json`'s document: the
// group's result (as publish --set prints it, so resolve --from settles an
// unknown one) with the run's owner, epoch, CMD's exit status and the
// exit code.
type runGroupOutput struct {
	publisher.GroupResult
	Owner       string  `json:"owner"`
	Epoch       uint64  `json:"epoch"`
	CommandExit int     `json:"command_exit"` // -1 when the command was not run to completion
	Duration    float64 `json:"duration_seconds"`
	Error       string  `json:"error,omitempty"`
	ExitCode    int     `json:"exit_code"`
}

// keyResource is what the default key names: --resource, or the --set
// resources (one per line, sorted: the flags' order does not matter).
func (o *runOptions) keyResource() string {
	if len(o.members) == 0 {
		return o.resource
	}
	return strings.Join(slices.Sorted(slices.Values(memberNames(o.members))), "\n")
}

// validateGroup checks run --set before anything is acquired: no
// single-resource flags, each member's path missing or an empty directory
// (only what CMD writes in this run may be published), CMD's executable.
// Errors: usage (exit 2).
func (o *runOptions) validateGroup() error {
	switch {
	case o.resource != "":
		return exitcode.Usagef("--resource is not used with --set: each --set names a resource and the path CMD writes it to")
	case o.file != "" || o.outputDir != "":
		return exitcode.Usagef("--file and --output-dir are not used with --set: each --set names a resource and the path CMD writes it to (a file or a directory)")
	}
	if err := o.checkTerms(); err != nil {
		return err
	}
	for _, m := range o.members {
		if err := checkRunMember(m); err != nil {
			return err
		}
	}
	return o.checkCommand()
}

// checkRunMember refuses a --set path that already holds something other
// than an empty directory: a file or files left by an earlier run would be
// published as this run's. Errors: usage.
func checkRunMember(m groupMember) error {
	fi, err := os.Lstat(m.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return exitcode.Usagef("--set %s: %v", m.resource, err)
	case fi.Mode().IsRegular():
		return exitcode.Usagef("--set %s=%s: the file exists: only what CMD writes in this run may be published; remove it (nothing acquired)", m.resource, m.path)
	case !fi.IsDir():
		return exitcode.Usagef("--set %s=%s: %s exists (%s): only what CMD writes in this run may be published; remove it (nothing acquired)", m.resource, m.path, m.path, fileKind(fi.Mode()))
	}
	ents, err := os.ReadDir(m.path)
	switch {
	case err != nil:
		return exitcode.Usagef("--set %s: %v", m.resource, err)
	case len(ents) > 0:
		return exitcode.Usagef("--set %s=%s: the directory is not empty: only what CMD writes in this run may be published; remove it or give a new directory (nothing acquired)", m.resource, m.path)
	}
	return nil
}

// wroteMember checks, once CMD exited 0, what it left at m's path: a
// regular file (not empty unless allowEmpty) or a directory a dataset can
// hold (scanDir; with files unless allowEmpty). It returns m
// with dir set. Errors: usage, ending in "nothing published".
func wroteMember(m groupMember, allowEmpty bool) (groupMember, error) {
	fi, err := os.Lstat(m.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return m, exitcode.Usagef("the command succeeded but wrote nothing at --set %s=%s; nothing published", m.resource, m.path)
	case err != nil:
		return m, exitcode.Usagef("--set %s: %v; nothing published", m.resource, err)
	case fi.Mode().IsRegular():
		if fi.Size() == 0 && !allowEmpty {
			return m, exitcode.Usagef("the command succeeded but its result at --set %s=%s is empty; nothing published (pass --allow-empty to publish an empty result)", m.resource, m.path)
		}
		return m, nil
	case !fi.IsDir():
		return m, exitcode.Usagef("the command's result at --set %s=%s is %s, not a regular file or a directory; nothing published", m.resource, m.path, fileKind(fi.Mode()))
	}
	m.dir = true
	files, _, err := scanDir(m.path, publisher.DirOptions{})
	switch {
	case err != nil:
		return m, exitcode.With(exitcode.Usage, fmt.Errorf("the command's result at --set %s=%s: %w; nothing published", m.resource, m.path, err))
	case files == 0 && !allowEmpty:
		return m, exitcode.Usagef("the command succeeded but left no files in --set %s=%s; nothing published (pass --allow-empty to publish an empty dataset)", m.resource, m.path)
	}
	return m, nil
}

// runGroup is Run for --set: it acquires the members as one group, runs
// CMD, publishes every member as one group once CMD exited 0 and releases
// the group, then prints the JSON report with -o json.
func (o *runOptions) runGroup(c *cobra.Command, start time.Time) error {
	stderr := shareWriter(c.ErrOrStderr())
	r := &runner{c: c, stderr: stderr, log: cli.LoggerTo(c, stderr), args: o.args, allowEmpty: o.allowEmpty, grace: o.grace, res: runOutput{CommandExit: -1}}
	out := runGroupOutput{GroupResult: publisher.GroupResult{Outcome: "not_published", IdempotencyKey: o.key}, Owner: o.owner, CommandExit: -1}
	err := r.runGroup(o, &out)
	out.Duration = time.Since(start).Seconds()
	out.ExitCode = cli.ExitCode(err, c.Context().Err() != nil)
	if err != nil {
		out.Error = cli.Message(err)
	}
	if o.format == "json" {
		if perr := printJSON(c.OutOrStdout(), out); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

func (r *runner) runGroup(o *runOptions, out *runGroupOutput) error {
	env, a, err := r.connect()
	if err != nil {
		return err
	}
	defer env.Close()
	ctx := r.c.Context()
	names := memberNames(o.members)
	r.log.Info("run: acquiring the group", "resources", names, "owner", o.owner, "ttl", o.ttl, "max_wait", o.maxWait, "request_id", o.requestID)
	grants, err := a.AcquireGroup(ctx, authority.GroupRequest{Resources: names, Owner: o.owner, RequestID: o.requestID, TTL: o.ttl,
		Wait: o.maxWait > 0, MaxWait: o.maxWait})
	if err != nil {
		return authorityExit(retryHint(err, o.owner, o.requestID))
	}
	out.Epoch = grants[0].Epoch
	r.log.Info("run: granted", "resources", names, "epoch", grants[0].Epoch)
	// One lease: renewing one member renews the group. Renewed until the
	// release, not until Ctrl-C: an interrupted command is stopped first.
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	sess, err := a.NewSession(sctx, grants[0])
	if err != nil {
		stop()
		releaseGroup(ctx, env, a, grants)
		return authorityExit(err)
	}
	r.requestTimeout, r.reserve = env.Config.Etcd.RequestTimeout, releaseReserve(env.Config, o.timeout)
	defer func() {
		stop()
		<-sess.Done()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.requestTimeout)
		if !r.releaseBy.IsZero() {
			cancel()
			rctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), r.releaseBy)
		}
		defer cancel()
		releaseGroup(rctx, env, a, grants)
	}()
	cfg := env.PublisherConfig()
	cfg.ResendTimeout = o.timeout
	client, err := publisher.New(cfg)
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	sorted := make([]string, len(grants)) // the grants are in name order
	for i, g := range grants {
		sorted[i] = g.Resource
	}
	cmd, childOut, err := r.startEnv([]string{"FENCEPUB_RESOURCES=" + strings.Join(sorted, " "),
		"FENCEPUB_EPOCH=" + strconv.FormatUint(grants[0].Epoch, 10), "FENCEPUB_OWNER=" + o.owner}, nil)
	if err != nil {
		return err
	}
	werr := r.wait(sess, authority.Grant{Resource: strings.Join(sorted, ","), Generation: grants[0].Generation}, cmd, childOut)
	out.CommandExit = r.res.CommandExit
	if werr != nil {
		return werr
	}
	sets := make([]groupMember, len(o.members))
	for i, m := range o.members {
		if sets[i], err = wroteMember(m, o.allowEmpty); err != nil {
			return err
		}
	}
	if err := leaseHeld(sess); err != nil {
		return err
	}
	pctx, pcancel := context.WithDeadline(ctx, r.afterCommand(o.timeout))
	defer pcancel()
	op := publisher.Operation{IdempotencyKey: o.key, ContentType: o.contentType}
	members, closeAll, err := bindMembers(pctx, client, grants, sets, groupBody{op: op, base: string(publisher.BaseCurrent), parallel: publisher.DefaultParallel})
	if err != nil {
		return err
	}
	defer closeAll()
	r.log.Info("run: publishing the group", "resources", names, "key", o.key)
	res, err := client.PublishGroup(pctx, o.key, members)
	if res.Outcome != "" {
		out.GroupResult = res
	}
	attrs := []any{"resources", names, "key", o.key, "outcome", res.Outcome}
	switch res.Outcome {
	case publisher.Applied:
		r.log.Info("run: applied", attrs...)
	case publisher.Duplicate:
		r.log.Info("run: duplicate: this run was already published; the pointers did not move", attrs...)
	case publisher.Unknown:
		r.log.Info("run: unknown: pass this command's -o json output to: fencepub resolve --from -", attrs...)
	case "":
	case publisher.Conflict:
		r.log.Info("run: conflict: the key was already published with a different result; nothing published (is the job's output deterministic?)", attrs...)
	default:
		r.log.Info("run: nothing published", append(attrs, "reason", res.Reason, "member", res.Member)...)
	}
	return publishExit(publisher.Result{Outcome: res.Outcome, Reason: res.Reason}, err)
}

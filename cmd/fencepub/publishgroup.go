package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
)

// groupMember is one --set NAME=PATH of a group publish: a file (one
// object) or a directory (a dataset).
type groupMember struct {
	resource, path string
	dir            bool
}

// parseSets parses --set values (parseSetSpecs) and refuses a path that
// is neither a regular file nor a directory. Errors: usage.
func parseSets(sets []string) ([]groupMember, error) {
	ms, err := parseSetSpecs(sets)
	if err != nil {
		return nil, err
	}
	for i, m := range ms {
		fi, err := os.Stat(m.path)
		switch {
		case err != nil:
			return nil, exitcode.Usagef("--set %s: %v", m.resource, err)
		case !fi.IsDir() && !fi.Mode().IsRegular():
			return nil, exitcode.Usagef("--set %s: %s is neither a regular file nor a directory", m.resource, m.path)
		}
		ms[i].dir = fi.IsDir()
	}
	return ms, nil
}

// parseSetSpecs parses --set RESOURCE=PATH values, refusing a bad or
// repeated name and an empty path; it does not look at the paths. Errors:
// usage.
func parseSetSpecs(sets []string) ([]groupMember, error) {
	var ms []groupMember
	for _, s := range sets {
		name, path, ok := strings.Cut(s, "=")
		if !ok || path == "" {
			return nil, exitcode.Usagef("--set %q: want RESOURCE=PATH (a file or a directory)", s)
		}
		if err := layout.ValidateResource(name, false); err != nil {
			return nil, exitcode.With(exitcode.Usage, fmt.Errorf("--set %q: %w", s, err))
		}
		if slices.ContainsFunc(ms, func(m groupMember) bool { return m.resource == name }) {
			return nil, exitcode.Usagef("--set: resource %q is given twice", name)
		}
		ms = append(ms, groupMember{resource: name, path: path})
	}
	return ms, nil
}

// memberNames are the resources of sets, in the order given.
func memberNames(sets []groupMember) []string {
	names := make([]string, len(sets))
	for i, m := range sets {
		names[i] = m.resource
	}
	return names
}

// validateGroup checks the flags of a group publish (--set) before any
// I/O: a grant acquired for the group (--ttl), no single-resource flags.
func (o *publishOptions) validateGroup() error {
	fl := o.cmd.Flags()
	for _, name := range []string{"resource", "file", "dir", "seq", "epoch", "fence", "wait", "follow-symlinks"} {
		if fl.Changed(name) {
			return exitcode.Usagef("--%s is not used with --set: each --set names a resource and its file or directory", name)
		}
	}
	switch {
	case o.body.file != "":
		return exitcode.Usagef("'-' is not used with --set: each member is a file or a directory")
	case !fl.Changed("ttl"):
		return exitcode.Usagef("--set needs --ttl: the members are acquired as one group for this publish")
	case o.dir.parallel < 1:
		return exitcode.Usagef("--parallel %d: want at least 1", o.dir.parallel)
	case o.dir.base != string(publisher.BaseCurrent) && o.dir.base != string(publisher.BaseNone):
		return exitcode.Usagef("--base %q: want current or none", o.dir.base)
	case fl.Changed("request-id") && o.grant.requestID == "":
		return exitcode.Usagef("--request-id is empty")
	case o.grant.maxWait < 0:
		return exitcode.Usagef("--max-wait %s: want 0 (fail at once when held) or more", o.grant.maxWait)
	}
	if err := layout.ValidateKey("idempotency key", o.key); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	return positive("timeout", o.timeout)
}

// runGroup publishes the --set members as one group (DESIGN.md "Groups"):
// it checks every member's body first (an empty file or directory is
// refused unless --allow-empty), acquires the members as one group, binds
// each and calls PublishGroup, all within --timeout as publish of a file
// is; the group is released (every member's term sealed) after it.
func (o *publishOptions) runGroup(c *cobra.Command) error {
	sets, err := parseSets(o.sets)
	if err != nil {
		return err
	}
	op, err := o.body.operation(o.key)
	if err != nil {
		return err
	}
	for _, m := range sets {
		if err := checkMember(m, o.allowEmpty); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
	defer cancel()
	lc, err := cli.LoadConfig(c)
	if err != nil {
		return err
	}
	work, wcancel := workContext(ctx, lc.Config, o.timeout, true)
	defer wcancel()
	env, err := cli.ConnectContext(work, c, lc)
	if err != nil {
		return err
	}
	defer env.Close()
	client, err := publisher.New(env.PublisherConfig())
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	a, err := authority.New(env.AuthorityConfig())
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if err := checkStore(work, env, a); err != nil {
		return err
	}
	names := memberNames(sets)
	reqID := cmp.Or(o.grant.requestID, authority.NewID())
	grants, err := a.AcquireGroup(work, authority.GroupRequest{Resources: names, Owner: o.grant.owner, RequestID: reqID, TTL: o.grant.ttl,
		Wait: o.grant.maxWait > 0, MaxWait: o.grant.maxWait})
	if err != nil {
		return authorityExit(retryHint(err, o.grant.owner, reqID))
	}
	defer releaseGroup(ctx, env, a, grants)
	sctx, stop := context.WithCancel(work)
	sess, err := a.NewSession(sctx, grants[0]) // one lease: renewing one member renews the group
	if err != nil {
		stop()
		return authorityExit(err)
	}
	defer func() { stop(); <-sess.Done() }()
	members, closeAll, err := bindMembers(work, client, grants, sets, groupBody{op: op, base: o.dir.base, parallel: o.dir.parallel, strict: o.grant.strict, contiguous: o.grant.contiguous})
	if err != nil {
		return err
	}
	defer closeAll()
	res, err := client.PublishGroup(work, o.key, members)
	return reportGroup(c, *o.format, res, err)
}

// groupBody is how the members of a group publish are published: op's
// content type and metadata for a file, base and parallel for a directory,
// and the grants' mode.
type groupBody struct {
	op                 publisher.Operation
	base               string
	parallel           int
	strict, contiguous bool
}

// bindMembers binds each grant (publisher.Client.Bind) and pairs it with
// its --set member's body: a file opened as an Operation, a directory as a
// Dataset. The caller calls closeAll once PublishGroup returned. Errors:
// Bind's, as publishExit maps them; usage for a file it cannot open.
func bindMembers(ctx context.Context, client *publisher.Client, grants []authority.Grant, sets []groupMember, b groupBody) (members []publisher.GroupMember, closeAll func(), err error) {
	var files []*os.File
	closeAll = func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	members = make([]publisher.GroupMember, len(grants))
	for i, g := range grants {
		term := publisher.GrantTerm(g, b.strict)
		if b.contiguous {
			term = term.WithContiguous()
		}
		p, err := client.Bind(ctx, term)
		if err != nil {
			return nil, nil, publishExit(publisher.Result{}, err)
		}
		members[i] = publisher.GroupMember{Publisher: p}
		m := sets[slices.IndexFunc(sets, func(m groupMember) bool { return m.resource == g.Resource })]
		if m.dir {
			ds := publisher.Dataset{Files: publisher.DirFiles(m.path, publisher.DirOptions{}), Base: publisher.Base(b.base), Parallel: b.parallel}
			members[i].Dataset = &ds
			continue
		}
		fh, err := os.Open(m.path)
		if err != nil {
			return nil, nil, exitcode.Usagef("--set %s: %v", m.resource, err)
		}
		files = append(files, fh)
		mop := b.op
		mop.Body = fh
		members[i].Operation = &mop
	}
	return members, closeAll, nil
}

// checkMember refuses, before anything is acquired, a member whose body
// cannot be published: an empty file or a directory without files (unless
// allowEmpty), or a directory holding what a dataset cannot (scanDir).
// Errors: usage.
func checkMember(m groupMember, allowEmpty bool) error {
	if !m.dir {
		fh, err := openBodyNow(nil, m.path, allowEmpty)
		if err != nil {
			return exitcode.Usagef("--set %s: %v", m.resource, err)
		}
		return fh.Close()
	}
	files, _, err := scanDir(m.path, publisher.DirOptions{})
	switch {
	case err != nil:
		return exitcode.With(exitcode.Usage, fmt.Errorf("--set %s: %s: %w; nothing published", m.resource, m.path, err))
	case files == 0 && !allowEmpty:
		return exitcode.Usagef("--set %s: %s holds no files; nothing published (pass --allow-empty to publish an empty dataset)", m.resource, m.path)
	}
	return nil
}

// releaseGroup releases grants (authority.ReleaseGroup) within ctx's
// deadline, also when ctx was cancelled, as releaseGrant releases one
// grant.
func releaseGroup(ctx context.Context, env *cli.Env, a *authority.Authority, grants []authority.Grant) {
	rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		rctx, cancel = context.WithDeadline(rctx, dl)
	}
	defer cancel()
	if err := a.ReleaseGroup(rctx, grants); err != nil && !errors.Is(err, authority.ErrLeaseLost) {
		env.Log.Warn("group release failed; the lease expires by itself", "resources", len(grants), "err", err)
	}
}

// groupOutput is the JSON of a group publish: the GroupResult, with
// "error" and "exit_code" when it is not applied or duplicate.
type groupOutput struct {
	publisher.GroupResult
	Error    string `json:"error,omitempty"`
	ExitCode int    `json:"exit_code"`
}

// reportGroup prints a group publish's result (JSON, or one text line per
// member after the group's) when it reached an outcome and returns err
// with its exit code, as reportResult does for one resource.
func reportGroup(cmd *cobra.Command, format string, res publisher.GroupResult, err error) error {
	err = publishExit(publisher.Result{Outcome: res.Outcome, Reason: res.Reason}, err)
	if res.Outcome == "" {
		return err
	}
	if format == "json" {
		o := groupOutput{GroupResult: res, ExitCode: cli.ExitCode(err, cmd.Context().Err() != nil)}
		if err != nil {
			o.Error = cli.Message(err)
		}
		return cmp.Or(printJSON(cmd.OutOrStdout(), o), err)
	}
	w := cmd.OutOrStdout()
	line := fmt.Sprintf("%s group %s", res.Outcome, res.IdempotencyKey)
	if res.Reason != "" {
		line += fmt.Sprintf(" (%s of %s; nothing moved)", res.Reason, res.Member)
	}
	fmt.Fprintln(w, line)
	for _, m := range res.Members {
		printMember(w, m)
	}
	if res.Outcome == publisher.Unknown {
		cli.Logger(cmd).Warn("group publish unknown: pass this command's -o json output to: fencepub resolve --from -", "key", res.IdempotencyKey)
	}
	return err
}

// printMember prints one member of a group result: resource, version and
// object, as publish prints one result.
func printMember(w io.Writer, m publisher.Result) {
	v, obj := m.Version, m.Object
	if m.Attempt != nil && v.IsZero() {
		v, obj = m.Attempt.Version, m.Attempt.Object
	}
	fmt.Fprintf(w, "  %s %s %s/%s sha256=%s\n", m.Resource, v, obj.Bucket, obj.Key, obj.SHA256)
}

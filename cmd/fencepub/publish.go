package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/pubhook"
	"github.com/fencepub/fencepub/publisher"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// publishExitHelp is the exit-code table of publish, rollback and resolve.
const publishExitHelp = `Exit codes: 0 applied or duplicate (the JSON "outcome" and stderr tell which),
1 internal error, 2 usage or bad input (names, numbers, body read error, missing
bucket or domain), 110 stale (reason pointer, seal, epoch, grant, gap or base), 111 conflict
(the key was applied with another body; for resolve, by another attempt), 112 unknown (settle it with
'fencepub resolve'), 113 lease held (with --ttl), 114 lease lost (strict mode,
reason lease), 115 etcd or the object store unavailable.`

// usageErrors makes missing required flags exit with the usage code,
// which cobra otherwise returns as a plain error (exit 1). (Flag parse
// errors are usage errors in every command: cli.Prepare.)
func usageErrors(cmd *cobra.Command) {
	cmd.PreRunE = func(c *cobra.Command, _ []string) error {
		if err := c.ValidateRequiredFlags(); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		return nil
	}
}

// noArgs rejects positional arguments with the usage code.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return exitcode.Usagef("unexpected arguments %q", args)
	}
	return nil
}

// grantFlags name the grant a publish or rollback runs under: an existing
// grant (--epoch, --fence, --owner) or one acquired for this command
// (--owner, --ttl), released when it ends.
type grantFlags struct {
	resource, owner, requestID string
	epoch, fence               uint64
	ttl, maxWait               time.Duration
	wait, strict, contiguous   bool // wait: the deprecated boolean --wait
}

func (g *grantFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&g.resource, "resource", "", "resource name (required)")
	f.StringVar(&g.owner, "owner", "", "the grant's owner (required)")
	f.Uint64Var(&g.epoch, "epoch", 0, "epoch of an existing grant (with --fence)")
	f.Uint64Var(&g.fence, "fence", 0, "fence (generation) of an existing grant (with --epoch)")
	f.DurationVar(&g.ttl, "ttl", 0, "acquire a grant with this lease TTL (whole seconds, >= 2s) for this command, renew it meanwhile and release it after")
	f.StringVar(&g.requestID, "request-id", "", "acquire request id (with --ttl; default random); a retry with the same id gets the same grant")
	f.DurationVar(&g.maxWait, "max-wait", 0, "with --ttl: wait up to this long while another owner holds the lease (within --timeout) instead of failing at once with 113")
	f.BoolVar(&g.wait, "wait", false, "with --ttl: wait while another owner holds the lease, until --timeout")
	cli.Deprecate(f, "wait", "use --max-wait DURATION, as run and authority acquire do")
	f.BoolVar(&g.strict, "strict", false, "also require that the grant's lease is still live when the transaction runs (etcd's expiry timing, not wall-clock revocation)")
	f.BoolVar(&g.contiguous, "contiguous", false, "require seq S-1 of the same grant to be the pointer (stale with reason gap otherwise)")
	_ = cmd.MarkFlagRequired("resource")
	_ = cmd.MarkFlagRequired("owner")
}

// existing reports whether the flags name an existing grant; it checks that
// exactly one of the two forms is used.
func (g *grantFlags) existing(cmd *cobra.Command) (bool, error) {
	fl := cmd.Flags()
	raw := fl.Changed("epoch") || fl.Changed("fence")
	switch {
	case raw && fl.Changed("ttl"):
		return false, exitcode.Usagef("give --epoch/--fence (an existing grant) or --ttl (acquire one), not both")
	case !raw && !fl.Changed("ttl"):
		return false, exitcode.Usagef("name a grant with --epoch and --fence, or acquire one with --ttl")
	case raw && !(fl.Changed("epoch") && fl.Changed("fence")):
		return false, exitcode.Usagef("--epoch and --fence go together")
	case raw && (fl.Changed("request-id") || fl.Changed("wait") || fl.Changed("max-wait")):
		return false, exitcode.Usagef("--request-id and --max-wait need --ttl")
	case g.maxWait < 0:
		return false, exitcode.Usagef("--max-wait %s: want 0 (fail at once when held) or more", g.maxWait)
	case fl.Changed("wait") && fl.Changed("max-wait"):
		return false, exitcode.Usagef("give --max-wait, not also the deprecated --wait")
	case fl.Changed("request-id") && g.requestID == "":
		// An unset shell variable must not silently become a random id:
		// the retry would then mint a second grant.
		return false, exitcode.Usagef("--request-id is empty")
	}
	return raw, nil
}

// bind returns a Publisher for the flags' grant and a function that ends an
// acquired grant (stops renewing, releases within release's deadline:
// releaseGrant). Its requests run within ctx. First it checks that the
// bucket exists and belongs to the domain (checkStore). An existing grant
// in strict mode must be the resource's live holder; otherwise bind returns
// a stale/lease Result (nothing written) with an error.
func (g *grantFlags) bind(ctx, release context.Context, cmd *cobra.Command, env *cli.Env, c *publisher.Client) (*publisher.Publisher, func(), publisher.Result, error) {
	noop := func() {}
	raw, err := g.existing(cmd)
	if err != nil {
		return nil, noop, publisher.Result{}, err
	}
	a, err := authority.New(env.AuthorityConfig())
	if err != nil {
		return nil, noop, publisher.Result{}, exitcode.With(exitcode.Usage, err)
	}
	if err := checkStore(ctx, env, a); err != nil {
		return nil, noop, publisher.Result{}, err
	}
	if raw {
		// A grant acquired elsewhere, known by its numbers.
		term := publisher.GrantTerm(authority.Grant{Resource: g.resource, Owner: g.owner, Epoch: g.epoch, Generation: g.fence}, false)
		if g.strict {
			hd, ok, err := a.Holder(ctx, g.resource)
			if err != nil {
				return nil, noop, publisher.Result{}, authorityExit(err)
			}
			if !ok || hd.Owner != g.owner || hd.Generation != g.fence || hd.Epoch != g.epoch {
				res := publisher.Result{Outcome: publisher.Stale, Reason: publisher.ReasonLease, Resource: g.resource,
					Version: layout.Version{Epoch: g.epoch, Fence: g.fence}}
				return nil, noop, res, fmt.Errorf("%w (%s): %w: grant %d.%d of %q for %q is not the live holder; nothing was written",
					publisher.ErrStale, publisher.ReasonLease, authority.ErrLeaseLost, g.epoch, g.fence, g.resource, g.owner)
			}
			term = publisher.GrantTerm(hd.Grant, true)
		}
		if g.contiguous {
			term = term.WithContiguous()
		}
		p, err := c.Bind(ctx, term)
		return p, noop, publisher.Result{}, err
	}
	reqID := cmp.Or(g.requestID, authority.NewID())
	gr, err := a.Acquire(ctx, authority.AcquireRequest{Resource: g.resource, Owner: g.owner, RequestID: reqID, TTL: g.ttl,
		Wait: g.wait || g.maxWait > 0, MaxWait: g.maxWait})
	if err != nil {
		return nil, noop, publisher.Result{}, authorityExit(retryHint(err, g.owner, reqID))
	}
	sess, err := a.NewSession(ctx, gr)
	if err != nil {
		return nil, noop, publisher.Result{}, authorityExit(err)
	}
	done := func() { releaseGrant(release, env.Log, sess) }
	term := publisher.GrantTerm(gr, g.strict)
	if g.contiguous {
		term = term.WithContiguous()
	}
	p, err := c.Bind(ctx, term)
	if err != nil {
		done()
		return nil, noop, publisher.Result{}, err
	}
	return p, done, publisher.Result{}, nil
}

// bodyFlags are what a request digest covers besides the key: the body
// (--file), --content-type and --meta. publish sends them; resolve
// recomputes an attempt's digest from them.
type bodyFlags struct {
	file, contentType string
	meta              []string
}

func (b *bodyFlags) add(cmd *cobra.Command, fileUsage string) {
	f := cmd.Flags()
	f.StringVar(&b.file, "file", "", fileUsage)
	f.StringVar(&b.contentType, "content-type", "", "content type (default application/octet-stream); part of the request digest")
	f.StringArrayVar(&b.meta, "meta", nil, "user metadata key=value (repeatable); part of the request digest")
}

// operation returns the Operation of key without its body, validated as
// Publish validates it. Errors: usage.
func (b *bodyFlags) operation(key string) (publisher.Operation, error) {
	md, err := parseMeta(b.meta)
	if err != nil {
		return publisher.Operation{}, err
	}
	op := publisher.Operation{IdempotencyKey: key, ContentType: b.contentType, Metadata: md}
	if err := op.Validate(); err != nil {
		return publisher.Operation{}, exitcode.With(exitcode.Usage, err)
	}
	return op, nil
}

// digest reads the body (stdin: in) within ctx and returns the request
// digest of key's publish of it, as Publish computes it. Errors: usage (bad
// flags, unreadable body), ctx's.
func (b *bodyFlags) digest(ctx context.Context, in io.Reader, key string) (string, error) {
	op, err := b.operation(key)
	if err != nil {
		return "", err
	}
	body, err := openBody(ctx, in, b.file, true)
	if err != nil {
		return "", err
	}
	defer body.Close()
	op.Body = body
	d, err := pubhook.RequestDigest(ctx, op)
	if err != nil {
		return "", exitcode.With(exitcode.Usage, fmt.Errorf("--file %s: %w", b.file, err))
	}
	return d, nil
}

// publishOptions are the flags of `fencepub publish` (addFlags); Complete
// takes the lone '-' argument and what only the command line tells (which
// flags were given), Validate checks them before any I/O, Run publishes.
type publishOptions struct {
	grant      grantFlags
	existing   bool // the grant is an existing one (set by Validate)
	seq        uint64
	key        string
	body       bodyFlags
	timeout    time.Duration
	allowEmpty bool
	dir        dirFlags // publishdir.go
	sets       []string // --set RESOURCE=PATH: a group publish (publishgroup.go)
	format     *string
	cmd        *cobra.Command // set by Complete: which flags were given
}

// newPublishCmd builds `fencepub publish`.
func newPublishCmd() *cobra.Command {
	o := &publishOptions{}
	cmd := &cobra.Command{
		Use:   "publish (--resource R (--epoch E --fence F --seq S | --ttl D) (--file PATH | - | --dir DIR) | --set R=PATH... --ttl D) --owner O --key K",
		Short: "Publish a file as the new state of a resource, fenced by a grant",
		Long: `publish streams the body to the object store as a new immutable object and makes
it the resource's state in one etcd transaction that checks the grant's fence,
epoch and owner, the pointer, the seal and the idempotency key.

With --epoch, --fence, --seq and --owner it publishes under an existing grant
(from 'fencepub authority acquire'). With --owner and --ttl it acquires a grant,
publishes with the next seq and releases the grant.

The body comes from --file PATH, or from stdin with --file - or a lone '-'.
An empty body is refused (exit 2, before any grant is acquired) unless
--allow-empty: a producer that silently wrote nothing must not replace the
last good state.
--key is the operation's idempotency key: a retry with the same key and the same
body, content type and metadata gets "duplicate" with the original result.
Newer state wins: a version at or below the pointer is stale.

--timeout bounds the whole command: waiting for the body, connecting (an
etcd that does not answer is asked again until then), acquiring, uploading,
the transaction and the clean-up after it. With --ttl the last part of it
(etcd.request_timeout, at most a quarter of --timeout) is kept for releasing
the grant, so the work before ends that much earlier. A multipart upload that
failed is aborted within the work's deadline (at most 10s). What the clean-up
cannot finish in time is left, and said so on stderr: the lease expires by
itself within --ttl, and GC aborts the upload. A transaction still unanswered
when the work's deadline passes is unknown (exit 112).

The bucket must exist and hold the domain's ownership marker: a bucket
without it, or with another deployment's, is refused (exit 2) before anything
is acquired or written, since GC would never see what is published there.

--dir DIR publishes every regular file under DIR as one dataset version
(docs/datasets.md): it refuses, before acquiring anything, symbolic links
(unless --follow-symlinks), special files, paths that are not valid UTF-8 or
not in Unicode NFC, and an empty directory (unless --allow-empty). Files are
uploaded --parallel at a time; with --base current (the default) files equal
to the current dataset version's are not uploaded, and a pointer that moved
meanwhile makes the publish stale with reason base. --seq is not used: a
dataset takes the grant's next seq. --timeout bounds it the same way, every
file's upload included; with --dir its default is longer (see --timeout).

--set RESOURCE=PATH (repeatable, with --ttl, instead of --resource and
--file/--dir) publishes a group (docs/groups.md): each PATH is a file (one
object, with --content-type and --meta) or a directory (a dataset, with
--base and --parallel). The resources are acquired as one group, then one
etcd transaction moves every pointer or none: "stale" names the member that
refused it and why; "duplicate" and "conflict" are by --key for the whole
group; "unknown" is settled for the whole group by 'fencepub resolve --from'
with the JSON printed. With -o json the document is the group's result:
outcome, reason, member, idempotency_key, digest and members (one result
per resource, in name order).

With -o json, stdout gets one JSON document: the result (with "error" and
"exit_code" when it is not applied or duplicate; with --dir also the
dataset's counts: files, bytes, uploaded_files, uploaded_bytes,
reused_files, sha256), or, when the command failed before an outcome,
{"command", "error", "exit_code"} (nothing was published).

` + publishExitHelp,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 || len(args) == 1 && args[0] != "-" {
				return exitcode.Usagef("unexpected arguments %q (the body comes from --file PATH or '-')", args)
			}
			return nil
		},
	}
	o.addFlags(cmd)
	cli.AddConnFlags(cmd)
	usageErrors(cmd)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := o.Complete(c, args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(c)
	}
	addRunMetrics(cmd, func() []string {
		if ms, err := parseSetSpecs(o.sets); err == nil && len(ms) > 0 {
			return memberNames(ms)
		}
		return []string{o.grant.resource}
	})
	return cmd
}

// addFlags registers publish's own flags on cmd.
func (o *publishOptions) addFlags(cmd *cobra.Command) {
	o.grant.add(cmd)
	f := cmd.Flags()
	// --resource is required unless --set names the resources (Validate).
	delete(f.Lookup("resource").Annotations, cobra.BashCompOneRequiredFlag)
	f.StringArrayVar(&o.sets, "set", nil, "RESOURCE=PATH (repeatable): publish a group, each resource from a file or a directory (a dataset), in one transaction; needs --ttl")
	f.Uint64Var(&o.seq, "seq", 0, "seq within the grant's term, from 1 (required with --fence; default with --ttl: the next one)")
	f.StringVar(&o.key, "key", "", "idempotency key of the operation (required)")
	o.body.add(cmd, "file to publish, or - for stdin")
	f.BoolVar(&o.allowEmpty, "allow-empty", false, "publish an empty (0-byte) body, or with --dir a directory without files, instead of refusing it")
	o.dir.add(cmd)
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "upper bound on the whole command, release and abort included (see above); a transaction still unanswered then is unknown (exit 112); with --dir the default is "+dirTimeout.String())
	_ = cmd.MarkFlagRequired("key")
	o.format = addOutputFlag(cmd)
}

// Complete takes a lone '-' argument as --file - and keeps c, whose flags
// tell Validate which were given. Errors: usage errors (exit 2).
func (o *publishOptions) Complete(c *cobra.Command, args []string) error {
	o.cmd = c
	if len(args) == 1 {
		if o.body.file != "" {
			return exitcode.Usagef("give --file or '-', not both")
		}
		o.body.file = "-"
	}
	return nil
}

// Validate checks the options before any grant is acquired or anything
// read, nor any I/O done. Errors: usage errors (exit 2).
func (o *publishOptions) Validate() error {
	if o.cmd.Flags().Changed("set") {
		return o.validateGroup()
	}
	if !o.cmd.Flags().Changed("resource") {
		return exitcode.Usagef(`required flag(s) "resource" not set`)
	}
	if o.cmd.Flags().Changed("dir") {
		return o.validateDir()
	}
	if o.body.file == "" {
		return exitcode.Usagef("no body: give --file PATH, or --file - (or '-') for stdin")
	}
	if err := positive("timeout", o.timeout); err != nil {
		return err
	}
	existing, err := o.grant.existing(o.cmd)
	if err != nil {
		return err
	}
	o.existing = existing
	seqSet := o.cmd.Flags().Changed("seq")
	if existing && !seqSet {
		return exitcode.Usagef("--seq is required with --epoch and --fence")
	}
	if seqSet && (o.seq == 0 || o.seq > layout.MaxNumber) {
		return exitcode.Usagef("--seq %d: want 1..%d", o.seq, layout.MaxNumber)
	}
	return nil
}

// Run opens the body (refusing an empty one unless --allow-empty), binds a
// grant (an existing one, or one acquired for this publish and released
// after it) and publishes, all under the --timeout deadline, which starts
// now; with an acquired grant the work before the release ends
// releaseReserve earlier.
func (o *publishOptions) Run(c *cobra.Command) error {
	if len(o.sets) > 0 {
		return o.runGroup(c)
	}
	if o.dir.dir != "" {
		return o.runDir(c)
	}
	ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
	defer cancel()
	lc, err := cli.LoadConfig(c)
	if err != nil {
		return err
	}
	work, wcancel := workContext(ctx, lc.Config, o.timeout, !o.existing)
	defer wcancel()
	// Refuse bad input before a grant is acquired or anything written.
	op, err := o.body.operation(o.key)
	if err != nil {
		return err
	}
	rc, err := openBody(work, c.InOrStdin(), o.body.file, o.allowEmpty)
	if err != nil {
		return err
	}
	defer rc.Close()
	op.Body = rc

	env, err := cli.ConnectContext(work, c, lc)
	if err != nil {
		return err
	}
	defer env.Close()
	client, bar, err := progressClient(c, env, "publish", knownSize(rc))
	if err != nil {
		return err
	}
	p, done, res, err := o.grant.bind(work, ctx, c, env, client)
	if err != nil {
		return reportResult(c, *o.format, "publish", res, err)
	}
	defer done()
	if o.seq != 0 {
		res, err = p.PublishSeq(work, o.seq, op)
	} else {
		res, err = p.Publish(work, op)
	}
	if bar != nil {
		_ = bar.Finish() // cleared before the outcome is logged
	}
	return reportResult(c, *o.format, "publish", res, err)
}

// progressClient returns a publisher Client of env and, on a terminal, the
// progress bar (what, size bytes; -1 unknown) its object writes count on.
// Errors: usage.
func progressClient(c *cobra.Command, env *cli.Env, what string, size int64) (*publisher.Client, *progressbar.ProgressBar, error) {
	cfg := env.PublisherConfig()
	bar := transferBar(c, c.ErrOrStderr(), what, size)
	if bar != nil {
		cfg.Store = progressStore{Store: cfg.Store, bar: bar}
	}
	client, err := publisher.New(cfg)
	if err != nil {
		return nil, nil, exitcode.With(exitcode.Usage, err)
	}
	return client, bar, nil
}

// positive returns a usage error unless the duration flag name is above 0
// (a zero or negative deadline would fail every request as "unavailable").
func positive(name string, d time.Duration) error {
	if d <= 0 {
		return exitcode.Usagef("--%s %s: want a positive duration", name, d)
	}
	return nil
}

// checkBucket makes one bucket call before a command acquires a grant: a
// missing bucket is a configuration mistake (exit 2) found before anything
// is minted in etcd; an unreachable store exits 115.
func checkBucket(ctx context.Context, env *cli.Env) error {
	return bucketError(env, env.Store.CheckBucket(ctx))
}

// checkStore runs, before a command acquires a grant or publishes,
// checkBucket and then the bucket's ownership check
// (operator.CheckOwnership, DESIGN.md invariant 9): a bucket whose marker
// is missing or names another deployment is not the domain's, and what is
// published there GC would never see, so it is refused (exit 2) before
// anything is written. An uninitialised domain passes: the first acquire
// initialises it and writes the marker. A bucket holding another etcd
// history exits 116.
func checkStore(ctx context.Context, env *cli.Env, a *authority.Authority) error {
	if err := checkBucket(ctx, env); err != nil {
		return err
	}
	_, err := operator.CheckOwnership(ctx, a)
	switch {
	case err == nil, errors.Is(err, fencepub.ErrNotInitialized):
		return nil
	case errors.Is(err, authority.ErrNoOwnership), errors.Is(err, authority.ErrForeignDeployment):
		return exitcode.With(exitcode.Usage, fmt.Errorf("%w; s3.bucket %q is not the bucket domain %s was initialised with, and GC would never see what is published there: "+
			"fix s3.bucket / --s3-bucket (or namespace.prefix / namespace.domain); nothing was written", err, env.Config.S3.Bucket, env.NS.Root()))
	}
	return authorityExit(err)
}

// bucketError classifies the error of a bucket call: a missing bucket
// exits 2 with the next step, an endpoint that is not S3 exits 2 saying
// so, an unreachable store 115.
func bucketError(env *cli.Env, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencepub.ErrObjectNotFound):
		return exitcode.With(exitcode.Usage, fmt.Errorf("s3.bucket %q does not exist at %s: create it with 'fencepub init --create-bucket' (or the store's own tools), or fix s3.bucket / --s3-bucket: %w",
			env.Config.S3.Bucket, env.Config.S3.Endpoint, err))
	case errors.Is(err, fencepub.ErrInvalid): // an s3.endpoint that is not S3, refused keys: the message names the key
		return exitcode.With(exitcode.Usage, err)
	case errors.Is(err, fencepub.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return exitcode.With(exitcode.Unavailable, err)
	}
	return exitcode.With(exitcode.Internal, err)
}

// openBody opens the body: stdin (in) for "-", else the file. Unless
// allowEmpty, an empty body is a usage error, found before anything is
// acquired: for stdin, a FIFO or a file that states 0 bytes (a /proc file
// may still have some), after waiting for the first byte. That wait (and
// opening a FIFO that has no writer yet) ends with ctx: Ctrl-C, or the
// command's deadline (a usage error: the body did not come in time).
func openBody(ctx context.Context, in io.Reader, file string, allowEmpty bool) (io.ReadCloser, error) {
	type opened struct {
		rc  io.ReadCloser
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		rc, err := openBodyNow(in, file, allowEmpty)
		ch <- opened{rc, err}
	}()
	select {
	case o := <-ch:
		return o.rc, o.err
	case <-ctx.Done():
		go func() { // the open or the first read may still end
			if o := <-ch; o.rc != nil {
				_ = o.rc.Close()
			}
		}()
		err := fmt.Errorf("waiting for the body (%s): %w; nothing acquired", file, context.Cause(ctx))
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, exitcode.With(exitcode.Usage, err)
		}
		return nil, err
	}
}

func openBodyNow(stdin io.Reader, file string, allowEmpty bool) (io.ReadCloser, error) {
	empty := exitcode.Usagef("the body (%s) is empty; nothing published (pass --allow-empty to publish an empty body)", file)
	if file == "-" {
		in, isEmpty := peekEmpty(stdin)
		if isEmpty && !allowEmpty {
			return nil, empty
		}
		return io.NopCloser(in), nil
	}
	fh, err := os.Open(file)
	if err != nil {
		return nil, exitcode.Usagef("--file: %v", err)
	}
	fi, err := fh.Stat()
	if err == nil && fi.IsDir() {
		_ = fh.Close()
		return nil, exitcode.Usagef("--file %s is a directory; give a file, or - for stdin", file)
	}
	if err == nil && fi.Size() > 0 {
		return fh, nil // the publisher tells a known length (one streamed PUT) from /sys's
	}
	// Empty, or of unknown length (a FIFO, a /proc file): wait for a byte.
	in, isEmpty := peekEmpty(fh)
	if isEmpty && !allowEmpty {
		_ = fh.Close()
		return nil, empty
	}
	return struct {
		io.Reader
		io.Closer
	}{in, fh}, nil
}

// knownSize returns the size in bytes of body when it is a regular file
// that says it (the progress bar's total), else -1.
func knownSize(body io.Reader) int64 {
	if f, ok := body.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			return fi.Size()
		}
	}
	return -1
}

// peekEmpty waits for r's first byte and returns a reader of all of r and
// whether r was empty.
func peekEmpty(r io.Reader) (io.Reader, bool) {
	in := bufio.NewReaderSize(r, 64<<10)
	_, err := in.Peek(1)
	return in, err == io.EOF
}

// parseMeta turns key=value flags into a map; the publisher validates it.
func parseMeta(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, exitcode.Usagef("--meta %q: want key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// resultOutput is the JSON document of publish, rollback and resolve: the
// Result, a dataset's counts, and for an outcome that is not applied or
// duplicate the error and the process exit code (the fields of
// cli.ErrorOutput).
type resultOutput struct {
	publisher.Result
	// DatasetStats are a dataset's counts (publish --dir), nil otherwise.
	*publisher.DatasetStats
	Error    string `json:"error,omitempty"`
	ExitCode int    `json:"exit_code"`
}

// reportResult prints a publish, rollback or resolve Result (JSON or one
// text line) when the call reached an outcome, tells applied from duplicate
// on stderr, and returns err with its exit code. Without an outcome it
// prints nothing: with -o json, cli.Execute prints the error document.
func reportResult(cmd *cobra.Command, format, verb string, res publisher.Result, err error) error {
	return reportOutcome(cmd, format, verb, res, nil, err)
}

// reportOutcome is reportResult with a dataset's counts (stats, nil for a
// single object) added to the JSON form.
func reportOutcome(cmd *cobra.Command, format, verb string, res publisher.Result, stats *publisher.DatasetStats, err error) error {
	err = publishExit(res, err)
	if res.Outcome != "" {
		if format == "json" {
			o := resultOutput{Result: res, DatasetStats: stats, ExitCode: cli.ExitCode(err, cmd.Context().Err() != nil)}
			if err != nil {
				o.Error = cli.Message(err)
			}
			if perr := printJSON(cmd.OutOrStdout(), o); perr != nil {
				return perr
			}
		} else {
			reason := ""
			if res.Reason != "" {
				reason = " (" + string(res.Reason) + ")"
			}
			line := fmt.Sprintf("%s%s %s", res.Outcome, reason, res.Resource)
			if res.Version.Seq != 0 { // zero: refused before a version was taken
				line += " " + res.Version.String()
			}
			if res.Object.Key != "" {
				line += fmt.Sprintf(" %s/%s sha256=%s", res.Object.Bucket, res.Object.Key, res.Object.SHA256)
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
		}
		attrs := []any{"resource", res.Resource, "version", res.Version.String(), "key", res.IdempotencyKey, "outcome", res.Outcome}
		switch res.Outcome {
		case publisher.Applied:
			cli.Logger(cmd).Info(verb+" applied", attrs...)
		case publisher.Duplicate:
			cli.Logger(cmd).Info(verb+" duplicate: the key was already applied; the pointer did not move", attrs...)
		case publisher.Unknown:
			cli.Logger(cmd).Warn(verb+" unknown: settle it with the command in resolve (or pass this command's -o json output to: fencepub resolve --from -)",
				append(attrs, "resolve", resolveHint(res, res.IdempotencyKey))...)
		}
	}
	return err
}

// publishExit attaches the exit code of a publisher result or error. An
// upload GC aborted (publisher.ErrUploadAborted: the grant was no longer
// live, or the version was superseded) exits as a lost lease: nothing was
// published, and a run with a new grant publishes.
func publishExit(res publisher.Result, err error) error {
	code := exitcode.Internal
	var ee *exitcode.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return err
	case res.Outcome == publisher.Stale && res.Reason == publisher.ReasonLease:
		code = exitcode.LeaseLost
	case errors.Is(err, publisher.ErrStale):
		code = exitcode.Stale
	case errors.Is(err, publisher.ErrConflict):
		code = exitcode.Conflict
	case errors.Is(err, publisher.ErrUnknown):
		code = exitcode.Unknown
	case errors.Is(err, publisher.ErrUploadAborted): // GC found the grant dead or the version superseded
		code = exitcode.LeaseLost
	case errors.Is(err, fencepub.ErrInvalid), errors.Is(err, fencepub.ErrInvalidName), errors.Is(err, publisher.ErrBody),
		errors.Is(err, publisher.ErrNoSuchVersion), errors.Is(err, fencepub.ErrNotInitialized), errors.Is(err, fencepub.ErrObjectNotFound):
		code = exitcode.Usage
	case errors.Is(err, fencepub.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		code = exitcode.Unavailable
	}
	return exitcode.With(code, err)
}

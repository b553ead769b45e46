package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/fencepub/fencepub/internal/recovery"
	"io"
	"log/slog"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
)

// newAuthorityCmd builds `fencepub authority acquire|renew|release|show|
// recover|setup-roles`: fenced leases from the command line (package
// authority), and the domain's etcd roles.
func newAuthorityCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "authority",
		Short: "Acquire, renew, release and inspect fenced leases; recover after an etcd restore",
		Long: `authority grants leases on resources. Each grant mints the resource's next
generation — the fence a publisher carries — in the same etcd transaction, from
a durable counter that never resets.

Exit codes: 0 success, 1 internal error, 2 usage or bad input (names, TTL),
111 request id already used by another owner, 113 lease held by another owner,
114 lease lost (expired, released or superseded), 115 etcd or the object store
unavailable, 116 rolled-back authority detected: run 'fencepub authority recover'.`,
	}
	cli.AddConnFlags(cmd)
	cmd.AddCommand(newAuthorityAcquireCmd(), newAuthorityRenewCmd(), newAuthorityReleaseCmd(),
		newAuthorityShowCmd(), newAuthorityRecoverCmd(), newAuthoritySetupRolesCmd())
	return cmd
}

// openAuthority connects and builds the Authority of the configured domain.
func openAuthority(cmd *cobra.Command) (*authority.Authority, *cli.Env, error) {
	env, err := cli.OpenEnv(cmd)
	if err != nil {
		return nil, nil, err
	}
	a, err := authority.New(env.AuthorityConfig())
	if err != nil {
		env.Close()
		return nil, nil, exitcode.With(exitcode.Usage, err)
	}
	return a, env, nil
}

// requireFlags returns a usage error (exit 2) naming the first of names the
// command line did not set.
func requireFlags(cmd *cobra.Command, names ...string) error {
	for _, n := range names {
		if !cmd.Flags().Changed(n) {
			return exitcode.Usagef("%s: --%s is required", cmd.CommandPath(), n)
		}
	}
	return nil
}

// authorityExit attaches the exit code of an authority error (an error that
// already carries one keeps it).
func authorityExit(err error) error {
	code := exitcode.Internal
	var coded *exitcode.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &coded):
		return err
	case errors.Is(err, fencepub.ErrInvalid), errors.Is(err, fencepub.ErrInvalidName), errors.Is(err, authority.ErrBadTTL), errors.Is(err, authority.ErrInvalidGrant),
		errors.Is(err, authority.ErrInitialized), errors.Is(err, fencepub.ErrCreateOnlyIgnored):
		code = exitcode.Usage
	case errors.Is(err, authority.ErrRequestConflict):
		code = exitcode.Conflict
	case errors.Is(err, authority.ErrHeld):
		code = exitcode.Held
	case errors.Is(err, authority.ErrLeaseLost), errors.Is(err, authority.ErrExpired):
		code = exitcode.LeaseLost
	case errors.Is(err, fencepub.ErrUnavailable):
		code = exitcode.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		// The command's own deadline (--timeout) ran out mid-acquire: not
		// an internal error; a grant made meanwhile expires with its TTL.
		code = exitcode.Unavailable
		err = fmt.Errorf("%w (the deadline ran out while acquiring; a grant made meanwhile expires with its TTL)", err)
	case errors.Is(err, authority.ErrRolledBack), errors.Is(err, authority.ErrForeignHistory):
		code = exitcode.NeedRecover
	}
	return exitcode.With(code, err)
}

// retryHint adds to an Acquire error whose outcome etcd may have applied
// (fencepub.ErrUnavailable: the grant transaction unanswered, or the grant
// made but not yet confirmed) the command-line way to get that grant back
// instead of minting another: the same command with --owner and
// --request-id.
func retryHint(err error, owner, requestID string) error {
	if !errors.Is(err, fencepub.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w (to get that grant back rather than mint another, run the command again with --owner %s --request-id %s)", err, owner, requestID)
}

// releaseReserve is the part of a command's deadline (timeout) kept for
// releasing a grant it acquired: etcd.request_timeout, at most a quarter of
// timeout.
func releaseReserve(cfg config.Config, timeout time.Duration) time.Duration {
	return min(cfg.Etcd.RequestTimeout, timeout/4)
}

// workContext returns the context of a command's work before it releases
// a grant it acquired: ctx itself when it acquires none (acquires false),
// else ctx ending releaseReserve(cfg, timeout) earlier, so work that runs
// into its deadline still leaves the release time inside ctx's
// (releaseGrant). ctx must have a deadline.
func workContext(ctx context.Context, cfg config.Config, timeout time.Duration, acquires bool) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !acquires || !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, dl.Add(-releaseReserve(cfg, timeout)))
}

// releaseGrant ends sess (authority.Session.CloseContext): it stops
// renewing and releases the grant within ctx's deadline, also when ctx
// was cancelled (an interrupted command still releases), so a command's
// deadline bounds its release. A release that did not complete in time is
// left, with an info line: the lease expires by itself within its TTL, and
// GC seals the term's leftovers. A grant already gone (expired, released,
// superseded) needs nothing.
func releaseGrant(ctx context.Context, log *slog.Logger, sess *authority.Session) {
	g := sess.Grant()
	rctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		rctx, cancel = context.WithDeadline(rctx, dl)
	}
	defer cancel()
	err := sess.CloseContext(rctx)
	switch {
	case err == nil, errors.Is(err, authority.ErrLeaseLost):
	case rctx.Err() != nil:
		log.Info("lease not released: the deadline passed; it expires by itself within its TTL",
			"ttl", g.TTL, "resource", g.Resource, "generation", g.Generation, "err", err)
	default:
		log.Warn("release failed; the lease expires by itself", "resource", g.Resource, "generation", g.Generation, "err", err)
	}
}

// grantOutput is the JSON form of a grant. expires_at is the client's
// estimate: the lease request's send time plus the TTL, the earliest moment
// etcd may expire the lease unless it is renewed.
type grantOutput struct {
	Resource       string    `json:"resource"`
	Owner          string    `json:"owner"`
	RequestID      string    `json:"request_id"`
	Epoch          uint64    `json:"epoch"`
	Generation     uint64    `json:"generation"`
	Fence          uint64    `json:"fence"`
	LeaseID        int64     `json:"lease_id,string"` // above 2^53: a string, so jq does not round it
	TTLSeconds     float64   `json:"ttl_seconds"`
	GrantedAt      time.Time `json:"granted_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	HolderRevision int64     `json:"holder_revision"`
	Expired        bool      `json:"expired,omitempty"`
}

func toGrantOutput(g authority.Grant) grantOutput {
	return grantOutput{
		Resource: g.Resource, Owner: g.Owner, RequestID: g.RequestID, Epoch: g.Epoch,
		Generation: g.Generation, Fence: g.Generation, LeaseID: int64(g.LeaseID), TTLSeconds: g.TTL.Seconds(),
		GrantedAt: g.GrantedAt.UTC(), ExpiresAt: g.GrantedAt.Add(g.TTL).UTC(), HolderRevision: g.HolderRevision,
	}
}

func printGrant(w io.Writer, format, verb string, o grantOutput) error {
	if format == "json" {
		return printJSON(w, o)
	}
	_, err := fmt.Fprintf(w, "%s %s: generation (fence) %d, epoch %d, owner %s, request id %s, lease %x, ttl %s, expires ~%s (client estimate)\n",
		verb, o.Resource, o.Generation, o.Epoch, o.Owner, o.RequestID, o.LeaseID,
		time.Duration(o.TTLSeconds*float64(time.Second)), o.ExpiresAt.Format(time.RFC3339))
	return err
}

func newAuthorityAcquireCmd() *cobra.Command {
	var (
		req  authority.AcquireRequest
		wait bool // the deprecated boolean --wait
	)
	cmd := &cobra.Command{
		Use:   "acquire --resource NAME [--owner ID] [--ttl 10s] [--request-id ID] [--max-wait D]",
		Short: "Acquire the lease on a resource and print the grant with its fence",
		Long: `acquire grants a lease on --resource and mints its next generation (the fence)
in one etcd transaction. The lease lives for --ttl (whole seconds, at least 2s:
etcd's minimum with its default timing; fencepub refuses shorter TTLs rather
than letting etcd stretch them) unless renewed with 'authority renew'.

--request-id makes the call idempotent: run it again with the same id after a
lost answer and you get the original grant, never a second one; if that grant
has expired meanwhile it is printed with "expired": true and the command exits
114. Without --request-id and --owner, random ones are generated and printed.

Without --max-wait a held resource exits 113 naming the holder; with
--max-wait D the command waits (watching the holder, not polling) up to D for
it to leave, then exits 113 (the deprecated bare --wait waits until
interrupted). expires_at in the output is the client's estimate (send time of
the lease request + TTL), never later than etcd's own expiry.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&req.Resource, "resource", "", "resource name (letters, digits, '.', '_', '-')")
	f.StringVar(&req.Owner, "owner", "", "owner id of this lease request (default: random)")
	f.DurationVar(&req.TTL, "ttl", 10*time.Second, "lease time to live, whole seconds, at least 2s")
	f.StringVar(&req.RequestID, "request-id", "", "idempotency key of this acquire (default: random)")
	f.DurationVar(&req.MaxWait, "max-wait", 0, "wait up to this long while another owner holds the resource instead of failing at once with 113")
	f.BoolVar(&wait, "wait", false, "wait until the resource is free instead of failing with 113")
	cli.Deprecate(f, "wait", "use --max-wait DURATION, as publish and run do")
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if err := requireFlags(c, "resource"); err != nil {
			return err
		}
		switch {
		case req.MaxWait < 0:
			return exitcode.Usagef("--max-wait %s: want 0 (fail at once when held) or more", req.MaxWait)
		case wait && c.Flags().Changed("max-wait"):
			return exitcode.Usagef("give --max-wait, not also the deprecated --wait")
		}
		req.Wait = wait || req.MaxWait > 0
		for _, name := range []string{"owner", "request-id"} {
			if c.Flags().Changed(name) && c.Flags().Lookup(name).Value.String() == "" {
				// An unset shell variable must not silently become a random
				// id: a retry would then mint a second grant.
				return exitcode.Usagef("--%s is empty", name)
			}
		}
		if req.Owner == "" {
			req.Owner = "cli-" + authority.NewID()[:16]
		}
		if req.RequestID == "" {
			req.RequestID = authority.NewID()
		}
		a, env, err := openAuthority(c)
		if err != nil {
			return err
		}
		defer env.Close()
		if err := checkBucket(c.Context(), env); err != nil {
			return err
		}
		g, err := a.Acquire(c.Context(), req)
		if errors.Is(err, authority.ErrExpired) {
			o := toGrantOutput(g)
			o.Expired = true
			if perr := printGrant(env.Stdout, *out, "expired", o); perr != nil {
				return perr
			}
		}
		if err != nil {
			return authorityExit(err)
		}
		return printGrant(env.Stdout, *out, "acquired", toGrantOutput(g))
	}
	return cmd
}

// holderFlags are the flags that name a live grant: resource, owner and
// (optionally for renew) generation.
type holderFlags struct {
	resource, owner string
	generation      uint64
	required        []string
}

func (h *holderFlags) add(cmd *cobra.Command, generationRequired bool) {
	f := cmd.Flags()
	f.StringVar(&h.resource, "resource", "", "resource name")
	f.StringVar(&h.owner, "owner", "", "owner id the grant was acquired with")
	usage := "generation (fence) of the grant; 0 accepts the current holder's"
	if generationRequired {
		usage = "generation (fence) of the grant"
	}
	f.Uint64Var(&h.generation, "generation", 0, usage)
	h.required = []string{"resource", "owner"}
	if generationRequired {
		h.required = append(h.required, "generation")
	}
}

// grant returns the live grant named by the flags. The caller's renew or
// release transaction compares the holder's CreateRevision read here, so
// a change in between makes it fail rather than act on another grant.
func (h *holderFlags) grant(cmd *cobra.Command, a *authority.Authority) (authority.Grant, error) {
	if err := requireFlags(cmd, h.required...); err != nil {
		return authority.Grant{}, err
	}
	hd, ok, err := a.Holder(cmd.Context(), h.resource)
	if err != nil {
		return authority.Grant{}, err
	}
	if !ok {
		return authority.Grant{}, fmt.Errorf("%w: %q has no live holder (expired or released)", authority.ErrLeaseLost, h.resource)
	}
	if hd.Owner != h.owner || (h.generation != 0 && hd.Generation != h.generation) {
		return authority.Grant{}, fmt.Errorf("%w: %q is held by owner %q with generation %d, not owner %q generation %d",
			authority.ErrLeaseLost, h.resource, hd.Owner, hd.Generation, h.owner, h.generation)
	}
	return hd.Grant, nil
}

func newAuthorityRenewCmd() *cobra.Command {
	var h holderFlags
	cmd := &cobra.Command{
		Use:   "renew --resource NAME --owner ID [--generation N]",
		Short: "Extend the lease of a live grant by its TTL",
		Long: `renew extends the lease of the grant --owner holds on --resource by its TTL.
It never mints a fence: if the grant expired, was released or was superseded,
it exits 114 and you must acquire again.`,
		Args: cobra.NoArgs,
	}
	h.add(cmd, false)
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		a, env, err := openAuthority(c)
		if err != nil {
			return err
		}
		defer env.Close()
		g, err := h.grant(c, a)
		if err != nil {
			return authorityExit(err)
		}
		sent := time.Now()
		if err := a.Renew(c.Context(), g); err != nil {
			return authorityExit(err)
		}
		o := toGrantOutput(g)
		o.ExpiresAt = sent.Add(g.TTL).UTC()
		return printGrant(env.Stdout, *out, "renewed", o)
	}
	return cmd
}

func newAuthorityReleaseCmd() *cobra.Command {
	var h holderFlags
	cmd := &cobra.Command{
		Use:   "release --resource NAME --owner ID --generation N",
		Short: "Release a live grant",
		Long: `release ends the lease --owner holds on --resource with --generation. It
compares owner and generation atomically, so it can never drop another
owner's lease; a grant that no longer holds the resource exits 114. It
first seals the grant's term (the resource's seal rises to (epoch,
generation, max)): a later publish with this generation is stale (reason
seal), and GC deletes what the term left unpublished at its next pass.`,
		Args: cobra.NoArgs,
	}
	h.add(cmd, true)
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		a, env, err := openAuthority(c)
		if err != nil {
			return err
		}
		defer env.Close()
		g, err := h.grant(c, a)
		if err == nil {
			err = a.Release(c.Context(), g)
		}
		if err != nil {
			return authorityExit(err)
		}
		if *out == "json" {
			return printJSON(env.Stdout, map[string]any{"resource": g.Resource, "owner": g.Owner, "generation": g.Generation, "released": true})
		}
		_, err = fmt.Fprintf(env.Stdout, "released %s generation %d (owner %s)\n", g.Resource, g.Generation, g.Owner)
		return err
	}
	return cmd
}

// showOutput is the JSON form of `authority show`.
type showOutput struct {
	Resource   string `json:"resource"`
	Epoch      uint64 `json:"epoch"`
	Generation uint64 `json:"generation"`
	Held       bool   `json:"held"`
	// Owner is the holder's owner ("" when nobody holds the resource).
	Owner  string        `json:"owner"`
	Holder *holderOutput `json:"holder,omitempty"`
}

type holderOutput struct {
	grantOutput
	RemainingSeconds float64 `json:"remaining_seconds"` // etcd's remaining TTL, whole seconds
}

func newAuthorityShowCmd() *cobra.Command {
	var res string
	cmd := &cobra.Command{
		Use:     "show --resource NAME",
		Aliases: []string{"status"},
		Short:   "Show a resource's epoch, generation and live holder",
		Args:    cobra.NoArgs,
	}
	cmd.Flags().StringVar(&res, "resource", "", "resource name")
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if err := requireFlags(c, "resource"); err != nil {
			return err
		}
		a, env, err := openAuthority(c)
		if err != nil {
			return err
		}
		defer env.Close()
		st, err := operator.Inspect(c.Context(), a, res)
		if err != nil {
			return authorityExit(err)
		}
		h, held := st.Holder.(authority.Holder)
		o := showOutput{Resource: st.Resource, Epoch: st.Epoch, Generation: st.Generation, Held: held}
		if held {
			o.Owner = h.Owner
			o.Holder = &holderOutput{grantOutput: toGrantOutput(h.Grant), RemainingSeconds: h.Remaining.Seconds()}
			o.Holder.ExpiresAt = time.Now().Add(h.Remaining).UTC().Truncate(time.Second)
		}
		if *out == "json" {
			return printJSON(env.Stdout, o)
		}
		fmt.Fprintf(env.Stdout, "resource    %s\nepoch       %d\ngeneration  %d\n", o.Resource, o.Epoch, o.Generation)
		if o.Holder == nil {
			_, err = fmt.Fprintln(env.Stdout, "holder      none")
			return err
		}
		_, err = fmt.Fprintf(env.Stdout, "holder      %s (generation %d, epoch %d, request id %s, lease %x, %s left)\n",
			o.Owner, o.Holder.Generation, o.Holder.Epoch, o.Holder.RequestID, o.Holder.LeaseID, h.Remaining)
		return err
	}
	return cmd
}

func newAuthorityRecoverCmd() *cobra.Command {
	var opts recovery.Options
	cmd := &cobra.Command{
		Use:   "recover [--from-bucket] [--dry-run] [--republish]",
		Short: "Move the domain to a new epoch after an etcd restore or loss",
		Long: `recover makes the domain safe again after etcd was restored from a snapshot
(see the restore runbook in docs/operations.md). Run it while workers cannot reach the
restored etcd. It reserves a new epoch above every epoch found in the bucket's
markers, pointers and object keys (create-only, so the number survives any
later restore), records each resource's restored pointer for the old epoch
(GC keeps old-epoch objects above it), switches etcd to the new epoch — from
then on every publish or grant of an older epoch is rejected — revokes every
lease the snapshot brought back, and reports the objects above each restored
pointer: publishes the restore may have lost. It is idempotent: after a
failure, run it again. --dry-run reports without changing anything.

--from-bucket is the one explicit way to take over a bucket whose etcd is
lost with no snapshot (an empty replacement etcd; see "etcd lost with no
snapshot" in docs/operations.md). An etcd that holds no epoch for the domain never
initialises itself over a bucket that already holds its markers or objects:
publish, acquire and gc exit 116 until this runs. With --from-bucket,
recover adopts the deployment id of the bucket's ownership marker, reserves
an epoch above every marker and object, and quarantines every object found
(GC keeps them and reports them as quarantined); readers get nothing until
a publish, or, with --republish, the newest object of each resource again
under the new epoch. It is refused on an etcd that already holds an epoch
(a snapshot restore: run recover without --from-bucket). Never run it
against a second cluster while the first one still serves the bucket: both
would publish, and neither GC deletes the other's objects.

Exit codes: 0 done; 2 bad flags, or --from-bucket on an etcd that holds an
epoch; 115 etcd or the object store did not answer; 116 etcd holds no epoch
and the bucket holds another history (add --from-bucket).`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "report what recover would do; change nothing")
	cmd.Flags().BoolVar(&opts.FromBucket, "from-bucket", false, "take over the bucket's history into an etcd that holds none of it (etcd lost with no snapshot); quarantines every object found")
	var republish bool
	cmd.Flags().BoolVar(&republish, "republish", false, "then publish the newest object above each restored pointer under the new epoch (a publish the restore lost; with --from-bucket, each resource's newest object)")
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		a, env, err := openAuthority(c)
		if err != nil {
			return err
		}
		defer env.Close()
		if republish && opts.DryRun {
			return exitcode.Usagef("--republish publishes; it cannot be combined with --dry-run")
		}
		rep, err := recovery.Recover(c.Context(), a, opts)
		if err != nil {
			return authorityExit(err)
		}
		var (
			repub    []recovery.Restored
			repubErr error
		)
		if republish {
			client, err := publisher.New(env.PublisherConfig())
			if err != nil {
				return exitcode.With(exitcode.Usage, err)
			}
			repub = recovery.RestoreLost(c.Context(), client, a, rep)
			for _, r := range repub {
				if r.Error != "" {
					env.Log.Error("republish failed", "resource", r.Resource, "version", r.From, "err", r.Error)
					repubErr = exitcode.With(exitcode.Unavailable, errors.New("republish failed for some resources; run recover --republish again"))
				}
			}
		}
		if *out == "json" {
			if err := printJSON(env.Stdout, struct {
				recovery.Report
				Republished []recovery.Restored `json:"republished,omitempty"`
			}{rep, repub}); err != nil {
				return err
			}
			return repubErr
		}
		w := env.Stdout
		verb := "moved"
		if rep.DryRun {
			verb = "would move"
		}
		if rep.FromBucket {
			fmt.Fprintf(w, "taking over the bucket's history of deployment %s: every object found is quarantined\n", rep.DeploymentID)
		}
		fmt.Fprintf(w, "%s the domain from epoch %d to %d (highest seen: epoch markers %d, grant markers %d, pointers %d, objects %d)\n",
			verb, rep.OldEpoch, rep.NewEpoch, rep.Highest.EpochMarker, rep.Highest.GrantMarker, rep.Highest.Pointer, rep.Highest.Object)
		if rep.RollbackFlag != "" {
			fmt.Fprintf(w, "cleared rollback flag: %s\n", rep.RollbackFlag)
		}
		for _, h := range rep.Revoked {
			fmt.Fprintf(w, "revoked restored lease %x of %s (owner %s, generation %d, epoch %d)\n", h.LeaseID, h.Resource, h.Owner, h.Generation, h.Epoch)
		}
		for _, r := range rep.Resources {
			fmt.Fprintf(w, "resource %s: restored pointer %s, %d object(s) above it\n", r.Resource, r.RestoredPointer, len(r.Above))
			for _, o := range r.Above {
				fmt.Fprintf(w, "  %s  %s  %d bytes  %s\n", o.Version, o.Key, o.Size, o.LastModified.UTC().Format(time.RFC3339))
			}
		}
		for _, r := range repub {
			res, _ := r.Result.(publisher.Result)
			fmt.Fprintf(w, "republished %s: %s -> %s (%s)\n", r.Resource, r.From, res.Version, res.Outcome)
		}
		return repubErr
	}
	return cmd
}

package main

import (
	"context"
	"fmt"
	"github.com/fencepub/fencepub"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// newRollbackCmd builds `fencepub rollback`.
func newRollbackCmd() *cobra.Command {
	var (
		g       grantFlags
		to, key string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rollback --resource R --to VERSION --owner O (--ttl D | --epoch E --fence F)",
		Short: "Publish an earlier version's content again, as a new version",
		Long: `rollback makes the content of an earlier published version current again. It
copies that version's object server-side, create-only, to a fresh key under a
new version (the grant's next seq) and publishes it normally; the pointer never
names an old key, which GC may already have judged garbage.

VERSION is "epoch.fence.seq" (as 'fencepub pointer' prints it): a retained
version, as 'fencepub history' lists them; for any other, rollback exits 2
naming the retained ones, before it acquires a grant. The grant comes
from --owner and --ttl (acquired, renewed and released around the rollback) or
names an existing one with --epoch, --fence and --owner. --key is the rollback's
idempotency key (default: a random one); a retry with the same key is a
duplicate.

` + publishExitHelp,
		Example: `  fencepub history --resource nightly-report
  fencepub rollback --resource nightly-report --to 1.4.1 --owner ops --ttl 30s`,
		Args: noArgs,
	}
	g.add(cmd)
	cmd.Flags().StringVar(&to, "to", "", "version to roll back to, epoch.fence.seq (required)")
	cmd.Flags().StringVar(&key, "key", "", "idempotency key of the rollback (default rollback-<random>)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "upper bound on the whole command, connecting and releasing an acquired grant included; a transaction still unanswered then is unknown (exit 112)")
	_ = cmd.MarkFlagRequired("to")
	out := addOutputFlag(cmd)
	cli.AddConnFlags(cmd)
	usageErrors(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		v, err := parseVersion(to)
		if err != nil {
			return err
		}
		if err := positive("timeout", timeout); err != nil {
			return err
		}
		switch {
		case c.Flags().Changed("key") && key == "":
			return exitcode.Usagef("--key is empty")
		case key == "":
			key = "rollback-" + layout.NewNonce()
		}
		// Bad input is refused before a grant is acquired (a generation
		// minted for nothing).
		if err := layout.ValidateKey("idempotency key", key); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		if err := layout.ValidateResource(g.resource, false); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		existing, err := g.existing(c)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.Context(), timeout)
		defer cancel()
		lc, err := cli.LoadConfig(c)
		if err != nil {
			return err
		}
		work, wcancel := workContext(ctx, lc.Config, timeout, !existing)
		defer wcancel()
		env, err := cli.ConnectContext(work, c, lc)
		if err != nil {
			return err
		}
		defer env.Close()
		if err := historyExists(work, env, g.resource, v); err != nil {
			return err
		}
		client, err := publisher.New(env.PublisherConfig())
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		p, done, res, err := g.bind(work, ctx, c, env, client)
		if err != nil {
			return reportResult(c, *out, "rollback", res, err)
		}
		defer done()
		res, err = p.Rollback(work, v, key)
		return reportResult(c, *out, "rollback", res, err)
	}
	return cmd
}

// historyExists checks, before a grant is acquired, that v is in
// resource's history; when it is not, the error (exit 2) names the
// versions that are retained (notRetained). Rollback checks it again under
// the grant; this read only spares a generation when the version does not
// exist.
func historyExists(ctx context.Context, env *cli.Env, resource string, v layout.Version) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := env.Etcd.Get(rctx, env.NS.HistoryKey(resource, v), clientv3.WithCountOnly())
	switch {
	case err != nil:
		return exitcode.With(exitcode.Unavailable, fmt.Errorf("etcd: read history of %q: %w", resource, err))
	case resp.Count == 0:
		r, rerr := reader.New(readerConfig(env), resource)
		if rerr != nil {
			return readerExit(rerr)
		}
		return notRetained(ctx, r, resource, fmt.Errorf("%w: %q has no history entry for %s", publisher.ErrNoSuchVersion, resource, v))
	}
	return nil
}

// parseVersion parses "epoch.fence.seq" or the fixed-width encoded form
// (fencepub.ParseVersion) of a published version: no number is zero.
func parseVersion(s string) (layout.Version, error) {
	v, err := fencepub.ParseVersion(s)
	if err != nil || v.Epoch == 0 || v.Fence == 0 || v.Seq == 0 {
		return layout.Version{}, exitcode.Usagef("version %q: want epoch.fence.seq, each 1..%d", s, layout.MaxNumber)
	}
	return v, nil
}

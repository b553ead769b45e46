package main

import (
	"context"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
)

// newResolveCmd builds `fencepub resolve`.
func newResolveCmd() *cobra.Command {
	var (
		resource, key     string
		epoch, fence, seq uint64
		timeout           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "resolve --resource R --key K --epoch E --fence F --seq S",
		Short: "Settle an unknown publish outcome for good",
		Long: `resolve answers whether the publish of --key at version (epoch, fence, seq)
was applied, after a publish ended "unknown" (exit 112). One etcd transaction
either finds the key's idempotency record — "applied" at that version, or
"duplicate" when another attempt of the same key applied it — or, finding none,
raises the resource's seal to that version so that the attempt can never apply
later: "stale" with reason "seal" (exit 110). Safe to repeat.

Pass the exact version of the unknown attempt: every version up to it is sealed.
A version no publish can carry — an epoch above the domain's, or a fence never
granted on the resource — is refused (exit 2) and seals nothing; an attempt of
an older epoch is reported stale with reason "epoch" without a seal.

` + publishExitHelp,
		Args: noArgs,
	}
	f := cmd.Flags()
	f.StringVar(&resource, "resource", "", "resource name (required)")
	f.StringVar(&key, "key", "", "idempotency key of the unknown publish (required)")
	f.Uint64Var(&epoch, "epoch", 0, "epoch of the unknown publish's version (required)")
	f.Uint64Var(&fence, "fence", 0, "fence of the unknown publish's version (required)")
	f.Uint64Var(&seq, "seq", 0, "seq of the unknown publish's version (required)")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "deadline; etcd unreachable until then exits 115")
	for _, name := range []string{"resource", "key", "epoch", "fence", "seq"} {
		_ = cmd.MarkFlagRequired(name)
	}
	out := addOutputFlag(cmd)
	addConnFlags(cmd)
	usageErrors(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if err := positive("timeout", timeout); err != nil {
			return err
		}
		env, err := openEnv(c)
		if err != nil {
			return err
		}
		defer env.Close()
		client, err := publisher.New(env.publisherConfig())
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		ctx, cancel := context.WithTimeout(c.Context(), timeout)
		defer cancel()
		res, err := client.Resolve(ctx, resource, key, layout.Version{Epoch: epoch, Fence: fence, Seq: seq})
		return reportResult(c, *out, "resolve", res, err)
	}
	return cmd
}

package main

import (
	"fmt"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/spf13/cobra"
)

// newResourceCmd builds `fencepub resource delete R [--force]` and
// `fencepub resource release-quarantine R`.
func newResourceCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "resource", Short: "Manage resources"}
	var force bool
	del := &cobra.Command{
		Use:   "delete RESOURCE",
		Short: "Decommission a resource: seal it so nothing of its past can publish",
		Long: `delete raises the resource's seal to (epoch, generation, max) in one etcd
transaction, so no fence of its past can ever publish again (a worker still
holding the lease gets stale, reason seal). It refuses while a lease is live
unless --force. GC (gc run / gc daemon) then deletes its objects — the
published and retained ones after the reader grace — and prunes its history;
the generation counter, pointer and seal stay, so a later grant re-creates
the resource above them.

Exit codes: 0 sealed (or already sealed); 2 bad name, or a resource never
granted in this domain (a typo: nothing is written); 113 a live lease holds
the resource (use --force); 115 etcd did not answer.`,
		Args: cobra.ExactArgs(1),
	}
	del.Flags().BoolVar(&force, "force", false, "seal even while a lease is live (its holder's publishes become stale)")
	out := addOutputFlag(del)
	del.RunE = func(c *cobra.Command, args []string) error {
		env, col, err := openEnvCollector(c)
		if err != nil {
			return err
		}
		defer env.Close()
		d, err := operator.Decommission(c.Context(), col, args[0], force)
		if err != nil {
			return gcExit(err)
		}
		if *out == "json" {
			return printJSON(env.Stdout, d)
		}
		holder, _ := d.Holder.(*authority.Grant)
		switch {
		case d.Already:
			fmt.Fprintf(env.Stdout, "%s: already sealed at %s; nothing changed\n", d.Resource, d.Seal)
		case holder != nil:
			fmt.Fprintf(env.Stdout, "%s: sealed at %s (was %s); the live holder %q (generation %d) can no longer publish; gc removes the objects after the reader grace\n",
				d.Resource, d.Seal, d.Previous, holder.Owner, holder.Generation)
		default:
			fmt.Fprintf(env.Stdout, "%s: sealed at %s (was %s); gc removes the objects after the reader grace\n", d.Resource, d.Seal, d.Previous)
		}
		return nil
	}
	cmd.AddCommand(del, newReleaseQuarantineCmd())
	cli.AddConnFlags(cmd)
	return cmd
}

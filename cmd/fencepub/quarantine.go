package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// releasedQuarantine is the result of `resource release-quarantine`.
type releasedQuarantine struct {
	Resource string `json:"resource"`
	DryRun   bool   `json:"dry_run"`
	// Epochs are the old epochs whose quarantine is lifted, ascending.
	Epochs []uint64 `json:"epochs"`
	// Objects are the quarantined objects of those epochs, which the next
	// GC pass deletes.
	Objects []string `json:"objects"`
}

// newReleaseQuarantineCmd builds `fencepub resource release-quarantine`.
func newReleaseQuarantineCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "release-quarantine RESOURCE",
		Short: "Let GC delete a resource's quarantined objects (an operator decided they are not needed)",
		Long: `release-quarantine lifts the quarantine GC keeps on a resource's old-epoch
objects: those above the pointer a restore left (recover recorded it; each may
be the only copy of a lost publish) and those of an epoch this etcd never
issued (another history's objects, found by recover --from-bucket). Decide
first: republish what must come back (authority recover --republish, or
rollback), then release the rest. The next gc pass deletes them.

It runs a dry-run GC pass of the resource to find them, then records, in one
etcd transaction, each of their epochs as restored at (epoch, max, max): no
object of that epoch is above it any more, so GC classifies them as
unpublishable. Objects of the current epoch are never affected. --epoch
limits it to one epoch. Writing the records needs the operator role.

Exit codes: 0 released (or nothing quarantined); 2 bad arguments, or the
user may not write the domain's restored records; 115 etcd or the object
store did not answer.`,
		Args: cobra.ExactArgs(1),
	}
	var epoch uint64
	var dry bool
	cmd.Flags().Uint64Var(&epoch, "epoch", 0, "release only the quarantined objects of this old epoch (default: every epoch)")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "report what would be released; change nothing")
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		res := args[0]
		if err := layout.ValidateResource(res, false); err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		env, col, err := openEnvCollector(c)
		if err != nil {
			return err
		}
		defer env.Close()
		rel, err := releaseQuarantine(c.Context(), env, col, res, epoch, dry)
		if err != nil {
			return err
		}
		if *out == "json" {
			return printJSON(env.Stdout, rel)
		}
		verb := "released"
		if dry {
			verb = "would release"
		}
		switch {
		case len(rel.Objects) == 0:
			fmt.Fprintf(env.Stdout, "%s: nothing quarantined\n", res)
		default:
			fmt.Fprintf(env.Stdout, "%s: %s %d quarantined object(s) of epoch(s) %v; the next gc pass deletes them\n", res, verb, len(rel.Objects), rel.Epochs)
		}
		return nil
	}
	return cmd
}

// releaseQuarantine finds res's quarantined objects with a dry-run pass of
// col (only those of epoch, when not 0) and, unless dry, records each of
// their epochs as restored at (epoch, max, max) in one transaction
// (layout.RestoredKey; DESIGN.md "Garbage collection": GC quarantines an
// old-epoch object only while it is above its epoch's restored record).
func releaseQuarantine(ctx context.Context, env *cli.Env, col *gc.Collector, res string, epoch uint64, dry bool) (releasedQuarantine, error) {
	rel := releasedQuarantine{Resource: res, DryRun: dry, Epochs: []uint64{}, Objects: []string{}}
	rep, err := operator.RunGC(ctx, col, gc.RunOptions{Resources: []string{res}, DryRun: true}, true)
	if err != nil {
		return rel, gcExit(err)
	}
	if len(rep.Errors) > 0 {
		return rel, exitcode.With(exitcode.Unavailable, fmt.Errorf("the dry-run pass of %q failed: %s", res, rep.Errors[0]))
	}
	for _, d := range rep.Decisions {
		if d.Kind != "quarantined" || d.Version == nil || epoch != 0 && d.Version.Epoch != epoch {
			continue
		}
		rel.Objects = append(rel.Objects, d.Key)
		if !slices.Contains(rel.Epochs, d.Version.Epoch) {
			rel.Epochs = append(rel.Epochs, d.Version.Epoch)
		}
	}
	slices.Sort(rel.Epochs)
	if dry || len(rel.Epochs) == 0 {
		return rel, nil
	}
	var ops []clientv3.Op
	for _, e := range rel.Epochs {
		val, err := layout.EncodePointer(layout.Pointer{Version: layout.Version{Epoch: e, Fence: layout.MaxNumber, Seq: layout.MaxNumber}})
		if err != nil {
			return rel, err
		}
		ops = append(ops, clientv3.OpPut(env.NS.RestoredKey(res, e), val))
	}
	if _, err := env.Etcd.Txn(ctx).Then(ops...).Commit(); err != nil {
		return rel, etcdExit(err)
	}
	return rel, nil
}

package main

import (
	"context"
	"errors"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/reader"
	"github.com/spf13/cobra"
)

// newWatchCmd builds `fencepub watch`.
func newWatchCmd() *cobra.Command {
	var (
		resource string
		count    int
	)
	cmd := &cobra.Command{
		Use:   "watch --resource R",
		Short: "Follow a resource's pointer, one JSON line per newer version",
		Long: `watch prints the current pointer (once something is published: until then
it waits, saying so on stderr) and then every newer one as JSON lines (the
shape of 'fencepub pointer -o json' plus "revision" and "resync"), with strictly
increasing versions. It follows an etcd watch from the read's revision + 1 and,
after compaction or a lost connection, re-syncs with a fresh read ("resync":
true; versions published meanwhile may be skipped: newer state wins). Problems
that do not stop the watch (a corrupt pointer value, etcd unreachable, a
pointer that went back below a version already printed) are printed as lines
with "error". It runs until interrupted, or until --count
versions were printed. A resource never granted in the domain (a misspelt
name) fails at once, exit 1, unless --allow-missing: then watch waits for
its first publish.

` + readerExitHelp,
		Example: `  fencepub watch --resource nightly-report
  fencepub watch --resource nightly-report --count 1 | jq -r .object.key`,
		Args: noArgs,
	}
	cmd.Flags().StringVar(&resource, "resource", "", "resource name (required)")
	cmd.Flags().IntVar(&count, "count", 0, "exit after printing this many versions (0: run until interrupted)")
	cmd.Flags().VarP(&choice{value: new(string), allowed: []string{"json"}, def: "json"}, cli.OutputFlag, "o", "output format: json (watch prints JSON lines only)")
	_ = cmd.MarkFlagRequired("resource")
	allowMissing := addAllowMissing(cmd)
	cli.AddConnFlags(cmd)
	usageErrors(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if count < 0 {
			return exitcode.Usagef("--count %d: want 0 (run until interrupted) or more", count)
		}
		r, env, err := openReader(c.Context(), c, resource, false, 0)
		if err != nil {
			return err
		}
		defer env.Close()
		ctx, cancel := context.WithCancel(c.Context())
		defer cancel() // ends the watch goroutine when --count is reached
		// The watch itself waits for a first publish however the name is
		// spelt: one read first tells a misspelt name from one not yet
		// published. Other errors are left to the watch, which reports them.
		if _, err := r.Current(ctx); errors.Is(err, reader.ErrNotPublished) {
			if merr := missingResource(ctx, env, err, *allowMissing); merr != nil {
				return merr
			}
			cli.Logger(c).Info("waiting for the first publish", "resource", resource, "state", unpublishedState(errors.Is(err, reader.ErrUnknownResource)))
		}
		printed := 0
		for u := range r.Watch(ctx) {
			o := pointerOutput{Resource: resource, Published: u.Err == nil, Pointer: u.Pointer, Revision: u.Revision, Resync: u.Resync}
			if u.Err != nil {
				o.Error = u.Err.Error()
			}
			if err := writeJSON(c.OutOrStdout(), o, ""); err != nil {
				return err
			}
			if u.Err == nil {
				printed++
			}
			if count > 0 && printed >= count {
				return nil
			}
		}
		return nil
	}
	return cmd
}

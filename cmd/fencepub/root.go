package main

import (
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/spf13/cobra"
)

// newRootCmd builds the fencepub command tree. Each subcommand lives in its
// own file as a newXCmd constructor and reads configuration through its own
// viper instance (see config.go).
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "fencepub",
		Short: "Fenced publication of batch results through etcd and an object store",
		Long: `fencepub publishes the results of batch workers so that a paused, slow or
restored worker can never overwrite a newer result. Workers write immutable
objects to an S3-compatible store; publication is one etcd transaction that
compares the resource pointer's (epoch, fence, seq) before swapping it.

Exit codes: 0 applied/duplicate/success, 1 internal error, 2 usage or bad input,
110 stale, 111 conflict, 112 unknown (run 'fencepub resolve'), 113 lease held,
114 lease lost, 115 service unavailable, 116 authority needs 'recover',
130 interrupted before an outcome.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       currentBuild().String(),
	}
	// Bad flags (an unparsable --ttl, an unknown flag) are usage errors,
	// exit 2, in every subcommand (cobra inherits this function).
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitcode.With(exitcode.Usage, err) })
	root.AddCommand(
		newLabCmd(),
		newConfigCmd(),
		newDevCmd(),
		newAuthorityCmd(),
		newPublishCmd(),
		newPointerCmd(),
		newReadCmd(),
		newWatchCmd(),
		newResolveCmd(),
		newRollbackCmd(),
		newRunCmd(),
		newGCCmd(),
		newResourceCmd(),
		newBenchCmd(),
		newVersionCmd(),
	)
	strictArgs(root)
	explainPermissions(root)
	return root
}

// strictArgs makes every positional-argument error a usage error (exit 2):
// a command group given an unknown subcommand reports it instead of printing
// help with exit 0, and a command's own Args check (cobra.ExactArgs, ...)
// keeps its message but exits 2 instead of 1.
func strictArgs(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		strictArgs(c)
	}
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exitcode.Usagef("unknown command %q for %q; see '%s --help'", args[0], c.CommandPath(), c.CommandPath())
			}
			return nil
		}
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		return
	}
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return exitcode.With(exitcode.Usage, err)
			}
			return nil
		}
	}
}

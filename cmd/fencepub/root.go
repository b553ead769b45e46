package main

import (
	"github.com/fencepub/fencepub/internal/cli"
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
	root.AddCommand(
		newLabCmd(),
		newConfigCmd(),
		newDevCmd(),
		newAuthorityCmd(),
		newPublishCmd(),
		newPointerCmd(),
		newReadCmd(),
		newWatchCmd(),
		newLsCmd(),
		newHistoryCmd(),
		newResolveCmd(),
		newRollbackCmd(),
		newRunCmd(),
		newGCCmd(),
		newResourceCmd(),
		newVersionCmd(),
		newInitCmd(),
		newDoctorCmd(),
		newVerifyCmd(),
	)
	addCompletions(root)
	cli.Prepare(root)
	return root
}

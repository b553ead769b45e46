// Command fencepub-bench runs fencepub's benchmark suite (docs/benchmarks.md)
// against the configured etcd and object store, or with --local against a
// single-member etcd and single-drive MinIO it starts itself. It is a
// separate binary from fencepub so that workers do not link the suite's
// plotting and PDF code.
package main

import (
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/spf13/cobra"
)

func main() { cli.Main(newRootCmd()) }

// newRootCmd is the fencepub-bench command with the exit-code conventions
// of every fencepub binary (cli.Prepare).
func newRootCmd() *cobra.Command {
	root := newBenchCmd()
	root.SilenceUsage = true
	root.SilenceErrors = true
	cli.Prepare(root)
	return root
}

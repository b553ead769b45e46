package main

import (
	"context"
	"strings"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/spf13/cobra"
)

// completionTimeout bounds the etcd read of a resource-name completion.
const completionTimeout = 2 * time.Second

// addCompletions makes every --resource flag under root, and the RESOURCE
// argument of `resource delete`, complete the names of the domain's
// resources from etcd (docs/cli.md "Shell completion"); the -o/--output
// values complete in completeOutput.
func addCompletions(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if fl := c.Flags().Lookup("resource"); fl != nil {
			_ = c.RegisterFlagCompletionFunc("resource", completeResources)
		}
		if c.Name() == "delete" && c.Parent() != nil && c.Parent().Name() == "resource" {
			c.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return completeResources(c, args, toComplete)
			}
		}
	}
	walk(root)
}

// completeResources lists the resources with a pointer whose names start
// with toComplete, from the configuration the command line gives so far.
// It prints nothing on stderr; a configuration or etcd that fails yields
// no names.
func completeResources(c *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	lc, err := cli.LoadConfig(c)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	etcd, err := lc.Config.EtcdClient()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	defer etcd.Close()
	ns, _ := lc.Config.NS() // validated by LoadConfig
	ctx, cancel := context.WithTimeout(c.Context(), completionTimeout)
	defer cancel()
	names, err := listResources(ctx, &cli.Env{Etcd: etcd, NS: ns})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	out := names[:0]
	for _, n := range names {
		if strings.HasPrefix(n, toComplete) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

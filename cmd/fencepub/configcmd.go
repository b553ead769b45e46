package main

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// outputFormats are the values of every command's -o/--output.
var outputFormats = []string{"text", "json"}

// addOutputFlag registers -o/--output (text or json; cli.OutputFlag),
// whose values complete in the shell, and returns its value.
func addOutputFlag(cmd *cobra.Command) *string {
	o := new(string)
	cmd.Flags().VarP(&choice{value: o, allowed: outputFormats, def: "text"}, cli.OutputFlag, "o", "output format: text or json")
	completeOutput(cmd)
	*o = "text"
	return o
}

// completeOutput makes the values of cmd's -o/--output complete in the
// shell.
func completeOutput(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc(cli.OutputFlag, cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp)) // the flag exists
}

// choice is a pflag.Value accepting one of a fixed set of words.
type choice struct {
	value   *string
	allowed []string
	def     string
}

var _ pflag.Value = (*choice)(nil)

func (c *choice) String() string {
	if c.value == nil || *c.value == "" {
		return c.def
	}
	return *c.value
}

func (c *choice) Set(s string) error {
	for _, a := range c.allowed {
		if s == a {
			*c.value = s
			return nil
		}
	}
	return fmt.Errorf("must be one of %v", c.allowed)
}

func (c *choice) Type() string { return "string" }

// printJSON writes v, which must encode as a JSON object, as one indented
// JSON document and a newline, with "schema_version" first (cli.WriteJSON).
func printJSON(w io.Writer, v any) error { return cli.WriteJSON(w, v, "  ") }

// writeJSON is printJSON with indent ("" for one line per document, the
// form of a stream such as `watch`).
func writeJSON(w io.Writer, v any, indent string) error { return cli.WriteJSON(w, v, indent) }

// newConfigCmd builds `fencepub config show`.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect the effective configuration"}
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration with secrets redacted",
		Long: `Print every configuration key with its effective value after applying
defaults, the config file, FENCEPUB_* environment variables and flags
(precedence: flag > env > file > default). Secrets are printed as <redacted>;
s3.credentials also names the source that supplies the object store's keys
(config, environment, shared credentials file or IAM), never the keys.`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(show)
	show.RunE = func(c *cobra.Command, _ []string) error {
		v, err := cli.LoadViper(c)
		if err != nil {
			return err
		}
		cfg, err := config.Load(v)
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		red := config.Redacted(v)
		red["config_file"] = v.ConfigFileUsed()
		red["s3.credentials"] = fmt.Sprintf("%s (from %s)", cfg.S3.Credentials, s3store.CredentialSource(cfg.S3))
		if *out == "json" {
			for k, val := range red {
				if d, ok := val.(time.Duration); ok {
					red[k] = d.Seconds()
				}
			}
			return printJSON(c.OutOrStdout(), red)
		}
		keys := make([]string, 0, len(red))
		for k := range red {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%v\n", k, red[k])
		}
		return tw.Flush()
	}
	cmd.AddCommand(show)
	cli.AddConnFlags(cmd)
	return cmd
}

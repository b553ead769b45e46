package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// addOutputFlag registers -o/--output (text or json) and returns its value.
func addOutputFlag(cmd *cobra.Command) *string { return addFormatFlag(cmd, "output") }

// addFormatFlag registers the text|json format flag as -o/--<long> and
// returns its value; `run` uses --format because its --output names a file.
func addFormatFlag(cmd *cobra.Command, long string) *string {
	o := new(string)
	cmd.Flags().VarP(&choice{value: o, allowed: []string{"text", "json"}, def: "text"}, long, "o", "output format: text or json")
	*o = "text"
	return o
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

// printJSON writes v as one indented JSON document and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

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

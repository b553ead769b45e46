package main

import (
	"bytes"
	"encoding/json"
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

// addOutputFlag registers -o/--output (text or json) and returns its value.
func addOutputFlag(cmd *cobra.Command) *string { return addFormatFlag(cmd, "output") }

// addFormatFlag registers the text|json format flag as -o/--<long>, whose
// values complete in the shell, and returns its value; `run` uses --format
// because its --output names a file.
func addFormatFlag(cmd *cobra.Command, long string) *string {
	o := new(string)
	formats := []string{"text", "json"}
	cmd.Flags().VarP(&choice{value: o, allowed: formats, def: "text"}, long, "o", "output format: text or json")
	_ = cmd.RegisterFlagCompletionFunc(long, cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp)) // the flag exists
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

// jsonSchemaVersion is the schema_version of every JSON document the CLI
// prints: raised when a field changes meaning or type or goes away (adding
// a field does not raise it). docs/cli.md "JSON output".
const jsonSchemaVersion = 1

// printJSON writes v, which must encode as a JSON object, as one indented
// JSON document and a newline, with "schema_version" first.
func printJSON(w io.Writer, v any) error { return writeJSON(w, v, "  ") }

// writeJSON is printJSON with indent ("" for one line per document, the
// form of a stream such as `watch`).
func writeJSON(w io.Writer, v any, indent string) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := bytes.TrimSpace(body.Bytes())
	if len(b) < 2 || b[0] != '{' {
		return fmt.Errorf("json output: %T is not an object", v)
	}
	doc := fmt.Appendf(nil, `{"schema_version":%d`, jsonSchemaVersion)
	if len(b) > 2 {
		doc = append(doc, ',')
	}
	doc = append(doc, b[1:]...)
	var out bytes.Buffer
	if indent == "" {
		out.Write(doc)
	} else if err := json.Indent(&out, doc, "", indent); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
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

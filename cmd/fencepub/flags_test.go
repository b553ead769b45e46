package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/spf13/cobra"
)

// TestTypoSuggestions: a mistyped flag or command is a usage error that
// names the nearest one, as cobra suggests commands.
func TestTypoSuggestions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"publish", "--resouce", "r"}, "did you mean --resource?"},
		{[]string{"run", "--max-wiat", "1s", "--", "true"}, "did you mean --max-wait?"},
		{[]string{"pointer", "--timout", "1s"}, "did you mean --timeout?"},
		{[]string{"publsh"}, "did you mean publish?"},
		{[]string{"authority", "aquire"}, "did you mean acquire?"},
	} {
		_, errs, code := runCLI(t, tc.args...)
		if code != exitcode.Usage || !strings.Contains(errs, tc.want) {
			t.Errorf("fencepub %s: exit %d, stderr %q; want 2 with %q", strings.Join(tc.args, " "), code, errs, tc.want)
		}
	}
}

// noResult are the runnable commands that report no result, so take no
// -o: the local stack's start and stop, and the long-running GC daemon
// (its state is on /healthz and /metrics).
var noResult = map[string]bool{"fencepub dev up": true, "fencepub dev down": true, "fencepub gc daemon": true}

// TestEveryResultCommandTakesJSON walks the command tree: every command
// that reports a result takes -o/--output text|json, and with -o json a
// failure before the command could print anything (here an unknown flag)
// still prints a JSON document on stdout with the error and the exit code.
func TestEveryResultCommandTakesJSON(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.HasSubCommands() || c.Hidden || noResult[c.CommandPath()] || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.Flags().Lookup(cli.OutputFlag) == nil || c.Flags().ShorthandLookup("o") == nil {
			t.Errorf("%s has no -o/--output", c.CommandPath())
			return
		}
		args := append(strings.Fields(c.CommandPath())[1:], "-o", "json", "--no-such-flag")
		out, errs, code := runCLI(t, args...)
		var doc cli.ErrorOutput
		if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitcode.Usage || doc.ExitCode != code || doc.Command != c.CommandPath() ||
			!strings.Contains(doc.Error, "no-such-flag") || !strings.Contains(out, `"schema_version": 1`) {
			t.Errorf("%s -o json with an unknown flag: exit %d, stdout %q (%v), stderr %q; want 2 and the JSON error document", c.CommandPath(), code, out, err, errs)
		}
	}
	walk(newRootCmd())
}

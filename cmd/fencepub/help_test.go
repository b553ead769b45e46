package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelpExamples parses every example line a command's --help shows
// (the fencepub part, before a pipe or a redirection) against the real
// command tree, and requires one on the commands operators use to find
// things.
func TestHelpExamples(t *testing.T) {
	want := map[string]bool{"ls": true, "history": true, "read": true, "pointer": true, "watch": true, "rollback": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Example == "" {
			if want[c.Name()] {
				t.Errorf("%s --help shows no example", c.CommandPath())
			}
			return
		}
		for _, line := range strings.Split(c.Example, "\n") {
			line, _, _ = strings.Cut(line, "|")
			line, _, _ = strings.Cut(line, ">")
			argv := strings.Fields(line)
			if len(argv) < 2 || argv[0] != "fencepub" {
				t.Errorf("%s: example %q is not a fencepub command", c.CommandPath(), line)
				continue
			}
			checkInvocation(t, c.CommandPath()+" example", argv[1:])
		}
	}
	walk(newRootCmd())
}

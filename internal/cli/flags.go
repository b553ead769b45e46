package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// deprecatedAnnotation marks a flag Deprecate hid; its value is what to
// use instead.
const deprecatedAnnotation = "fencepub_deprecated"

// Deprecate hides flag name of fs from help and completion and makes every
// use of it log a warning naming instead, through the command's logger on
// stderr (warnDeprecated). The flag keeps working. pflag's own
// MarkDeprecated is not used: cobra prints its notice on the command's
// output stream, which is stdout once a program sets one, and would break
// -o json documents and JSON log lines.
func Deprecate(fs *pflag.FlagSet, name, instead string) {
	if fl := fs.Lookup(name); fl != nil {
		fl.Hidden = true
		_ = fs.SetAnnotation(name, deprecatedAnnotation, []string{instead}) // the flag exists
	}
}

// warnDeprecated logs one warning for each flag of c that Deprecate marked
// and the command line used.
func warnDeprecated(c *cobra.Command) {
	c.Flags().Visit(func(fl *pflag.Flag) {
		if instead := fl.Annotations[deprecatedAnnotation]; len(instead) == 1 {
			Logger(c).Warn("a flag is deprecated and will be removed", "flag", "--"+fl.Name, "instead", instead[0])
		}
	})
}

// maxSuggestDistance is the largest edit distance at which a flag is
// suggested for an unknown one (cobra's default for commands).
const maxSuggestDistance = 2

// flagError is every command's FlagErrorFunc: a flag that does not parse
// is a usage error (exit 2), and an unknown long flag gets the nearest
// visible flag of c as a suggestion ("did you mean --resource?"), as
// cobra suggests commands.
func flagError(c *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if errors.As(err, &ne) && ne.GetSpecifiedShortnames() == "" {
		if s := suggestFlag(c, ne.GetSpecifiedName()); s != "" {
			err = fmt.Errorf("%w (did you mean --%s?)", err, s)
		}
	}
	return exitcode.With(exitcode.Usage, err)
}

// suggestFlag returns the visible flag of c nearest to name: one that name
// is a prefix of, or within maxSuggestDistance edits; "" when none is.
func suggestFlag(c *cobra.Command, name string) string {
	best, bestDist := "", maxSuggestDistance+1
	c.Flags().VisitAll(func(fl *pflag.Flag) {
		if fl.Hidden {
			return
		}
		d := levenshtein.ComputeDistance(strings.ToLower(name), fl.Name)
		if strings.HasPrefix(fl.Name, name) {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = fl.Name, d
		}
	})
	return best
}

// unknownCommand is the usage error of a command group given an unknown
// subcommand, with cobra's suggestions for it.
func unknownCommand(c *cobra.Command, name string) error {
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = maxSuggestDistance // cobra's own default, set where it suggests
	}
	hint := ""
	if s := c.SuggestionsFor(name); len(s) > 0 {
		hint = fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return exitcode.Usagef("unknown command %q for %q%s; see '%s --help'", name, c.CommandPath(), hint, c.CommandPath())
}

package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/spf13/cobra"
)

// Prepare applies the exit-code conventions of every fencepub binary to
// the command tree under root, once its subcommands are added: bad flags
// (an unparsable --ttl, an unknown flag: flagError, which suggests the
// nearest flag) and positional-argument errors are usage errors, exit 2
// (strictArgs, which suggests the nearest command), an etcd permission error anywhere
// in a command's error chain exits 2 with the setup-roles hint
// (explainPermissions), and an unavailable object store names what to
// check (explainStore). It adds --log-format and --log-level to every
// command and builds each command's logger before it runs (Logger).
// README "Exit codes", docs/cli.md "Logs".
func Prepare(root *cobra.Command) {
	addLogFlags(root)
	root.PersistentPreRunE = setLogger
	// cobra hands this function down to every subcommand.
	root.SetFlagErrorFunc(flagError)
	strictArgs(root)
	explainPermissions(root)
	explainStore(root)
}

// Main runs root (Execute) with a context that SIGINT and SIGTERM cancel,
// logs the returned error at error level with its exit code (Report:
// through the command's logger, so in JSON mode as one JSON line on
// stderr), and exits the process with ExitCode. It does not return.
func Main(root *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c, code, err := Execute(ctx, root, os.Args[1:])
	stop()
	Report(c, os.Stderr, os.Args[1:], code, err)
	os.Exit(code)
}

// Report logs err, the error a run of c with args ended with (nil: nothing
// to report), at error level with its exit code on w: through c's logger,
// or the one args and the configuration ask for when c's flags did not
// parse (errorLogger); the text is Message's.
func Report(c *cobra.Command, w io.Writer, args []string, code int, err error) {
	if err != nil {
		errorLogger(c, w, args).Error(Message(err), "exit_code", code)
	}
}

// ExitCode is the process exit code of a command's error: its exitcode
// (README "Exit codes"), 130 for an internal error after an interrupt
// (interrupted: the command's context was cancelled), and 2 for
// credentials the object store refused, a failed TLS handshake with it or
// an s3.endpoint that is not an S3 store (configuration problems; the
// message names the key).
func ExitCode(err error, interrupted bool) int {
	code := exitcode.Of(err)
	switch {
	case interrupted && code == exitcode.Internal:
		return exitcode.Interrupted
	case code == exitcode.Internal && (errors.Is(err, objstore.ErrAccessDenied) || errors.Is(err, objstore.ErrTLS) || errors.Is(err, objstore.ErrInvalidConfig)):
		return exitcode.Usage
	}
	return code
}

// strictArgs makes every positional-argument error a usage error (exit 2):
// a command group given an unknown subcommand reports it, with cobra's
// suggestions, instead of printing help with exit 0, and a command's own Args check (cobra.ExactArgs, ...)
// keeps its message but exits 2 instead of 1.
func strictArgs(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		strictArgs(c)
	}
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(c, args[0])
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

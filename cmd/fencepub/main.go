// Command fencepub publishes batch results through an object store so that a
// paused or stale worker can never overwrite a newer result. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/objstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	interrupted := ctx.Err() != nil
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencepub:", err)
	}
	os.Exit(exitCode(err, interrupted))
}

// exitCode is the process exit code of the command's error: its exitcode
// (README "Exit codes"), 130 for an internal error after an interrupt, and
// 2 for credentials the object store refused or a failed TLS handshake
// with it (configuration problems; the message names the key).
func exitCode(err error, interrupted bool) int {
	code := exitcode.Of(err)
	switch {
	case interrupted && code == exitcode.Internal:
		return exitcode.Interrupted
	case code == exitcode.Internal && (errors.Is(err, objstore.ErrAccessDenied) || errors.Is(err, objstore.ErrTLS)):
		return exitcode.Usage
	}
	return code
}

// Command fencepub publishes batch results through an object store so that a
// paused or stale worker can never overwrite a newer result. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencepub/fencepub/internal/exitcode"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	interrupted := ctx.Err() != nil
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fencepub:", err)
	}
	code := exitcode.Of(err)
	if interrupted && code == exitcode.Internal {
		code = exitcode.Interrupted
	}
	os.Exit(code)
}

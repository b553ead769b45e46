package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/reader"
	"github.com/spf13/cobra"
)

// readerExitHelp is the exit-code table of pointer, read and watch.
const readerExitHelp = `Exit codes: 0 success, 1 internal error or a data problem (a corrupt pointer;
for read also: nothing published, the object missing, bytes not matching the
pointer's sha256), 2 usage, 115 etcd or the object store unavailable, 116
nothing published because etcd holds none of the bucket's history (an empty
replacement etcd: see authority recover --from-bucket).`

// pointerOutput is the JSON of `fencepub pointer` and of each `fencepub
// watch` line: the resource, whether anything is published, and the pointer
// (version, object, idempotency key, digest, ...).
type pointerOutput struct {
	Resource  string `json:"resource"`
	Published bool   `json:"published"`
	layout.Pointer
	Revision int64  `json:"revision,omitempty"`
	Resync   bool   `json:"resync,omitempty"`
	Error    string `json:"error,omitempty"`
}

// openReader connects and builds a Reader of resource (stall: its
// Config.StallTimeout; pointer reads need none).
func openReader(cmd *cobra.Command, resource string, serializable bool, stall time.Duration) (*reader.Reader, *cli.Env, error) {
	env, err := cli.OpenEnv(cmd)
	if err != nil {
		return nil, nil, err
	}
	r, err := reader.New(reader.Config{Env: env.Domain(), Logger: env.Log, Serializable: serializable, StallTimeout: stall, RequestTimeout: env.Config.Etcd.RequestTimeout}, resource)
	if err != nil {
		env.Close()
		return nil, nil, readerExit(err)
	}
	return r, env, nil
}

// explainNotPublished returns, for a resource with nothing published, the
// exit-116 error when etcd holds none of the history the bucket holds (an
// empty replacement etcd, or a second cluster pointed at the bucket:
// DESIGN.md invariant 9), so that readers are not told "nothing published"
// about a domain whose data is in the bucket. A check that fails otherwise
// (a reader's keys may not list the bucket) changes nothing: it returns
// nil, and the answer stays "nothing published".
func explainNotPublished(ctx context.Context, env *cli.Env) error {
	a, err := authority.New(env.AuthorityConfig())
	if err != nil {
		return nil
	}
	if err := a.CheckHistory(ctx); errors.Is(err, authority.ErrForeignHistory) {
		return authorityExit(err)
	}
	return nil
}

// readerExit attaches the exit code of a reader error.
func readerExit(err error) error {
	code := exitcode.Internal
	var ee *exitcode.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return err
	case errors.Is(err, fencepub.ErrInvalid), errors.Is(err, fencepub.ErrInvalidName):
		code = exitcode.Usage
	case errors.Is(err, fencepub.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		code = exitcode.Unavailable
	}
	return exitcode.With(code, err)
}

// newPointerCmd builds `fencepub pointer`.
func newPointerCmd() *cobra.Command {
	var (
		resource     string
		serializable bool
		timeout      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "pointer --resource R",
		Short: "Show a resource's published pointer",
		Long: `pointer prints the resource's published version and object (bucket, key,
sha256, ETag, size). "published" is false, with exit code 0, while nothing has
been published. The read is linearizable unless --serializable.

` + readerExitHelp,
		Args: noArgs,
	}
	cmd.Flags().StringVar(&resource, "resource", "", "resource name (required)")
	cmd.Flags().BoolVar(&serializable, "serializable", false, "read from the local etcd member without a quorum round (may be stale)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "deadline")
	_ = cmd.MarkFlagRequired("resource")
	out := addOutputFlag(cmd)
	cli.AddConnFlags(cmd)
	usageErrors(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if err := positive("timeout", timeout); err != nil {
			return err
		}
		r, env, err := openReader(c, resource, serializable, 0)
		if err != nil {
			return err
		}
		defer env.Close()
		ctx, cancel := context.WithTimeout(c.Context(), timeout)
		defer cancel()
		ptr, err := r.Current(ctx)
		if err != nil && !errors.Is(err, reader.ErrNotPublished) {
			return readerExit(err)
		}
		if err != nil {
			if herr := explainNotPublished(ctx, env); herr != nil {
				return herr
			}
		}
		o := pointerOutput{Resource: resource, Published: err == nil, Pointer: ptr}
		if *out == "json" {
			return printJSON(c.OutOrStdout(), o)
		}
		if !o.Published {
			fmt.Fprintf(c.OutOrStdout(), "%s: nothing published\n", resource)
			return nil
		}
		fmt.Fprintf(c.OutOrStdout(), "%s %s %s/%s sha256=%s size=%d key=%q committed_at=%s\n", resource, ptr.Version,
			ptr.Object.Bucket, ptr.Object.Key, ptr.Object.SHA256, ptr.Object.Size, ptr.IdempotencyKey, ptr.CommittedAt.Format(time.RFC3339Nano))
		return nil
	}
	return cmd
}

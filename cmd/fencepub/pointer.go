package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/reader"
	"github.com/spf13/cobra"
)

// readerExitHelp is the exit-code table of pointer, read, watch, ls and
// history.
const readerExitHelp = `Exit codes: 0 success, 1 internal error or a data problem (a corrupt pointer;
for read also: nothing published, the object missing, bytes not matching the
pointer's sha256), or a resource never granted in the domain (a misspelt
name; --allow-missing accepts it where the command has the flag), 2 usage
(for read --version also: a version that is not retained), 115 etcd or the
object store unavailable, 116 nothing published because etcd holds none of
the bucket's history (an empty replacement etcd: see authority recover
--from-bucket).`

// pointerOutput is the JSON of `fencepub pointer` and of each `fencepub
// watch` line: the resource, whether anything is published, and the pointer
// (version, object, idempotency key, digest, ...).
type pointerOutput struct {
	Resource  string `json:"resource"`
	Published bool   `json:"published"`
	// NeverGranted is true, with --allow-missing, for a resource never
	// granted in the domain (reader.ErrUnknownResource).
	NeverGranted bool `json:"never_granted,omitempty"`
	layout.Pointer
	Revision int64  `json:"revision,omitempty"`
	Resync   bool   `json:"resync,omitempty"`
	Error    string `json:"error,omitempty"`
}

// openReader connects and builds a Reader of resource (stall: its
// Config.StallTimeout; pointer reads need none). ctx is the command's
// deadline, which connecting counts against (cli.OpenEnvContext), or cmd's
// own context for a command without one (cli.OpenEnv).
func openReader(ctx context.Context, cmd *cobra.Command, resource string, serializable bool, stall time.Duration) (*reader.Reader, *cli.Env, error) {
	open := func() (*cli.Env, error) { return cli.OpenEnvContext(ctx, cmd) }
	if ctx == cmd.Context() {
		open = func() (*cli.Env, error) { return cli.OpenEnv(cmd) }
	}
	env, err := open()
	if err != nil {
		return nil, nil, err
	}
	cfg := readerConfig(env)
	cfg.Serializable, cfg.StallTimeout = serializable, stall
	r, err := reader.New(cfg, resource)
	if err != nil {
		env.Close()
		return nil, nil, readerExit(err)
	}
	return r, env, nil
}

// unpublishedState words the state of a resource with nothing published
// (reader.ErrNotPublished): never granted in the domain
// (reader.ErrUnknownResource, often a misspelt name), or granted with
// nothing published yet.
func unpublishedState(neverGranted bool) string {
	if neverGranted {
		return "never granted or published"
	}
	return "granted, nothing published yet"
}

// readerConfig is the reader.Config of env (its domain, logger and
// etcd.request_timeout).
func readerConfig(env *cli.Env) reader.Config {
	return reader.Config{Env: env.Domain(), Logger: env.Log, RequestTimeout: env.Config.Etcd.RequestTimeout}
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
	if err := operator.CheckHistory(ctx, a); errors.Is(err, authority.ErrForeignHistory) {
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
	var serializable bool
	cmd := &cobra.Command{
		Use:   "pointer --resource R [--resource R2...]",
		Short: "Show a resource's published pointer",
		Long: `pointer prints the resource's published version and object (bucket, key,
sha256, ETag, size). "published" is false, with exit code 0, while a granted
resource has nothing published yet. A resource never granted in the domain
(a misspelt name) is an error, exit 1, unless --allow-missing, which prints
it as not published ("never_granted": true). The read is linearizable unless
--serializable.

Several --resource read every pointer in one etcd transaction, at one
revision, so the members of a group publish (docs/groups.md) are never seen
torn: one line per resource, or with -o json {"revision": R, "pointers":
[...]} with one pointer document per resource, in the order given. There
every resource must have been granted (no --allow-missing) and the read is
linearizable (no --serializable).

` + readerExitHelp,
		Example: `  fencepub pointer --resource nightly-report
  fencepub pointer --resource nightly-report -o json | jq -r .version
  fencepub pointer --resource report --resource breakdown -o json`,
		Args: noArgs,
	}
	f := addResourcesRead(cmd)
	cmd.Flags().BoolVar(&serializable, "serializable", false, "read from the local etcd member without a quorum round (may be stale)")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if len(f.resources) > 1 {
			return readCut(c, f, serializable)
		}
		f.resource = f.resources[0]
		var ptr fencepub.Pointer
		err, ferr := f.read(c, serializable, func(ctx context.Context, r *reader.Reader) (err error) {
			ptr, err = r.Current(ctx)
			return err
		})
		if ferr != nil {
			return ferr
		}
		if err != nil && !errors.Is(err, reader.ErrNotPublished) {
			return readerExit(err)
		}
		o := pointerOutput{Resource: f.resource, Published: err == nil, NeverGranted: errors.Is(err, reader.ErrUnknownResource), Pointer: ptr}
		if *f.out == "json" {
			return printJSON(c.OutOrStdout(), o)
		}
		if !o.Published {
			fmt.Fprintf(c.OutOrStdout(), "%s: %s\n", f.resource, unpublishedState(o.NeverGranted))
			return nil
		}
		printPointer(c.OutOrStdout(), f.resource, ptr)
		return nil
	}
	return cmd
}

// cutOutput is the JSON of `fencepub pointer` with several --resource: the
// revision read at and each resource's pointer.
type cutOutput struct {
	Revision int64           `json:"revision"`
	Pointers []pointerOutput `json:"pointers"`
}

// readCut reads the pointers of f.resources at one etcd revision
// (reader.ReadCut) and prints them.
func readCut(c *cobra.Command, f *resourceRead, serializable bool) error {
	switch {
	case serializable:
		return exitcode.Usagef("--serializable reads one resource; several are read at one revision, linearizably")
	case *f.allowMissing:
		return exitcode.Usagef("--allow-missing reads one resource; several must all have been granted")
	}
	if err := positive("timeout", f.timeout); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context(), f.timeout)
	defer cancel()
	env, err := cli.OpenEnvContext(ctx, c)
	if err != nil {
		return err
	}
	defer env.Close()
	cut, err := reader.ReadCut(ctx, readerConfig(env), f.resources...)
	if err != nil {
		if merr := missingResource(ctx, env, err, false); merr != nil {
			return merr
		}
		return readerExit(err)
	}
	out := cutOutput{Revision: cut.Revision}
	for _, res := range f.resources {
		ptr := cut.Pointers[res]
		out.Pointers = append(out.Pointers, pointerOutput{Resource: res, Published: !ptr.Version.IsZero(), Pointer: ptr, Revision: cut.Revision})
	}
	if *f.out == "json" {
		return printJSON(c.OutOrStdout(), out)
	}
	for _, o := range out.Pointers {
		if !o.Published {
			fmt.Fprintf(c.OutOrStdout(), "%s: %s\n", o.Resource, unpublishedState(false))
			continue
		}
		printPointer(c.OutOrStdout(), o.Resource, o.Pointer)
	}
	return nil
}

// printPointer prints the text line of res's published pointer.
func printPointer(w io.Writer, res string, ptr fencepub.Pointer) {
	fmt.Fprintf(w, "%s %s %s/%s sha256=%s size=%d key=%q committed_at=%s\n", res, ptr.Version,
		ptr.Object.Bucket, ptr.Object.Key, ptr.Object.SHA256, ptr.Object.Size, ptr.IdempotencyKey, ptr.CommittedAt.Format(time.RFC3339Nano))
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/reader"
	"github.com/spf13/cobra"
)

// historyOutput is `fencepub history -o json`: the retained versions,
// oldest first, each in the shape of `fencepub pointer -o json`'s pointer.
type historyOutput struct {
	Resource string `json:"resource"`
	// NeverGranted is true, with --allow-missing, for a resource never
	// granted in the domain.
	NeverGranted bool               `json:"never_granted,omitempty"`
	Versions     []fencepub.Pointer `json:"versions"`
}

// newHistoryCmd builds `fencepub history`.
func newHistoryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history --resource R",
		Short: "List a resource's retained versions: those read --version and rollback --to take",
		Long: `history lists the resource's retained versions, oldest first: the versions
GC keeps (the last gc.retain, and those superseded less than the reader grace
plus the clock skew ago), each with its size, sha256, owner, idempotency key
and commit time (the publisher's clock, informative); the last one is the
current version. 'fencepub read --version V' reads one, verified like the
current one, and 'fencepub rollback --to V' publishes its content again.
With -o json each version has the shape of 'fencepub pointer -o json'
(version, object with bucket, key, sha256, etag and size, idempotency_key,
digest: the request digest, content_type, owner, committed_at).

A resource never granted in the domain is an error, exit 1, unless
--allow-missing.

` + readerExitHelp,
		Example: `  fencepub history --resource nightly-report
  fencepub history --resource nightly-report -o json | jq -r '.versions[].version | "\(.epoch).\(.fence).\(.seq)"'`,
		Args: noArgs,
	}
	f := addResourceRead(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		var hist []fencepub.Pointer
		err, ferr := f.read(c, false, func(ctx context.Context, r *reader.Reader) (err error) {
			hist, err = r.History(ctx)
			return err
		})
		if ferr != nil {
			return ferr
		}
		o := historyOutput{Resource: f.resource, NeverGranted: errors.Is(err, reader.ErrUnknownResource), Versions: hist}
		if err != nil && !o.NeverGranted {
			return readerExit(err)
		}
		if *f.out == "json" {
			return printJSON(c.OutOrStdout(), o)
		}
		return printHistory(c.OutOrStdout(), o)
	}
	return cmd
}

// printHistory writes the text form of `fencepub history`.
func printHistory(w io.Writer, o historyOutput) error {
	switch {
	case o.NeverGranted:
		_, err := fmt.Fprintf(w, "%s: never granted or published\n", o.Resource)
		return err
	case len(o.Versions) == 0:
		_, err := fmt.Fprintf(w, "%s: no version is retained\n", o.Resource)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSIZE\tSHA256\tOWNER\tIDEMPOTENCY_KEY\tCOMMITTED_AT")
	for _, p := range o.Versions {
		at := "-"
		if !p.CommittedAt.IsZero() {
			at = p.CommittedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.Version, p.Object.Size, p.Object.SHA256, p.Owner, p.IdempotencyKey, at)
	}
	return tw.Flush()
}

// maxListed bounds how many retained versions an error message names.
const maxListed = 20

// notRetained returns err, about a version of r's resource that has no
// history entry, as a usage error (exit 2) that names the versions that
// are retained (the newest maxListed), read with r.History: what `read
// --version` and `rollback --to` may take. A resource never granted is
// said so instead.
func notRetained(ctx context.Context, r *reader.Reader, resource string, err error) error {
	hist, herr := r.History(ctx)
	switch {
	case errors.Is(herr, reader.ErrUnknownResource):
		return exitcode.With(exitcode.Usage, herr)
	case herr != nil:
		return exitcode.With(exitcode.Usage, fmt.Errorf("%w (the retained versions could not be listed: %v)", err, herr))
	case len(hist) == 0:
		return exitcode.With(exitcode.Usage, fmt.Errorf("%w; no version of %q is retained", err, resource))
	}
	names := make([]string, 0, min(len(hist), maxListed))
	for _, p := range hist[max(0, len(hist)-maxListed):] {
		names = append(names, p.Version.String())
	}
	more := ""
	if len(hist) > maxListed {
		more = " and " + strconv.Itoa(len(hist)-maxListed) + " older"
	}
	return exitcode.With(exitcode.Usage, fmt.Errorf("%w; retained: %s%s (fencepub history --resource %s)",
		err, strings.Join(names, ", "), more, resource))
}

package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/reader"
)

// lsFiles fills e.Files with the manifest of e's dataset version, or of
// its retained version (epoch.fence.seq) when version is set, which then
// replaces e's pointer; it does nothing for a single object. Errors: a
// version that is not retained (exit 2, naming those that are).
func lsFiles(ctx context.Context, env *cli.Env, e *lsEntry, version string) error {
	r, err := reader.New(readerConfig(env), e.Resource)
	if err != nil {
		return readerExit(err)
	}
	if version != "" {
		v, err := parseVersion(version)
		if err != nil {
			return err
		}
		hist, err := r.History(ctx)
		if err != nil {
			return readerExit(err)
		}
		i := slices.IndexFunc(hist, func(p fencepub.Pointer) bool { return p.Version == v })
		if i < 0 {
			return notRetained(ctx, r, e.Resource, fmt.Errorf("%w: version %s of %q", reader.ErrNotRetained, v, e.Resource))
		}
		e.Pointer = hist[i]
	}
	if !e.Pointer.IsDataset() {
		return nil
	}
	e.Files = []reader.FileInfo{}
	for f, err := range r.Files(ctx, e.Pointer) {
		if err != nil {
			return readerExit(err)
		}
		e.Files = append(e.Files, f)
	}
	return nil
}

// printFiles writes the files of the dataset versions among es: path, size
// and sha256, one row each.
func printFiles(w io.Writer, es []lsEntry) error {
	for _, e := range es {
		if e.Files == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s %s: %d files, %d bytes\n", e.Resource, e.Version, e.Pointer.Files, e.Pointer.Bytes)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PATH\tSIZE\tSHA256")
		for _, f := range e.Files {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", f.Path, f.Size, f.SHA256)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

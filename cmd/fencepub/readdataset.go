package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/reader"
	"github.com/spf13/cobra"
)

// datasetPointer returns the pointer of the dataset version a
// single-object read refused (reader.ErrIsDataset): the current one when v
// is zero, else v's history entry.
func datasetPointer(ctx context.Context, r *reader.Reader, v fencepub.Version) (fencepub.Pointer, error) {
	if v.IsZero() {
		return r.Current(ctx)
	}
	hist, err := r.History(ctx)
	if err != nil {
		return fencepub.Pointer{}, err
	}
	for _, p := range hist {
		if p.Version == v {
			return p, nil
		}
	}
	return fencepub.Pointer{}, fmt.Errorf("%w: %s", reader.ErrNotRetained, v)
}

// readDataset is `read` of a dataset version (ptr): with --path one file
// (to stdout or --out FILE, as a single object is read), else the whole
// version of resource into --out DIR (readDir). With format json it prints the
// readOutput.
func readDataset(ctx context.Context, c *cobra.Command, r *reader.Reader, resource string, ptr fencepub.Pointer, path, out, format string) error {
	if !ptr.IsDataset() {
		return exitcode.Usagef("--path %q: version %s is a single object, not a dataset", path, ptr.Version)
	}
	if path == "" {
		if out == "" || out == "-" {
			return exitcode.Usagef("version %s is a dataset of %d files: give --path P for one file, or --out DIR for all of them", ptr.Version, ptr.Files)
		}
		files, bytes, err := readDir(ctx, c, r, ptr, out)
		if err != nil || format != "json" {
			return err
		}
		return printJSON(c.OutOrStdout(), readOutput{Resource: resource, Pointer: ptr, Bytes: bytes, File: out, ReadFiles: files})
	}
	body, err := r.OpenPointerFile(ctx, ptr, path)
	if err != nil {
		return readerExit(err)
	}
	defer body.Close()
	var n int64
	if out == "" || out == "-" {
		n, err = io.Copy(c.OutOrStdout(), body)
	} else {
		n, err = copyToFile(out, body)
	}
	if err != nil {
		return readerExit(fmt.Errorf("file %q: %w", path, err))
	}
	cli.Logger(c).Info("read: sha256 verified", "version", ptr.Version.String(), "path", path, "bytes", n, "sha256", body.Pointer.Object.SHA256)
	if format == "json" {
		return printJSON(c.OutOrStdout(), readOutput{Resource: resource, Pointer: body.Pointer, Bytes: n, File: out, Path: path})
	}
	return nil
}

// readDir writes every file of ptr's dataset under a temporary directory
// beside dir and renames it to dir only once every file was read to its end
// and verified; on any failure the temporary directory is removed, so a
// half-read dataset never appears under dir. dir must not exist, or be an
// empty directory (replaced). Memory holds one manifest page. It returns
// the files and bytes written.
func readDir(ctx context.Context, c *cobra.Command, r *reader.Reader, ptr fencepub.Pointer, dir string) (files, bytes int64, err error) {
	dir = filepath.Clean(dir)
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return 0, 0, exitcode.Usagef("--out %s is a directory that is not empty; give a new or empty directory", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, exitcode.Usagef("--out %s: %v", dir, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".fencepub-read-*")
	if err != nil {
		return 0, 0, exitcode.With(exitcode.Usage, fmt.Errorf("--out %s: %w", dir, err))
	}
	defer func() { _ = os.RemoveAll(tmp) }() // a no-op once renamed
	for f, err := range r.Files(ctx, ptr) {
		if err != nil {
			return 0, 0, readerExit(err)
		}
		n, err := readFileTo(ctx, r, ptr, f.Path, filepath.Join(tmp, filepath.FromSlash(f.Path)))
		if err != nil {
			return 0, 0, readerExit(fmt.Errorf("file %q: %w", f.Path, err))
		}
		files++
		bytes += n
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, exitcode.Usagef("--out %s: %v", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return 0, 0, exitcode.With(exitcode.Usage, fmt.Errorf("--out %s: %w", dir, err))
	}
	cli.Logger(c).Info("read: every file's sha256 verified", "version", ptr.Version.String(), "files", files, "bytes", bytes, "dir", dir)
	return files, bytes, nil
}

// readFileTo copies the verified file at path of ptr's dataset to dst
// (creating its directories) and returns its length.
func readFileTo(ctx context.Context, r *reader.Reader, ptr fencepub.Pointer, path, dst string) (int64, error) {
	body, err := r.OpenPointerFile(ctx, ptr, path)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// isDir reports whether path is an existing directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

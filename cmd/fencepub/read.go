package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/reader"
	"github.com/google/renameio/v2"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// newReadCmd builds `fencepub read`.
func newReadCmd() *cobra.Command {
	var (
		resource, out, version string
		path                   string // a dataset file (readdataset.go)
		serializable           bool
		timeout, stall         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "read --resource R [--version V] [--path P] [--out FILE|DIR [-o json]]",
		Short: "Read a resource's published object, verified against the pointer",
		Long: `read fetches the object the resource's pointer names (GET conditioned on the
pointer's ETag) and checks its sha256 and size while streaming. The bucket is
the one the pointer names, whatever s3.bucket says.

With --out FILE the bytes go to a temporary file, which is renamed over FILE
only after the check passed: FILE never holds unverified bytes. An existing
FILE keeps its permissions (a new one gets 0666 less the umask), and a
symlink is written through, not replaced. Without
--out the bytes stream to stdout as they arrive; on a mismatch the command fails
after writing them, so a consumer of stdout must check the exit code.

With --version V ("epoch.fence.seq", as 'fencepub history' lists them) it
reads that retained version instead of the current one, verified the same
way: GET conditioned on the ETag its history entry names, sha256 and size
checked. A version that is not retained (never published, or collected by GC)
is refused with exit 2, naming the versions that are.

A dataset version (published with 'publish --dir') is read one file at a time
with --path P (to stdout or --out FILE, verified the same way), or whole with
--out DIR: the files go to a temporary directory beside DIR, which is renamed
to DIR only once every file was verified, so a half-read dataset never
appears under DIR. DIR must not exist or be empty.

With -o json (which needs --out: stdout carries the document) it prints what
was read: the resource, the pointer (version, object, sha256, size), the
bytes written (with --path, the file's path; with --out DIR, the number of
files), or on failure {"command", "error", "exit_code"}. --timeout bounds the
whole command, connecting included.

` + readerExitHelp,
		Example: `  fencepub read --resource nightly-report --out report.csv
  fencepub read --resource nightly-report --version 1.4.1 > report-1.4.1.csv`,
		Args: noArgs,
	}
	cmd.Flags().StringVar(&resource, "resource", "", "resource name (required)")
	cmd.Flags().StringVar(&out, "out", "", "write to FILE (atomically, after verification) instead of stdout")
	cmd.Flags().BoolVar(&serializable, "serializable", false, "read the pointer from the local etcd member without a quorum round")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "deadline for the whole read, transfer included (0: none)")
	cmd.Flags().DurationVar(&stall, "stall-timeout", time.Minute, "give up (exit 115) when the store sends no bytes for this long (0: wait for ever)")
	cmd.Flags().StringVar(&version, "version", "", "read this retained version, epoch.fence.seq (see 'fencepub history'), instead of the current one")
	cmd.Flags().StringVar(&path, "path", "", "read this file of a dataset version")
	_ = cmd.MarkFlagRequired("resource")
	format := addOutputFlag(cmd)
	cli.AddConnFlags(cmd)
	usageErrors(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if timeout < 0 || stall < 0 {
			return exitcode.Usagef("--timeout %s, --stall-timeout %s: want positive durations, or 0 for none", timeout, stall)
		}
		if *format == "json" && (out == "" || out == "-") {
			return exitcode.Usagef("-o json prints the read's JSON on stdout: give --out FILE for the bytes")
		}
		ctx := c.Context()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		var v fencepub.Version
		if c.Flags().Changed("version") {
			parsed, err := parseVersion(version)
			if err != nil {
				return err
			}
			v = parsed
		}
		if out != "" && out != "-" {
			// A directory is a dataset's --out, known once the pointer is read.
			if err := checkOutPath(out); err != nil && (path != "" || !isDir(out)) {
				return err
			}
		}
		r, env, err := openReader(ctx, c, resource, serializable, stall)
		if err != nil {
			return err
		}
		defer env.Close()
		var body *reader.Body
		if v.IsZero() {
			body, err = r.Open(ctx)
		} else {
			body, err = r.OpenVersion(ctx, v)
		}
		if merr := missingResource(ctx, env, err, false); merr != nil {
			return merr
		}
		if errors.Is(err, reader.ErrNotRetained) {
			return notRetained(ctx, r, resource, err)
		}
		if errors.Is(err, reader.ErrIsDataset) {
			ptr, perr := datasetPointer(ctx, r, v)
			if perr != nil {
				return readerExit(perr)
			}
			return readDataset(ctx, c, r, resource, ptr, path, out, *format)
		}
		if err != nil {
			return readerExit(err)
		}
		defer body.Close()
		if path != "" {
			return readDataset(ctx, c, r, resource, body.Pointer, path, out, *format)
		}
		if out != "" && out != "-" {
			if err := checkOutPath(out); err != nil {
				return err
			}
		}
		var src io.Reader = body
		toStdout := out == "" || out == "-"
		var bar *progressbar.ProgressBar
		// No bar while the bytes themselves go to the terminal.
		if _, tty := progressTerminal(c, c.OutOrStdout()); !toStdout || !tty {
			if bar = transferBar(c, c.ErrOrStderr(), "read", body.Pointer.Object.Size); bar != nil {
				src = io.TeeReader(body, bar)
			}
		}
		var n int64
		if toStdout {
			n, err = io.Copy(c.OutOrStdout(), src)
		} else {
			n, err = copyToFile(out, src)
		}
		if bar != nil {
			_ = bar.Finish() // cleared before the outcome is logged
		}
		if err != nil {
			return readerExit(err)
		}
		cli.Logger(c).Info("read: sha256 verified", "resource", resource, "version", body.Pointer.Version.String(),
			"bytes", n, "sha256", body.Pointer.Object.SHA256)
		if *format == "json" {
			return printJSON(c.OutOrStdout(), readOutput{Resource: resource, Pointer: body.Pointer, Bytes: n, File: out})
		}
		return nil
	}
	return cmd
}

// readOutput is `fencepub read -o json`: the resource, the pointer it
// followed, and the verified bytes written to File (a directory for a
// whole dataset version).
type readOutput struct {
	Resource string `json:"resource"`
	fencepub.Pointer
	Bytes int64  `json:"bytes"`
	File  string `json:"file"`
	// Path is the dataset file read (--path); ReadFiles the number of
	// files written to the directory File (--out DIR).
	Path      string `json:"path,omitempty"`
	ReadFiles int64  `json:"files_read,omitempty"`
}

// checkOutPath refuses, before anything is read, an --out path that cannot
// receive a file: a directory, or a file in a directory that does not
// exist. Errors carry exit code 2 and name path.
func checkOutPath(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return exitcode.Usagef("--out %s is a directory; give a file path", path)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return exitcode.Usagef("--out %s: directory %s does not exist", path, dir)
	}
	return nil
}

// copyToFile writes r to a temporary file and renames it over path only
// when r ended without error (the sha256 check happens at EOF), through
// renameio: fsynced, with path's permissions if it exists, else 0666 less
// the umask. A symlink at path is written through, not replaced.
func copyToFile(path string, r io.Reader) (int64, error) {
	if t, err := filepath.EvalSymlinks(path); err == nil {
		path = t
	}
	f, err := renameio.NewPendingFile(path, renameio.WithPermissions(0o666), renameio.WithExistingPermissions())
	if err != nil {
		return 0, exitcode.With(exitcode.Usage, fmt.Errorf("--out %s: %w", path, err))
	}
	defer func() { _ = f.Cleanup() }() // a no-op once replaced
	n, err := io.Copy(f, r)
	if err != nil {
		return n, err
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return n, exitcode.With(exitcode.Usage, fmt.Errorf("--out %s: %w", path, err))
	}
	return n, nil
}

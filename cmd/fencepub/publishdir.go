package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
)

// dirTimeout is --timeout's default with --dir: a directory's uploads take
// longer than one file's, so it is run's --publish-timeout default rather
// than publish's 30s.
const dirTimeout = 5 * time.Minute

// dirFlags are publish's flags for a dataset from a directory (DESIGN.md
// "Dataset versions").
type dirFlags struct {
	dir            string
	followSymlinks bool
	parallel       int
	base           string
}

func (d *dirFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&d.dir, "dir", "", "publish every regular file under DIR as one dataset version (instead of --file)")
	f.BoolVar(&d.followSymlinks, "follow-symlinks", false, "with --dir: publish the regular file a symbolic link points to (refused otherwise)")
	f.IntVar(&d.parallel, "parallel", publisher.DefaultParallel, "with --dir: files uploaded at once")
	f.StringVar(&d.base, "base", string(publisher.BaseCurrent), "with --dir: reuse unchanged files of the current dataset version (current) or upload every file (none)")
}

// validateDir checks the dataset flags against the others, before any I/O.
func (o *publishOptions) validateDir() error {
	d, fl := o.dir, o.cmd.Flags()
	switch {
	case d.dir == "":
		return exitcode.Usagef("--dir is empty")
	case o.body.file != "":
		return exitcode.Usagef("give --dir or --file (or '-'), not both")
	case fl.Changed("content-type") || fl.Changed("meta"):
		return exitcode.Usagef("--content-type and --meta are for --file; a dataset's files are application/octet-stream")
	case fl.Changed("seq"):
		return exitcode.Usagef("--seq is not used with --dir: a dataset takes the grant's next seq")
	case d.parallel < 1:
		return exitcode.Usagef("--parallel %d: want at least 1", d.parallel)
	case d.base != string(publisher.BaseCurrent) && d.base != string(publisher.BaseNone):
		return exitcode.Usagef("--base %q: want current or none", d.base)
	}
	if !fl.Changed("timeout") {
		o.timeout = dirTimeout
	}
	if err := positive("timeout", o.timeout); err != nil {
		return err
	}
	existing, err := o.grant.existing(o.cmd)
	o.existing = existing
	return err
}

// scanDir walks dir as publisher.DirFiles does and returns the number of
// files and their bytes, or the walk's first refusal or error, so that bad
// input is refused before anything is acquired.
func scanDir(dir string, opts publisher.DirOptions) (files, bytes int64, err error) {
	for f, err := range publisher.DirFiles(dir, opts) {
		if err != nil {
			return files, bytes, err
		}
		files++
		bytes += f.Size
	}
	return files, bytes, nil
}

// runDir publishes the directory as a dataset: it walks it first and
// refuses what cannot be published (symbolic links unless followed,
// special files, paths that are not valid UTF-8 or collide, an empty
// directory unless --allow-empty) before acquiring anything, then binds
// the grant and calls PublishDataset, all within --timeout as publish of
// a file is (Run).
func (o *publishOptions) runDir(c *cobra.Command) error {
	d := o.dir
	opts := publisher.DirOptions{FollowSymlinks: d.followSymlinks}
	files, bytes, err := scanDir(d.dir, opts)
	if err != nil {
		return exitcode.With(exitcode.Usage, fmt.Errorf("--dir %s: %w; nothing published", d.dir, err))
	}
	if files == 0 && !o.allowEmpty {
		return exitcode.Usagef("--dir %s holds no files; nothing published (pass --allow-empty to publish an empty dataset)", d.dir)
	}
	if err := layout.ValidateKey("idempotency key", o.key); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
	defer cancel()
	lc, err := cli.LoadConfig(c)
	if err != nil {
		return err
	}
	work, wcancel := workContext(ctx, lc.Config, o.timeout, !o.existing)
	defer wcancel()
	env, err := cli.ConnectContext(work, c, lc)
	if err != nil {
		return err
	}
	defer env.Close()
	client, bar, err := progressClient(c, env, fmt.Sprintf("publish 0/%d files", files), bytes)
	if err != nil {
		return err
	}
	p, done, res, err := o.grant.bind(work, ctx, c, env, client)
	if err != nil {
		return reportResult(c, *o.format, "publish", res, err)
	}
	defer done()
	ds := publisher.Dataset{IdempotencyKey: o.key, Files: publisher.DirFiles(d.dir, opts), Base: publisher.Base(d.base), Parallel: d.parallel}
	if bar != nil {
		var n int64
		ds.Progress = func(f publisher.FileDone) {
			n++
			if f.Reused { // reused bytes are not sent, but count as done
				_ = bar.Add64(f.Size)
			}
			bar.Describe(fmt.Sprintf("publish %d/%d files", n, files))
		}
	}
	r, err := p.PublishDataset(work, ds)
	if bar != nil {
		_ = bar.Finish()
	}
	if r.Outcome != "" {
		cli.Logger(c).Info("publish dataset", "files", r.Files, "bytes", r.Bytes, "uploaded_files", r.UploadedFiles,
			"uploaded_bytes", r.UploadedBytes, "reused_files", r.ReusedFiles, "manifest_sha256", r.SHA256)
	}
	// -o json: the usual outcome fields, the dataset's counts and the
	// manifest's sha256.
	return reportOutcome(c, *o.format, "publish", r.Result, &r.DatasetStats, err)
}

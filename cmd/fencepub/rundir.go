package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/publisher"
)

// checkOutputDir refuses, before anything is acquired, an --output-dir that
// exists and is not an empty directory: only what CMD writes in this run
// may be published, and files left by an earlier run would be. Errors:
// usage (exit 2).
func checkOutputDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return exitcode.Usagef("--output-dir %s: %v", dir, err)
	case !fi.IsDir():
		return exitcode.Usagef("--output-dir %s is %s; give the directory CMD writes its result to", dir, fileKind(fi.Mode()))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return exitcode.Usagef("--output-dir %s: %v", dir, err)
	}
	if len(ents) > 0 {
		return exitcode.Usagef("--output-dir %s is not empty: only what CMD writes in this run may be published; remove it or give a new directory (nothing acquired)", dir)
	}
	return nil
}

// publishOutputDir runs CMD to its end and then publishes every regular
// file it wrote under --output-dir as one dataset version (publish --dir's
// refusals, nothing published when one applies), within timeout. The
// dataset's counts go to the run's JSON report.
func (r *runner) publishOutputDir(sess *authority.Session, g authority.Grant, p *publisher.Publisher, op publisher.Operation, timeout time.Duration) (publisher.Result, error) {
	cmd, childOut, err := r.start(g, nil)
	if err != nil {
		return publisher.Result{}, err
	}
	if err := r.wait(sess, g, cmd, childOut); err != nil {
		return publisher.Result{}, err
	}
	var opts publisher.DirOptions
	files, _, err := scanDir(r.outputDir, opts)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return publisher.Result{}, exitcode.Usagef("the command succeeded but wrote no --output-dir %s; nothing published", r.outputDir)
	case err != nil:
		return publisher.Result{}, exitcode.With(exitcode.Usage, fmt.Errorf("the command's result in --output-dir %s: %w; nothing published", r.outputDir, err))
	case files == 0 && !r.allowEmpty:
		return publisher.Result{}, exitcode.Usagef("the command succeeded but left no files in --output-dir %s; nothing published (pass --allow-empty to publish an empty dataset)", r.outputDir)
	}
	if err := leaseHeld(sess); err != nil {
		return publisher.Result{}, err
	}
	pctx, pcancel := context.WithTimeout(r.c.Context(), timeout)
	defer pcancel()
	r.log.Info("run: publishing the result directory", "resource", g.Resource, "fence", g.Generation, "key", op.IdempotencyKey, "files", files)
	dr, err := p.PublishDataset(pctx, publisher.Dataset{IdempotencyKey: op.IdempotencyKey, Files: publisher.DirFiles(r.outputDir, opts)})
	if dr.Outcome != "" {
		stats := dr.DatasetStats
		r.res.DatasetStats = &stats
	}
	return dr.Result, err
}

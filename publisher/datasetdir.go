package publisher

import (
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/manifest"
)

// DirOptions tune DirFiles.
type DirOptions struct {
	// FollowSymlinks publishes the regular file a symbolic link points to
	// under the link's path. A link to a directory or to anything but a
	// regular file is refused either way.
	FollowSymlinks bool
}

// sortFiles sorts files by path (manifest.ComparePaths).
func sortFiles(files []File) {
	slices.SortFunc(files, func(a, b File) int { return manifest.ComparePaths(a.Path, b.Path) })
}

// DirFiles yields every regular file under dir, for Dataset.Files, in path
// order: its path relative to dir ('/'-separated), size, content type
// application/octet-stream and an Open reading it from disk. Empty
// directories are not represented; memory holds one directory's listing at
// a time. Errors, yielded: fencepub.ErrInvalid naming the path, for a
// symbolic link (unless opts.FollowSymlinks), a special file or a path a
// manifest cannot hold, and from Open for a file no longer regular (the
// package doc, "Publishing a directory"); a walk error as it is.
func DirFiles(dir string, opts DirOptions) iter.Seq2[File, error] {
	return func(yield func(File, error) bool) {
		info, err := os.Stat(dir)
		if err != nil {
			yield(File{}, err)
			return
		}
		if !info.IsDir() {
			yield(File{}, fmt.Errorf("%w: %s is not a directory", fencepub.ErrInvalid, dir))
			return
		}
		// The root is walked through a symbolic link too: it is the
		// caller's own argument (WalkDir would list a link to a directory
		// as one entry and descend nowhere).
		root := filepath.Clean(dir) + string(filepath.Separator)
		stop := fmt.Errorf("stop")
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == root {
				return nil
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			f, skip, err := dirFile(p, rel, d, opts)
			switch {
			case err != nil:
				return err
			case skip:
				return nil
			case !yield(f, nil):
				return stop
			}
			return nil
		})
		if err != nil && err != stop {
			yield(File{}, err)
		}
	}
}

// dirFile is the File of the walked entry d at p (rel from the root), or
// skip for a directory.
func dirFile(p, rel string, d fs.DirEntry, opts DirOptions) (f File, skip bool, err error) {
	refuse := func(why string) (File, bool, error) {
		return File{}, false, fmt.Errorf("%w: %s %s", fencepub.ErrInvalid, p, why)
	}
	mode := d.Type()
	if mode&fs.ModeSymlink != 0 {
		if !opts.FollowSymlinks {
			return refuse("is a symbolic link; symbolic links are refused unless followed")
		}
		info, err := os.Stat(p)
		if err != nil {
			return refuse(fmt.Sprintf("is a symbolic link that cannot be followed (%v)", err))
		}
		if info.IsDir() {
			return refuse("is a symbolic link to a directory; only links to regular files are followed")
		}
		mode = info.Mode().Type()
	}
	if mode.IsDir() {
		return File{}, true, nil
	}
	if !mode.IsRegular() {
		return refuse(fmt.Sprintf("is a special file (%s); only regular files are published", mode))
	}
	if err := manifest.ValidatePath(rel); err != nil {
		return File{}, false, fmt.Errorf("%s: %w", p, err)
	}
	info, err := os.Stat(p)
	if err != nil {
		return File{}, false, err
	}
	return File{Path: rel, Size: info.Size(), ContentType: defaultContentType, Open: func() (io.ReadCloser, error) {
		return openRegular(p, opts.FollowSymlinks)
	}}, false, nil
}

// openRegular opens the file at p for reading, refusing what is not a
// regular file when opened, whatever the walk saw: a file replaced since
// by a pipe (which would block the open or the reads), a device or, unless
// follow, a symbolic link. Errors: fencepub.ErrInvalid naming p; the
// file system's.
func openRegular(p string, follow bool) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|openFlags(follow), 0)
	if err != nil {
		if info, lerr := os.Lstat(p); lerr == nil && info.Mode()&fs.ModeSymlink != 0 && !follow {
			return nil, fmt.Errorf("%w: %s became a symbolic link since the directory was walked; symbolic links are refused unless followed", fencepub.ErrInvalid, p)
		}
		return nil, err
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = fmt.Errorf("%w: %s is no longer a regular file (%s) since the directory was walked", fencepub.ErrInvalid, p, info.Mode().Type())
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

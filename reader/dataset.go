package reader

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/objstore"
)

// Dataset reads (DESIGN.md "Dataset versions", "Reading"): the pointer,
// then the manifest (cached by its sha256: the index, then the one page
// that can hold the path), then the file with If-Match on its ETag and its
// sha256 verified while streaming, as a single object is.

// Errors of dataset reads, besides Open's. Each is also
// fencepub.ErrInvalid (errors.Is holds for both): the caller asked a
// version for what it does not hold, and retrying does not help (DESIGN.md
// "Errors").
var (
	// ErrNotDataset: the version read is a single object, not a dataset.
	ErrNotDataset error = &subError{msg: "reader: the version is not a dataset", parent: fencepub.ErrInvalid}
	// ErrNoSuchFile: the dataset version has no file at the path.
	ErrNoSuchFile error = &subError{msg: "reader: no such file in the dataset", parent: fencepub.ErrInvalid}
	// ErrIsDataset: Open, OpenPointer or OpenVersion reached a dataset
	// version, whose object is its manifest, not content: read its files
	// with OpenFile, OpenPointerFile or Files.
	ErrIsDataset error = &subError{msg: "reader: the version is a dataset: read its files with OpenFile or Files", parent: fencepub.ErrInvalid}
)

// manifestCacheBytes bounds the decoded manifests a Reader caches, in
// bytes: about 65,000 entries of typical paths.
const manifestCacheBytes = 24 << 20

// FileInfo is one file of a dataset version, as its manifest states it.
type FileInfo struct {
	Path        string `json:"path"`
	Size        int64  `json:"size"`   // bytes
	SHA256      string `json:"sha256"` // hex
	ContentType string `json:"content_type"`
}

// manifests returns the Reader's manifest cache, made on first use.
func (r *Reader) manifests() *manifest.Cache {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil {
		r.cache = manifest.NewCache(manifestCacheBytes)
	}
	return r.cache
}

// OpenFile returns the body of the file at path of the current version,
// which must be a dataset: it reads the pointer, the manifest (cached) and
// the file (DESIGN.md "Dataset versions": also the path rules). The Body
// verifies the file's sha256 and size as Open's does; its Pointer is the
// dataset's pointer with Object and ContentType those of the file. A file
// whose version was superseded and collected is retried with the newer
// pointer (Config.OpenRetries). Errors: Open's (but ErrIsDataset), plus
// ErrNotDataset, ErrNoSuchFile, fencepub.ErrInvalid (a path the path rules
// refuse), fencepub.ErrCorruptState (a manifest that does not decode or
// match its pointer).
func (r *Reader) OpenFile(ctx context.Context, path string) (*Body, error) {
	if r.cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is nil", fencepub.ErrInvalid)
	}
	if err := manifest.ValidatePath(path); err != nil {
		return nil, err
	}
	var (
		last    layout.Version
		lastErr error
	)
	for attempt := 0; ; attempt++ {
		ptr, _, err := r.current(ctx, r.cfg.Serializable)
		if err != nil {
			return nil, err
		}
		if attempt > 0 && ptr.Version == last {
			return nil, lastErr // the current pointer's file is missing: data loss
		}
		b, err := r.OpenPointerFile(ctx, ptr, path)
		if !errors.Is(err, ErrObjectMissing) || attempt >= r.cfg.OpenRetries {
			return b, err
		}
		last, lastErr = ptr.Version, err
	}
}

// OpenPointerFile is OpenFile for a pointer the caller holds (from Current,
// Watch or History): no etcd read. Errors: as OpenFile.
func (r *Reader) OpenPointerFile(ctx context.Context, ptr fencepub.Pointer, path string) (*Body, error) {
	e, err := r.lookup(ctx, ptr, path)
	if err != nil {
		return nil, err
	}
	file := ptr
	file.Object = layout.Object{Bucket: ptr.Object.Bucket, Key: e.Key, SHA256: e.SHA256, ETag: e.ETag, Size: e.Size}
	file.ContentType = e.ContentType
	b, err := r.fetch(ctx, file)
	if err != nil {
		return nil, fmt.Errorf("file %q: %w", path, err)
	}
	return b, nil
}

// lookup finds path in ptr's manifest.
func (r *Reader) lookup(ctx context.Context, ptr layout.Pointer, path string) (manifest.Entry, error) {
	if !ptr.IsDataset() {
		return manifest.Entry{}, fmt.Errorf("%w: version %s of %q", ErrNotDataset, ptr.Version, r.res)
	}
	st, err := objstore.InBucket(r.cfg.Store, ptr.Object.Bucket)
	if err != nil {
		return manifest.Entry{}, r.objectErr(ptr, err)
	}
	e, found, err := r.manifests().Lookup(ctx, st, ptr.Object, path)
	switch {
	case err != nil:
		return manifest.Entry{}, r.manifestErr(ptr, err)
	case !found:
		return manifest.Entry{}, fmt.Errorf("%w: %q in version %s of %q", ErrNoSuchFile, path, ptr.Version, r.res)
	}
	return e, nil
}

// Files yields the files of ptr's dataset version in path order (the
// manifest's), reading the index and then one page at a time (cached by
// sha256). A failure is yielded once, last: ErrNotDataset,
// ErrObjectMissing (the manifest is gone), ErrDigestMismatch (a manifest
// object whose bytes do not match), fencepub.ErrCorruptState (one whose
// bytes match but do not decode: the error names the manifest and the
// path or line refused), fencepub.ErrUnavailable.
func (r *Reader) Files(ctx context.Context, ptr fencepub.Pointer) iter.Seq2[FileInfo, error] {
	return func(yield func(FileInfo, error) bool) {
		if !ptr.IsDataset() {
			yield(FileInfo{}, fmt.Errorf("%w: version %s of %q", ErrNotDataset, ptr.Version, r.res))
			return
		}
		st, err := objstore.InBucket(r.cfg.Store, ptr.Object.Bucket)
		var ix *manifest.Index
		if err == nil {
			ix, err = r.manifests().Index(ctx, st, ptr.Object)
		}
		if err != nil {
			yield(FileInfo{}, r.manifestErr(ptr, err))
			return
		}
		for e, err := range r.manifests().All(ctx, st, ix) {
			if err != nil {
				yield(FileInfo{}, r.manifestErr(ptr, err))
				return
			}
			if !yield(FileInfo{Path: e.Path, Size: e.Size, SHA256: e.SHA256, ContentType: e.ContentType}, nil) {
				return
			}
		}
	}
}

// manifestErr classifies an error reading ptr's manifest: bytes that are
// not the ones its pointer (or index) names are ErrDigestMismatch; named
// bytes that do not decode are fencepub.ErrCorruptState alone, naming the
// manifest and what in it is refused (a path, a line).
func (r *Reader) manifestErr(ptr layout.Pointer, err error) error {
	switch {
	case errors.Is(err, manifest.ErrMismatch):
		return fmt.Errorf("%w: manifest of version %s of %q: %w", ErrDigestMismatch, ptr.Version, r.res, err)
	case errors.Is(err, fencepub.ErrCorruptState):
		return fmt.Errorf("reader: the manifest %s of version %s of %q is refused: %w", ptr.Object.Key, ptr.Version, r.res, err)
	}
	return r.objectErr(ptr, err)
}

package publisher

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/objstore"
)

// rollbackDataset publishes the files of src, a dataset version from the
// history, again under key as a new dataset version: every file is copied
// server-side and create-only under the new version's own key (as a single
// object's rollback copies it), nothing is reused, so the new version's
// files carry its version and no file of src needs to outlive src's
// retention (DESIGN.md "Dataset versions"). The request digest is src's
// content digest. Errors: PublishDataset's, ErrSourceGone when src's
// manifest or a file of it was collected, ErrObjectMismatch when a file's
// ETag changed.
func (p *Publisher) rollbackDataset(ctx context.Context, src layout.Pointer, key string) (Result, error) {
	gone := func(err error) error {
		if errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("%w: %w", ErrSourceGone, err)
		}
		return err
	}
	st, err := objstore.InBucket(p.c.cfg.Store, src.Object.Bucket)
	if err != nil {
		return Result{}, err
	}
	ix, err := manifest.LoadIndex(ctx, st, src.Object)
	if err != nil {
		return Result{}, fmt.Errorf("publisher: manifest of %s: %w", src.Version, gone(err))
	}
	var none *manifest.Cache // read each page once, without caching
	files := func(yield func(File, error) bool) {
		for e, err := range none.All(ctx, st, ix) {
			if err != nil {
				yield(File{}, fmt.Errorf("publisher: manifest of %s: %w", src.Version, gone(err)))
				return
			}
			from := layout.Object{Bucket: st.BucketName(), Key: e.Key, SHA256: e.SHA256, ETag: e.ETag, Size: e.Size}
			if !yield(File{Path: e.Path, Size: e.Size, ContentType: e.ContentType, copyFrom: &from}, nil) {
				return
			}
		}
	}
	r, err := p.PublishDataset(ctx, Dataset{IdempotencyKey: key, Files: files, Base: BaseNone})
	return r.Result, err
}

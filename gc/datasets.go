package gc

import (
	"context"
	"fmt"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
)

// Datasets (DESIGN.md "Dataset versions", invariants 14 and 15). Every key
// of a dataset version (its manifest index, pages and files) carries the
// version (layout.ParseVersionKey), so classify applies the rules of a
// single object to each; the pointer's and retained versions keep every key
// under their own key. A file reused from an older version lives under
// that version's key: it is kept while a retained manifest names it
// (state.Named, which holds a hash of each such key). The manifests are
// read by sha256 through a cache kept across passes (they are immutable).

// manifestCacheBytes bounds the decoded manifests (indexes and pages) a
// Collector keeps cached across passes, in bytes: about 20,000 entries of
// typical paths. The pages of a larger manifest are read one at a time
// each pass and not cached (manifest.Cache.All), so its files do not
// grow a pass's memory.
const manifestCacheBytes = 8 << 20

// datasetRef is a dataset version whose manifest's files are kept, and why.
type datasetRef struct {
	pointer layout.Pointer
	why     string
}

// readNamed fills s.Named with every object the manifests of the pointer's
// and the retained dataset versions name under the key of a version that
// is neither the pointer's nor retained (the files they reuse from older
// versions), each with the first version naming it (s.NamedBy); memory
// grows with those files only, by 16 bytes each (namedSet). A manifest
// that cannot be read fails the resource's pass, so nothing of it is
// deleted: a file it names might otherwise be collected.
func (c *Collector) readNamed(ctx context.Context, s *state) error {
	refs := s.retainedDatasets
	if s.HasPointer && s.Pointer.IsDataset() {
		refs = append([]datasetRef{{s.Pointer, "the pointer"}}, refs...)
	}
	if s.Decommissioned || len(refs) == 0 {
		return nil
	}
	named := newNamedSet()
	seen := make(map[string]bool)
	for _, r := range refs {
		own := r.pointer.Object.Key
		if seen[own] {
			continue
		}
		seen[own] = true
		ref := int32(len(s.NamedBy))
		s.NamedBy = append(s.NamedBy, r)
		ix, err := c.manifests.Index(ctx, c.st, r.pointer.Object)
		if err == nil {
			for e, ferr := range c.manifests.All(ctx, c.st, ix) {
				if err = ferr; err != nil {
					break
				}
				if !keptByVersion(s, e.Key) {
					named.add(e.Key, ref)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("gc: manifest of dataset version %s of %q (%s): %w; nothing of the resource is deleted until it can be read",
				r.pointer.Version, s.Resource, r.why, err)
		}
		named.seal()
	}
	s.Named = named
	return nil
}

// newManifestCache returns the cache a Collector reads manifests through.
func newManifestCache() *manifest.Cache { return manifest.NewCache(manifestCacheBytes) }

// keptByVersion reports whether key lies under the pointer's or a retained
// version's own key: classify keeps it whatever names it, so s.Named need
// not hold it (only files reused from versions no longer retained).
func keptByVersion(s *state, key string) bool {
	_, own, ok := s.NS.ParseVersionKey(s.Resource, key)
	if !ok {
		return false
	}
	_, retained := s.Retained[own]
	return retained || s.HasPointer && own == s.Pointer.Object.Key
}

package manifest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
)

// MaxObjectSize bounds an index or a page read into memory, in bytes; a
// pointer or an index that states more is refused as corrupt.
const MaxObjectSize = 256 << 20

// ContentType is the content type of index and page objects: JSON lines.
const ContentType = "application/x-ndjson"

// load GETs key with If-Match etag (when not empty) and returns its bytes
// once they are exactly size bytes with the given sha256. Errors: the
// store's (objstore.ErrNotFound when absent, objstore.ErrConditionConflict
// when its ETag changed); fencepub.ErrCorruptState for other bytes.
func load(ctx context.Context, st objstore.Store, key, etag, sha string, size int64) ([]byte, error) {
	if size < 0 || size > MaxObjectSize {
		return nil, corrupt("%s is said to be %d bytes; the limit is %d", key, size, MaxObjectSize)
	}
	body, _, err := st.Get(ctx, key, etag)
	if err != nil {
		return nil, fmt.Errorf("manifest: get %s: %w", key, err)
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, size+1))
	if err != nil {
		return nil, fmt.Errorf("manifest: read %s: %w", key, err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != size || hex.EncodeToString(sum[:]) != sha {
		return nil, corrupt("%w: %s holds %d bytes with sha256 %x; want %d bytes, sha256 %s", ErrMismatch, key, len(b), sum, size, sha)
	}
	return b, nil
}

// ErrMismatch: an index or page read does not have the sha256 and size
// that name it (so its bytes were replaced); it is also
// fencepub.ErrCorruptState. An error without it, but ErrCorruptState, is
// a manifest whose bytes are the ones named but do not decode.
var ErrMismatch = errors.New("bytes do not match their sha256")

// LoadIndex reads and decodes the index that obj (a dataset pointer's
// object) names, in obj's bucket when st reaches it. One GET. Errors:
// those of the store (objstore.ErrNotFound, ErrConditionConflict);
// fencepub.ErrCorruptState.
func LoadIndex(ctx context.Context, st objstore.Store, obj layout.Object) (*Index, error) {
	if obj.Bucket != "" {
		var err error
		if st, err = objstore.InBucket(st, obj.Bucket); err != nil {
			return nil, err
		}
	}
	b, err := load(ctx, st, obj.Key, obj.ETag, obj.SHA256, obj.Size)
	if err != nil {
		return nil, err
	}
	ix, err := DecodeIndex(b)
	if err != nil {
		return nil, err
	}
	for i, p := range ix.Pages {
		if want := layout.PageKey(obj.Key, i); p.Key != want {
			return nil, corrupt("index %s: page %d is %.200q, not its own page key %s", obj.Key, i, p.Key, want)
		}
	}
	if err := checkKeys(obj.Key, ix.Entries); err != nil {
		return nil, err
	}
	return ix, nil
}

// checkKeys checks that every entry of the manifest whose index is at own
// names the file at its own path of a version of own's resource
// (layout.FileKey of a sibling version key): the version's own file, or
// one reused from an older version at the same path. A manifest naming
// another resource's object, a marker or another path's file is refused,
// so GC's reading of what a manifest keeps and a reader's of what it
// serves never leave the resource. Errors: fencepub.ErrCorruptState.
func checkKeys(own string, es []Entry) error {
	for i, e := range es {
		if v, ok := strings.CutSuffix(e.Key, layout.FilesSep+e.Path); !ok || !layout.SiblingVersionKey(own, v) {
			return corrupt("entry %d: %.120q names object %.200q, not the file at its path of a version of the resource of %s", i, e.Path, e.Key, own)
		}
	}
	return nil
}

// LoadPage reads and decodes page ref of an index LoadIndex returned
// (DecodePage), checking its entries' keys as LoadIndex checks inline
// ones. One GET. Errors: as LoadIndex.
func LoadPage(ctx context.Context, st objstore.Store, ref PageRef) ([]Entry, error) {
	cut := strings.LastIndex(ref.Key, layout.PagesSep)
	if cut < 0 {
		return nil, corrupt("page %.200q is not a page key", ref.Key)
	}
	own := ref.Key[:cut]
	b, err := load(ctx, st, ref.Key, ref.ETag, ref.SHA256, ref.Size)
	if err != nil {
		return nil, err
	}
	es, err := DecodePage(b, ref)
	if err != nil {
		return nil, err
	}
	if err := checkKeys(own, es); err != nil {
		return nil, err
	}
	return es, nil
}

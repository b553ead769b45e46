package manifest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

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
	return DecodeIndex(b)
}

// LoadPage reads and decodes page ref of an index (DecodePage). One GET.
// Errors: as LoadIndex.
func LoadPage(ctx context.Context, st objstore.Store, ref PageRef) ([]Entry, error) {
	b, err := load(ctx, st, ref.Key, ref.ETag, ref.SHA256, ref.Size)
	if err != nil {
		return nil, err
	}
	return DecodePage(b, ref)
}

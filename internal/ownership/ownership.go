// Package ownership reads and describes the bucket ownership marker
// (layout.Namespace.OwnershipObject): the deployment that owns a domain's
// prefix. The authority writes it (create-only, at Init); GC refuses to
// delete under a prefix whose marker names another deployment than etcd's
// deployment key (DESIGN.md "Object layout").
package ownership

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
)

// MaxBytes bounds the size of a marker object read back.
const MaxBytes = 64 << 10

// Marker is the JSON body of the ownership marker.
type Marker struct {
	DeploymentID string    `json:"deployment_id"`
	CreatedAt    time.Time `json:"created_at"`
}

// Read reads and decodes the ownership marker of ns in st. Errors:
// objstore.ErrNotFound (wrapped) when there is none,
// objstore.ErrUnavailable, fencepub.ErrCorruptState.
func Read(ctx context.Context, st objstore.Store, ns layout.Namespace) (Marker, error) {
	b, err := objstore.GetSmall(ctx, st, ns.OwnershipObject(), MaxBytes)
	if err != nil {
		return Marker{}, err
	}
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil || m.DeploymentID == "" {
		return Marker{}, fmt.Errorf("%w: ownership marker %s: %q", fencepub.ErrCorruptState, ns.OwnershipObject(), b)
	}
	return m, nil
}

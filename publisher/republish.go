package publisher

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/minio/minio-go/v7"
)

// Republish publishes an existing object of the Publisher's resource again,
// as a new version (the next seq) under idempotency key: the object is
// copied server-side and create-only to a fresh key of the new version and
// published normally. It is how `fencepub authority recover --republish`
// brings back a publish that an etcd restore lost (DESIGN.md invariant 3 and
// "Object layout"): such an object is in no history entry, so its digest is
// computed from the object itself — the body sha256 the publisher stored in
// its metadata, its content type and user metadata — which equals the
// original publish's digest.
//
// objectKey must be a fencepub object key of this resource
// (layout.ParseObjectKey). Errors and outcomes are those of Publish, plus
// ErrInvalid (a foreign key), ErrSourceGone (the object is gone) and
// ErrObjectMismatch (its metadata carries no valid sha256).
func (p *Publisher) Republish(ctx context.Context, objectKey, key string) (Result, error) {
	c, res := p.c, p.term.Resource
	if err := layout.ValidateKey("idempotency key", key); err != nil {
		c.m.failure("validate")
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, _, ok := c.ns.ParseObjectKey(res, objectKey); !ok {
		c.m.failure("validate")
		return Result{}, fmt.Errorf("%w: %q is not an object key of %q", ErrInvalid, objectKey, res)
	}
	st := c.cfg.Store
	info, err := st.Client.StatObject(ctx, st.Bucket, objectKey, minio.StatObjectOptions{})
	if err != nil {
		c.m.failure("object")
		return Result{}, fmt.Errorf("%w: %s: %w", ErrSourceGone, objectKey, objstore.Classify(err))
	}
	var sum string
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, metaSHA256) {
			sum = v
		}
	}
	bodySHA, err := hex.DecodeString(sum)
	if err != nil || len(bodySHA) != 32 {
		c.m.failure("object")
		return Result{}, fmt.Errorf("%w: %s carries no valid %s metadata (%q)", ErrObjectMismatch, objectKey, metaSHA256, sum)
	}
	src := layout.Object{Bucket: st.Bucket, Key: objectKey, SHA256: sum, ETag: info.ETag, Size: info.Size}
	meta, err := c.sourceMetadata(ctx, src)
	if err != nil {
		c.m.failure("object")
		return Result{}, err
	}
	return p.republish(ctx, src, info.ContentType, meta, bodySHA, key)
}

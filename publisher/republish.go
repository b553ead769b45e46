package publisher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/manifest"
	"github.com/fencepub/fencepub/internal/objstore"
)

// republishKey publishes an existing object of the Publisher's resource again,
// as a new version (the next seq) under idempotency key: the object is
// copied server-side and create-only to a fresh key of the new version and
// published normally. It is how `fencepub authority recover --republish`
// brings back a publish that an etcd restore lost (DESIGN.md invariant 3 and
// "Object layout"): such an object is in no history entry, so its digest is
// computed from the object itself — the body sha256 the publisher stored in
// its metadata, its content type and user metadata — which equals the
// original publish's digest. An object written in a multipart upload
// carries no sha256 metadata (it is known only once the last part is
// sent); republishKey then reads the object once, conditioned on its ETag, to
// compute it.
//
// objectKey must be a fencepub object key of this resource (it names the
// resource and a version). Errors and outcomes are those of Publish, plus
// fencepub.ErrInvalid (a foreign key), ErrSourceGone (the object is gone) and
// ErrObjectMismatch (its metadata carries an invalid sha256, or it changed
// while being read).
//
// An object that is a dataset version's manifest index (its content type
// and form) is republished as a dataset version: every file it names is
// copied server-side under the new version's key, as a rollback to it
// does (DESIGN.md "Dataset versions"), with the original content digest;
// a file gone since is ErrSourceGone, with nothing published.
func (p *Publisher) republishKey(ctx context.Context, objectKey, key string) (Result, error) {
	c, res := p.c, p.term.resource
	if err := layout.ValidateKey("idempotency key", key); err != nil {
		c.m.failure("validate")
		return Result{}, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	if _, _, ok := c.ns.ParseObjectKey(res, objectKey); !ok {
		c.m.failure("validate")
		return Result{}, fmt.Errorf("%w: %q is not an object key of %q", fencepub.ErrInvalid, objectKey, res)
	}
	st := c.cfg.Store
	info, err := st.Stat(ctx, objectKey)
	if err != nil {
		c.m.failure("object")
		return Result{}, sourceErr(objectKey, err)
	}
	var sum string
	found := false
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, metaSHA256) {
			sum, found = v, true
		}
	}
	var bodySHA []byte
	if found {
		if bodySHA, err = hex.DecodeString(sum); err != nil || len(bodySHA) != 32 {
			c.m.failure("object")
			return Result{}, fmt.Errorf("%w: %s carries an invalid %s metadata value %q", ErrObjectMismatch, objectKey, metaSHA256, sum)
		}
	} else if bodySHA, err = c.hashObject(ctx, objectKey, info); err != nil { // a multipart upload's object
		c.m.failure("object")
		return Result{}, err
	}
	sum = hex.EncodeToString(bodySHA)
	src := layout.Object{Bucket: st.BucketName(), Key: objectKey, SHA256: sum, ETag: info.ETag, Size: info.Size}
	if info.ContentType == manifest.ContentType {
		if r, ok, err := p.republishDataset(ctx, src, key); ok {
			return r, err
		}
	}
	meta, err := c.sourceMetadata(ctx, src)
	if err != nil {
		c.m.failure("object")
		return Result{}, err
	}
	return p.republish(ctx, src, info.ContentType, meta, bodySHA, key)
}

// republishDataset republishes src when it is a dataset version's manifest
// index (ok false when it does not decode as one: a single object of the
// manifest's content type): every file it names is copied server-side
// under the new version's key and published as a dataset version, as a
// rollback to it would (rollbackDataset), with the original content digest
// as request digest. Errors: rollbackDataset's.
func (p *Publisher) republishDataset(ctx context.Context, src layout.Object, key string) (r Result, ok bool, err error) {
	v, _, _ := p.c.ns.ParseObjectKey(p.term.resource, src.Key)
	if _, err := manifest.LoadIndex(ctx, p.c.cfg.Store, src); errors.Is(err, fencepub.ErrCorruptState) {
		return Result{}, false, nil
	} else if err != nil {
		return Result{}, true, sourceErr(src.Key, err)
	}
	r, err = p.rollbackDataset(ctx, layout.Pointer{Version: v, Object: src, Kind: layout.KindDataset}, key)
	return r, true, err
}

// hashObject reads key once, conditioned on the ETag in info (the copy that
// follows requires the same ETag), and returns the sha256 of its bytes.
// Errors: ErrSourceGone, ErrObjectMismatch (changed or of another size),
// objstore errors.
func (c *Client) hashObject(ctx context.Context, key string, info objstore.ObjectInfo) ([]byte, error) {
	obj, _, err := c.cfg.Store.Get(ctx, key, info.ETag)
	if err != nil {
		return nil, sourceErr(key, err)
	}
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	if err != nil {
		return nil, sourceErr(key, err)
	}
	if n != info.Size {
		return nil, fmt.Errorf("%w: %s: read %d bytes, its size is %d", ErrObjectMismatch, key, n, info.Size)
	}
	return h.Sum(nil), nil
}

// sourceErr classifies an error reading a republish source: gone (404),
// changed (ErrConditionFailed on the ETag condition), or the store's error.
func sourceErr(key string, err error) error {
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("%w: %s: %w", ErrSourceGone, key, err)
	case errors.Is(err, objstore.ErrConditionFailed):
		return fmt.Errorf("%w: %s changed while being read: %w", ErrObjectMismatch, key, err)
	}
	return fmt.Errorf("publisher: read republish source %s: %w", key, err)
}

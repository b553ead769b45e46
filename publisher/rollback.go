package publisher

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Rollback publishes the content of an earlier version `to` of the
// Publisher's resource again, as a new version (the next seq) under
// idempotency key: it copies `to`'s object (a dataset version: every file)
// server-side and create-only to a fresh key of the new version and
// publishes that normally (DESIGN.md "Object layout", "Dataset versions").
// Its request digest is the original publish's. Copies are limited by S3 to
// 10000 parts of 1 GiB.
//
// Errors and outcomes are those of Publish, plus ErrNoSuchVersion (to is
// not in the history), ErrSourceGone (its object was collected) and
// ErrObjectMismatch (its object changed).
func (p *Publisher) Rollback(ctx context.Context, to fencepub.Version, key string) (Result, error) {
	c, res := p.c, p.term.resource
	if err := layout.ValidateKey("idempotency key", key); err != nil {
		c.m.failure("validate")
		return Result{}, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	hk := c.ns.HistoryKey(res, to)
	var resp *clientv3.GetResponse
	err := c.retry(ctx, "read history of "+res, func(ctx context.Context) error {
		var err error
		resp, err = c.kv.Get(ctx, hk)
		return err
	})
	if err != nil {
		c.m.failure("history")
		return Result{}, err
	}
	if len(resp.Kvs) == 0 {
		c.m.failure("history")
		return Result{}, fmt.Errorf("%w: %q has no history entry for %s", ErrNoSuchVersion, res, to)
	}
	src, err := layout.DecodePointer(resp.Kvs[0].Value)
	if err != nil {
		c.m.failure("history")
		return Result{}, fmt.Errorf("publisher: history entry %s of %q: %w", to, res, err)
	}
	if src.IsDataset() {
		return p.rollbackDataset(ctx, src, key) // datasetrollback.go
	}
	bodySHA, err := hex.DecodeString(src.Object.SHA256)
	if err != nil || len(bodySHA) != 32 {
		c.m.failure("history")
		return Result{}, fmt.Errorf("%w: history entry %s of %q has sha256 %q", layout.ErrCorruptRecord, to, res, src.Object.SHA256)
	}
	meta, err := c.sourceMetadata(ctx, src.Object)
	if err != nil {
		c.m.failure("object")
		return Result{}, err
	}
	return p.republish(ctx, src.Object, src.ContentType, meta, bodySHA, key)
}

// republish copies src server-side and create-only to a fresh key of the
// next version and publishes it under key with the digest of (bodySHA,
// contentType, meta): the shared tail of Rollback and republishKey.
func (p *Publisher) republish(ctx context.Context, src layout.Object, contentType string, meta map[string]string, bodySHA []byte, key string) (Result, error) {
	c, res := p.c, p.term.resource
	cl := p.take(0)
	if contentType == "" {
		contentType = defaultContentType
	}
	start := time.Now()
	obj, err := c.copyObject(ctx, src, c.ns.ObjectKey(res, cl.v, layout.NewNonce()), contentType, meta)
	if err != nil {
		c.m.failure("object")
		p.giveBack(cl)
		return Result{}, err
	}
	c.m.objectWritten(time.Since(start), 0)
	return p.send(ctx, cl, c.prepare(p.term, cl.v, key, requestDigest(bodySHA, contentType, meta), obj, contentType))
}

// sourceMetadata returns the user metadata of obj without fencepub's own
// keys, lowercased: the Operation.Metadata it was published with.
func (c *Client) sourceMetadata(ctx context.Context, obj layout.Object) (map[string]string, error) {
	var info objstore.ObjectInfo
	st, err := objstore.InBucket(c.cfg.Store, obj.Bucket)
	if err == nil {
		info, err = st.Stat(ctx, obj.Key)
	}
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s: %w", ErrSourceGone, obj.Key, err)
		}
		return nil, fmt.Errorf("publisher: stat rollback source %s: %w", obj.Key, err)
	}
	meta := map[string]string{}
	for k, v := range info.UserMetadata {
		if lk := strings.ToLower(k); !strings.HasPrefix(lk, reservedMetaPrefix) {
			meta[lk] = v
		}
	}
	return normalizeMetadata(meta)
}

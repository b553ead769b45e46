package publisher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/layout"
)

// defaultContentType is used when an Operation has none.
const defaultContentType = "application/octet-stream"

// Limits on an Operation's content type and metadata, in bytes.
const (
	maxContentTypeLen = 256
	maxMetaKeyLen     = 64
	maxMetadataBytes  = 2048 // keys plus values: S3's user-metadata limit
)

// reservedMetaPrefix starts the metadata keys fencepub writes itself.
const reservedMetaPrefix = "fencepub-"

// metaSHA256 is the user-metadata key holding the body's hex sha256 on every
// object fencepub writes in one PUT or by copy; it lets a retry that meets
// 412 on its own key check that the object there is the one it wrote.
const metaSHA256 = reservedMetaPrefix + "sha256"

// Validate checks op's idempotency key, content type and metadata as Publish
// does, without reading Body, so a caller can refuse bad input before it
// acquires a grant or writes anything. Errors: fencepub.ErrInvalid naming the
// field.
func (op Operation) Validate() error {
	_, err := normalize(op)
	return err
}

// operationDigest is pubhook.RequestDigest, which `fencepub resolve --file`
// runs: op's request digest, 64 lowercase hex digits, as Publish computes
// it (requestDigest). It validates op as Publish does, reads op.Body to EOF
// (nil is an empty body) and hashes it with the content type (defaulted)
// and the metadata (keys lowercased). It names an attempt for Resolve
// (AttemptID.Digest). A body that may block is read until ctx ends.
// Errors: fencepub.ErrInvalid naming the field; ErrBody when the body's read
// fails or its length is not op.Size (when set); ctx's error.
func operationDigest(ctx context.Context, op Operation) (string, error) {
	op, err := normalize(op)
	if err != nil {
		return "", err
	}
	body := op.Body
	if body == nil {
		body = bytes.NewReader(nil)
	}
	if mayBlock(body) {
		body = &ctxReader{ctx: ctx, r: body}
	}
	h := sha256.New()
	n, err := io.Copy(h, body)
	switch {
	case err != nil && ctx.Err() != nil:
		return "", fmt.Errorf("publisher: request digest: reading the body stopped after %d bytes: %w", n, ctx.Err())
	case err != nil:
		return "", fmt.Errorf("%w after %d bytes: %w", ErrBody, n, err)
	case op.Size > 0 && n != op.Size:
		return "", fmt.Errorf("%w: the body has %d bytes, not Size %d", ErrBody, n, op.Size)
	}
	return requestDigest(h.Sum(nil), op.ContentType, op.Metadata), nil
}

// normalize validates op and returns it with defaults applied: content type
// defaulted, metadata keys lowercased. Errors: fencepub.ErrInvalid naming the
// field.
func normalize(op Operation) (Operation, error) {
	if err := layout.ValidateKey("idempotency key", op.IdempotencyKey); err != nil {
		return op, fmt.Errorf("%w: %w", fencepub.ErrInvalid, err)
	}
	if op.Size < 0 {
		return op, fmt.Errorf("%w: Size %d is negative (0 means unknown)", fencepub.ErrInvalid, op.Size)
	}
	if op.ContentType == "" {
		op.ContentType = defaultContentType
	}
	if err := checkHeaderValue("content type", op.ContentType, maxContentTypeLen); err != nil {
		return op, err
	}
	meta, err := normalizeMetadata(op.Metadata)
	if err != nil {
		return op, err
	}
	op.Metadata = meta
	return op, nil
}

// normalizeMetadata lowercases keys and checks keys and values (see
// Operation.Metadata). It returns nil for an empty map.
func normalizeMetadata(in map[string]string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	total := 0
	for k, v := range in {
		lk := strings.ToLower(k)
		if lk == "" || len(lk) > maxMetaKeyLen {
			return nil, fmt.Errorf("%w: metadata key %q must be 1-%d bytes", fencepub.ErrInvalid, k, maxMetaKeyLen)
		}
		for i := 0; i < len(lk); i++ {
			if c := lk[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return nil, fmt.Errorf("%w: metadata key %q: use letters, digits and '-'", fencepub.ErrInvalid, k)
			}
		}
		if strings.HasPrefix(lk, reservedMetaPrefix) {
			return nil, fmt.Errorf("%w: metadata key %q: the prefix %q is reserved", fencepub.ErrInvalid, k, reservedMetaPrefix)
		}
		if _, dup := out[lk]; dup {
			return nil, fmt.Errorf("%w: metadata key %q given twice (keys are case-insensitive)", fencepub.ErrInvalid, k)
		}
		if err := checkHeaderValue("metadata "+lk, v, maxMetadataBytes); err != nil {
			return nil, err
		}
		out[lk] = v
		total += len(lk) + len(v)
	}
	if total > maxMetadataBytes {
		return nil, fmt.Errorf("%w: metadata is %d bytes; the limit is %d", fencepub.ErrInvalid, total, maxMetadataBytes)
	}
	return out, nil
}

// checkHeaderValue accepts 1..limit bytes of printable ASCII without leading
// or trailing spaces: what survives an HTTP header unchanged, so the stored
// value equals the hashed one.
func checkHeaderValue(field, s string, limit int) error {
	if s == "" || len(s) > limit {
		return fmt.Errorf("%w: %s must be 1-%d bytes", fencepub.ErrInvalid, field, limit)
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return fmt.Errorf("%w: %s %.60q has leading or trailing spaces", fencepub.ErrInvalid, field, s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: %s %.60q has byte 0x%02x at %d; use printable ASCII", fencepub.ErrInvalid, field, s, c, i)
		}
	}
	return nil
}

// digestTag versions the digest encoding.
const digestTag = "fencepub.request-digest.v1"

// requestDigest returns the request digest, hex sha256 over a canonical,
// unambiguous encoding of the body's sha256, the content type and the
// metadata sorted by key: every field length-prefixed (8-byte big-endian),
// so no two different requests encode alike. Version, owner, attempt and
// time are never part of it (DESIGN.md invariant 5).
func requestDigest(bodySHA []byte, contentType string, meta map[string]string) string {
	var b bytes.Buffer
	field := func(s string) {
		_ = binary.Write(&b, binary.BigEndian, uint64(len(s)))
		b.WriteString(s)
	}
	field(digestTag)
	field(string(bodySHA))
	field(contentType)
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	_ = binary.Write(&b, binary.BigEndian, uint64(len(keys)))
	for _, k := range keys {
		field(k)
		field(meta[k])
	}
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:])
}

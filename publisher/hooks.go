package publisher

import (
	"context"

	"github.com/fencepub/fencepub/internal/pubhook"
)

func init() {
	pubhook.NextSeq = func(p any) uint64 { return p.(*Publisher).nextSeq() }
	pubhook.RequestDigest = func(ctx context.Context, op any) (string, error) {
		return operationDigest(ctx, op.(Operation))
	}
	pubhook.Republish = func(ctx context.Context, p any, objectKey, key string) (any, error) {
		return p.(*Publisher).republishKey(ctx, objectKey, key)
	}
}

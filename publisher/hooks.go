package publisher

import (
	"context"

	"github.com/fencepub/fencepub/internal/pubhook"
)

func init() {
	pubhook.NextSeq = func(p any) uint64 { return p.(*Publisher).nextSeq() }
	pubhook.Republish = func(ctx context.Context, p any, objectKey, key string) (any, error) {
		return p.(*Publisher).republishKey(ctx, objectKey, key)
	}
}

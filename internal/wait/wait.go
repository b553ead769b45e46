// Package wait holds the one context-aware sleep every fencepub package uses
// between retries and polls.
package wait

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends, whichever comes first, and reports
// whether the whole of d passed (false: ctx ended). It holds no timer after
// it returns.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

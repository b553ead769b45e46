package gc

import (
	"context"

	"github.com/fencepub/fencepub/internal/operator"
)

func init() {
	operator.Decommission = func(ctx context.Context, c any, res string, force bool) (operator.Decommissioned, error) {
		d, err := c.(*Collector).decommission(ctx, res, force)
		out := operator.Decommissioned{Resource: d.Resource, Seal: d.Seal, Previous: d.Previous, Already: d.Already, Revision: d.Revision}
		if d.Holder != nil {
			out.Holder = d.Holder
		}
		return out, err
	}
}

package authority

import (
	"context"

	"github.com/fencepub/fencepub/internal/operator"
)

func init() {
	operator.Inspect = func(ctx context.Context, a any, res string) (operator.LeaseState, error) {
		st, err := a.(*Authority).inspect(ctx, res)
		out := operator.LeaseState{Resource: st.Resource, Epoch: st.Epoch, Generation: st.Generation, Revision: st.Revision}
		if st.Holder != nil {
			out.Holder = *st.Holder
		}
		return out, err
	}
	operator.Epoch = func(ctx context.Context, a any) (uint64, error) { return a.(*Authority).currentEpoch(ctx) }
	operator.CheckHistory = func(ctx context.Context, a any) error { return a.(*Authority).checkHistory(ctx) }
	operator.Init = func(ctx context.Context, a any) (operator.Domain, error) { return a.(*Authority).initDomain(ctx) }
	operator.CheckOwnership = func(ctx context.Context, a any) (operator.Domain, error) {
		return a.(*Authority).checkOwnership(ctx)
	}
}

package sluicetask

import (
	"context"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/wire"
)

// MaxCost is the largest actual cost SetCost takes (the largest cost of one
// job).
const MaxCost = wire.MaxActualCost

// costKey is the context key of an attempt's actual cost (costBox).
type costKey struct{}

// costBox holds the actual cost a handler set with SetCost: 0 = none.
type costBox struct{ n atomic.Int64 }

// SetCost tells Sluice the actual cost of the running attempt of a task job,
// when the handler learns it (the tokens an LLM call used, the units an API
// reported). A job reserves its cost — the estimate it was enqueued with —
// at dispatch; after the attempt Sluice charges (n > cost) or refunds
// (n < cost) the difference on the tenant's schedule and on every upstream
// the job names, so later jobs leave later or earlier accordingly. n is a
// number of cost units, 0 … MaxCost; a reported 0 is charged as 1 (every
// attempt costs at least one unit). A later call replaces an earlier one;
// without a call the reserved cost stands. It applies whatever the
// handler returns (the attempt was made).
//
// It returns an error, and changes nothing, when n is out of range or ctx
// is not the context of a Sluice task job's handler (see JobFromContext).
// It is safe for concurrent use by the handler's goroutines.
func SetCost(ctx context.Context, n int64) error {
	box, ok := ctx.Value(costKey{}).(*costBox)
	switch {
	case !ok:
		return errorf("set cost: not in a Sluice task job's handler")
	case n < 0 || n > MaxCost:
		return errorf("set cost %d: want 0 … %d", n, MaxCost)
	}
	box.n.Store(max(n, 1))
	return nil
}

// withCost returns ctx carrying a fresh costBox for SetCost.
func withCost(ctx context.Context) (context.Context, *costBox) {
	box := &costBox{}
	return context.WithValue(ctx, costKey{}, box), box
}

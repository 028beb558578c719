package quota

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// Cost correction on upstreams (issue #15). The upstream hash
// <p>:{u:<name>}:u is written by the upstream registry (fields cfg, p, v,
// …) and its coordinator (field tat); these two functions only read cfg
// and move tat.

// ChargeUpstream applies a cost correction of delta cost units (actual −
// reserved; > 0 a charge, < 0 a refund) to upstream name's schedule, in one
// script in the upstream's slot (lua/upstream_charge.lua): TAT_U (field
// tat) moves delta·T later for a charge, with T its interval (field p,
// "iv"), and |delta|·T earlier for a refund but never below now (a TAT_U
// already past stays). An upstream that does not exist is a no-op (nil).
// delta 0 does nothing; a bad name or |delta| > wire.MaxActualCost is
// ErrInvalid and changes nothing.
func (q *Registry) ChargeUpstream(ctx context.Context, name string, delta int64) error {
	if err := CheckName(name); err != nil {
		return fmt.Errorf("charge upstream: %w", err)
	}
	if delta < -wire.MaxActualCost || delta > wire.MaxActualCost {
		return fmt.Errorf("charge upstream %q: %w", name, invalidf("delta %d: want |delta| ≤ %d", delta, wire.MaxActualCost))
	}
	if delta == 0 {
		return nil
	}
	_, err := q.runKeys(ctx, scriptUpstreamCharge, []string{q.keys.upstream(name)}, q.nowArg(), delta)
	if redisscript.RefusalStatus(err) == redisscript.StatusNotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("charge upstream %q %+d: %w", name, delta, err)
	}
	return nil
}

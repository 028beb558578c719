package dispatch

import (
	"context"
	"fmt"
	"time"
)

// Release is a job handed out by Pop.
type Release struct {
	ID   string
	Gen  int64     // the job's generation after the pop
	Slot time.Time // the instant the job may be sent
}

// Pop is the FIRST, MINIMAL version of the dispatcher's pop (DESIGN §2.2), a
// stand-in for tests until the dispatcher issue replaces it with the
// per-shard pass: for one tenant, it releases the head job (head lane first,
// skipping tombstones) when the tenant is not disabled, paused or at its
// concurrency cap and the job's GCRA slot is ≤ now + lead. The job's TAT
// advances, gen + 1, state released, a lease until slot + lease in the shard's
// lease set; then reschedule(tenant). ok is false when nothing was due.
func (s *Store) Pop(ctx context.Context, tenant string, lead, lease time.Duration) (r Release, ok bool, err error) {
	if err := checkTenant(tenant); err != nil {
		return Release{}, false, fmt.Errorf("pop for tenant %q: %w", tenant, err)
	}
	d, err := s.run(ctx, scriptPop, s.keys.shardOf(tenant), tenant, lead.Microseconds(), lease.Microseconds())
	if err != nil {
		return Release{}, false, fmt.Errorf("pop for tenant %q: %w", tenant, err)
	}
	if d.int(1) == 1 {
		r = Release{ID: d.str(2), Gen: d.int(3), Slot: microsTime(d.int(4))}
		ok = true
	}
	if err := d.Err(); err != nil {
		return Release{}, false, fmt.Errorf("pop for tenant %q: %w", tenant, err)
	}
	return r, ok, nil
}

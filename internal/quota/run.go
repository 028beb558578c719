package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// An upstream's concurrency (issue #15): at most Params.Concurrency jobs
// naming it run at once, across every worker. The pass cannot see it (the
// upstream's state is in another slot), so the worker holds a lease in the
// upstream's slot around each send (lua/upstream_run.lua; the ZSET
// <p>:{u:<name>}:run of holder → expiry). A lease expires after the life
// its holder gave it (the job's timeout + grace), so a killed worker's
// leases free themselves.

// UpstreamRunFullError is AcquireUpstreamRun's answer when the upstream
// runs its concurrency already: Running leases in force, the earliest
// ending within Retry (a bound: a release frees one sooner).
type UpstreamRunFullError struct {
	Name    string
	Running int64
	Retry   time.Duration
}

func (e *UpstreamRunFullError) Error() string {
	return fmt.Sprintf("upstream %q runs %d jobs, its concurrency", e.Name, e.Running)
}

// AcquireUpstreamRun takes one of upstream name's concurrency leases for
// holder (a job's id and gen: HolderOf) until now + life, renewing holder's
// lease when it holds one. It returns true when a lease is held, false when
// the upstream has no concurrency bound (or no params): nothing to hold or
// release. When the upstream runs its concurrency already it returns an
// *UpstreamRunFullError and takes nothing. One script in the upstream's
// slot; bad input (name, holder, life < 1 µs) is ErrInvalid.
func (q *Registry) AcquireUpstreamRun(ctx context.Context, name, holder string, life time.Duration) (bool, error) {
	err := CheckName(name)
	if err == nil && (holder == "" || life < time.Microsecond) {
		err = invalidf("holder %q, life %s: want a holder and a life ≥ 1µs", holder, life)
	}
	if err != nil {
		return false, fmt.Errorf("acquire upstream %q lease: %w", name, err)
	}
	d, err := q.runKeys(ctx, scriptUpstreamRun, q.keys.runKeys(name), q.nowArg(), "acquire", holder, life.Microseconds())
	if redisscript.RefusalStatus(err) == "full" {
		full := &UpstreamRunFullError{Name: name, Running: d.Int(1), Retry: redisscript.Micros(d.Int(2))}
		if derr := d.Err(); derr != nil {
			return false, fmt.Errorf("acquire upstream %q lease: %w", name, derr)
		}
		return false, full
	}
	if err != nil {
		return false, fmt.Errorf("acquire upstream %q lease: %w", name, err)
	}
	held := d.Int(1) == 1
	if err := d.Err(); err != nil {
		return false, fmt.Errorf("acquire upstream %q lease: %w", name, err)
	}
	return held, nil
}

// ReleaseUpstreamRun ends holder's lease on upstream name (none held: a
// no-op).
func (q *Registry) ReleaseUpstreamRun(ctx context.Context, name, holder string) error {
	if err := CheckName(name); err != nil {
		return fmt.Errorf("release upstream lease: %w", err)
	}
	if holder == "" {
		return fmt.Errorf("release upstream %q lease: %w", name, invalidf("no holder"))
	}
	if _, err := q.runKeys(ctx, scriptUpstreamRun, q.keys.runKeys(name), q.nowArg(), "release", holder); err != nil {
		return fmt.Errorf("release upstream %q lease: %w", name, err)
	}
	return nil
}

// UpstreamRunning is the number of upstream name's concurrency leases in
// force now: the jobs naming it that are running under its concurrency (0
// for an upstream without one).
func (q *Registry) UpstreamRunning(ctx context.Context, name string) (int64, error) {
	if err := CheckName(name); err != nil {
		return 0, fmt.Errorf("count upstream leases: %w", err)
	}
	d, err := q.runKeys(ctx, scriptUpstreamRun, q.keys.runKeys(name), q.nowArg(), "count")
	if err != nil {
		return 0, fmt.Errorf("count upstream %q leases: %w", name, err)
	}
	n := d.Int(1)
	if err := d.Err(); err != nil {
		return 0, fmt.Errorf("count upstream %q leases: %w", name, err)
	}
	return n, nil
}

// HolderOf is the lease holder of a job's attempt: "<id>:<gen>", so that a
// later attempt of the same job (the sweep returned the first) is another
// holder.
func HolderOf(id string, gen int64) string { return fmt.Sprintf("%s:%d", id, gen) }

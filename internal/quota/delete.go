package quota

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// UpstreamInUseError is DeleteUpstream's refusal while jobs wait on or run
// under the upstream: Waiting (queued in lanes naming it, by tenant; at
// most store.UpstreamRuntimeTenantsPerShard tenants per shard) and Running (its
// concurrency leases in force).
type UpstreamInUseError struct {
	Name    string
	Waiting map[string]int64
	Running int64
}

func (e *UpstreamInUseError) Error() string {
	var n int64
	for _, w := range e.Waiting {
		n += w
	}
	return fmt.Sprintf("upstream %q is in use: %d jobs of %d tenants wait on it (%v), %d run under its concurrency",
		e.Name, n, len(e.Waiting), slices.Sorted(maps.Keys(e.Waiting)), e.Running)
}

// DeleteUpstream removes upstream name from the registry: its hash, the
// coordinator's keys and its concurrency leases, then its listing entry.
// ifMatch is an If-Match value as for PutUpstream ("" or "*": any
// version; a stale one is a *VersionMismatchError, Upstream set). It refuses with an
// *UpstreamInUseError while jobs wait on it (UpstreamRuntime's
// WaitingByTenant: the jobs queued in the shards' lanes naming it) or run
// under its concurrency (leases in force), and with ErrUpstreamNotFound
// when it has no record. Jobs naming it in a shard's delayed set (run_at,
// a retry's backoff) are not seen: when due they reach their lane, the
// shard's dispatcher asks the coordinator for room, is told the upstream
// does not exist, and dead-letters them (store.DeadLetterUnknownUpstream,
// reason store.DeadReasonUnknownUpstream). Jobs naming it that are released or running
// without a lease are not seen either: they finish normally (a cost correction
// or a throttle pause of a deleted upstream does nothing). The check and
// the delete are two steps: a job enqueued between them (the API's
// upstream cache is up to a second old) is dead-lettered likewise.
func (q *Registry) DeleteUpstream(ctx context.Context, name, ifMatch string) error {
	want, err := ParseUpstreamIfMatch(ifMatch)
	if err == nil {
		err = CheckName(name)
	}
	if err != nil {
		return fmt.Errorf("delete upstream %q: %w", name, err)
	}
	rt, err := q.UpstreamRuntime(ctx, name)
	if err != nil {
		return fmt.Errorf("delete upstream %q: %w", name, err)
	}
	if len(rt.WaitingByTenant) > 0 || rt.Running > 0 {
		return fmt.Errorf("delete upstream %q: %w", name,
			&UpstreamInUseError{Name: name, Waiting: rt.WaitingByTenant, Running: rt.Running})
	}
	d, err := q.runKeys(ctx, scriptUpstreamDelete, q.keys.deleteKeys(name), q.nowArg(), max(want, AnyVersion))
	switch redisscript.RefusalStatus(err) {
	case redisscript.StatusVersionMismatch:
		err = &VersionMismatchError{Upstream: name, Want: want, Current: d.Int(1)}
	case redisscript.StatusNotFound:
		err = ErrUpstreamNotFound
	case "in_use":
		err = &UpstreamInUseError{Name: name, Waiting: map[string]int64{}, Running: d.Int(1)}
	}
	if err != nil {
		return fmt.Errorf("delete upstream %q: %w", name, err)
	}
	if err := q.rdb.ZRem(ctx, q.keys.upstreams(), name).Err(); err != nil {
		return fmt.Errorf("delete upstream %q from the listing: %w", name, err)
	}
	return nil
}

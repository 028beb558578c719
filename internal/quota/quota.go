package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// Sentinel errors; test with errors.Is. They are the script runner's
// (redisscript), the same values internal/store exports, so a caller tests
// one error whichever package answered.
var (
	// ErrInvalid: an argument is out of range or malformed.
	ErrInvalid = redisscript.ErrInvalid
	// ErrVersionMismatch: a write's If-Match version is not current;
	// returned as a *VersionMismatchError.
	ErrVersionMismatch = redisscript.ErrVersionMismatch
	// ErrProtocol: a script reply or a registry hash did not have the
	// expected shape: a bug or a version skew, never bad input.
	ErrProtocol = redisscript.ErrUnexpectedReply
	// ErrUpstreamNotFound: no upstream of that name is registered.
	ErrUpstreamNotFound = errors.New("no such upstream")
)

// Config configures a Registry. Prefix and Shards are the Store's
// (store.Config), which validates them.
type Config struct {
	// Prefix starts every key. Required.
	Prefix string
	// Shards is the number of the Store's shards (AlignUpstreams checks a
	// shard against it), ≥ 1.
	Shards int
	// Clock, when set, replaces Redis TIME as every script's now (tests).
	Clock func() time.Time
	// Waiting reads the jobs the shards hold waiting on upstream name, by
	// tenant, and whether the reading was cut short (the store's lanes:
	// store.Store.UpstreamWaiting). UpstreamRuntime reports them and
	// DeleteUpstream refuses while there are any. Nil: none are.
	Waiting func(ctx context.Context, name string) (byTenant map[string]int64, truncated bool, err error)
}

// Registry is the upstream registry and the upstreams' coordinator in
// Redis (the package doc). It holds no state besides its configuration;
// safe for concurrent use.
type Registry struct {
	rdb     redis.UniversalClient
	keys    keyspace
	shards  int
	clock   func() time.Time
	runner  *redisscript.Runner
	waiting func(ctx context.Context, name string) (map[string]int64, bool, error)
}

// New returns a Registry on rdb (the caller owns it). A missing prefix or
// a shard count below 1 is an error wrapping ErrInvalid.
func New(rdb redis.UniversalClient, cfg Config) (*Registry, error) {
	if cfg.Prefix == "" || cfg.Shards < 1 {
		return nil, fmt.Errorf("new upstream registry: %w", invalidf("prefix %q, shards %d: want a prefix and ≥ 1 shard", cfg.Prefix, cfg.Shards))
	}
	return &Registry{rdb: rdb, keys: keyspace{prefix: cfg.Prefix}, shards: cfg.Shards, clock: cfg.Clock,
		runner: redisscript.NewRunner(rdb, nil), waiting: cfg.Waiting}, nil
}

// runKeys runs sc with keys and argv (redisscript.Runner.RunStatus).
func (q *Registry) runKeys(ctx context.Context, sc *redisscript.Script, keys []string, argv ...any) (redisscript.Decoder, error) {
	return q.runner.RunStatus(ctx, sc, keys, argv...)
}

// nowArg is a script's now argument (redisscript.NowArg).
func (q *Registry) nowArg() string { return redisscript.NowArg(q.clock) }

// redisNow is the scripts' now in µs: the injected clock, else Redis TIME.
func (q *Registry) redisNow(ctx context.Context) (int64, error) {
	if q.clock != nil {
		return q.clock().UnixMicro(), nil
	}
	t, err := q.rdb.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	return t.UnixMicro(), nil
}

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// VersionMismatchError reports the current version of the upstream a stale
// If-Match named (0 when it does not exist).
type VersionMismatchError struct {
	Upstream string
	Want     int64
	Current  int64
}

func (e *VersionMismatchError) Error() string {
	return fmt.Sprintf("upstream %q is at version %d, not %d", e.Upstream, e.Current, e.Want)
}

// Is makes errors.Is(err, ErrVersionMismatch) true.
func (e *VersionMismatchError) Is(target error) bool { return target == ErrVersionMismatch }

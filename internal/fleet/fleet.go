package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// ErrInvalid: an argument is out of range or malformed. It is the script
// runner's (redisscript), the same value internal/store exports.
var ErrInvalid = redisscript.ErrInvalid

// Config configures a Roster. Prefix is the Store's (store.Config), which
// validates it.
type Config struct {
	// Prefix starts every key. Required.
	Prefix string
	// Clock, when set, replaces Redis TIME as every script's now (tests).
	Clock func() time.Time
}

// Roster is the registry of live workers and task middleware instances in
// Redis (the package doc). It holds no state besides its configuration;
// safe for concurrent use.
type Roster struct {
	rdb    redis.UniversalClient
	keys   keyspace
	clock  func() time.Time
	runner *redisscript.Runner
}

// New returns a Roster on rdb (the caller owns it). A missing prefix is an
// error wrapping ErrInvalid.
func New(rdb redis.UniversalClient, cfg Config) (*Roster, error) {
	if cfg.Prefix == "" {
		return nil, fmt.Errorf("new worker roster: %w", invalidf("prefix: required"))
	}
	return &Roster{rdb: rdb, keys: keyspace{prefix: cfg.Prefix}, clock: cfg.Clock,
		runner: redisscript.NewRunner(rdb, nil)}, nil
}

// runKeys runs sc with keys and argv (redisscript.Runner.RunStatus).
func (f *Roster) runKeys(ctx context.Context, sc *redisscript.Script, keys []string, argv ...any) (redisscript.Decoder, error) {
	return f.runner.RunStatus(ctx, sc, keys, argv...)
}

// nowArg is a script's now argument (redisscript.NowArg).
func (f *Roster) nowArg() string { return redisscript.NowArg(f.clock) }

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

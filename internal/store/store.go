package store

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/fleet"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/tuning"
)

// Defaults and bounds of Config (their values: internal/tuning).
const (
	PrefixDefault = tuning.PrefixDefault
	ShardsDefault = tuning.ShardsDefault
	// MaxShards bounds Shards (redis.shards): every shard is a dispatch
	// loop, a lease and a pass per wake-up in each throttler, so the bound
	// is far below Redis Cluster's 16384 slots.
	MaxShards                = tuning.MaxShards
	CanceledRetentionDefault = tuning.CanceledRetentionDefault
	// WaitTimeoutDefault is Config.WaitTimeout's default; MaxWaitTimeout
	// its bound, below go-redis's 3 s read timeout (a WAIT must be answered
	// within one read).
	WaitTimeoutDefault = tuning.WaitTimeoutDefault
	MaxWaitTimeout     = tuning.MaxWaitTimeout
	// MaxWaitReplicas bounds Config.WaitReplicas.
	MaxWaitReplicas = tuning.MaxWaitReplicas
)

// Config configures a Store. The zero value is valid: every field has a default.
type Config struct {
	// Prefix starts every key: 1–64 characters of [A-Za-z0-9._-].
	// Default PrefixDefault.
	Prefix string
	// Shards is the number of shards, 1 … MaxShards (one Cluster slot each).
	// It is fixed for the life of the data (job ids carry their shard).
	// Default ShardsDefault.
	Shards int
	// CanceledRetention is how long a canceled job's tombstone and its
	// idempotency key are kept, at least 1ms. Default CanceledRetentionDefault.
	CanceledRetention time.Duration
	// IdempotencyRetention is how long a canceled job's idempotency key is
	// kept; 0 means as long as the tombstone (CanceledRetention).
	IdempotencyRetention time.Duration
	// WaitReplicas, when > 0, makes Enqueue and Replay confirm their
	// writes with WAIT WaitReplicas WaitTimeout on the connection (and
	// master) that ran them, and report fewer confirmations as a
	// *NotReplicatedError. 0 … MaxWaitReplicas; default 0 (asynchronous
	// replication: a 202 can be lost in a failover).
	WaitReplicas int
	// WaitTimeout bounds each WAIT: 1ms … MaxWaitTimeout; default
	// WaitTimeoutDefault. Unused when WaitReplicas is 0.
	WaitTimeout time.Duration
	// MemoryHighWater is the share of a master's maxmemory up to which
	// Finish keeps http results' bodies (config redis.memory_high_water,
	// the mark above which the API refuses new jobs): a body that would
	// take Redis past it is cut to the room left, or dropped, and its
	// result says so (TruncatedStorageFull); the outcome is recorded all
	// the same. 0 … <1; 0 (the guard off) keeps bodies up to maxmemory
	// itself. A master without maxmemory keeps every body. A finish whose
	// results carry at most 4 KiB in all is written without the check
	// (like the attempt log's excerpts); one carrying more reads INFO
	// memory once (about 25 µs of Redis CPU).
	MemoryHighWater float64
	// Clock, when set, replaces Redis TIME as every script's now (tests).
	// Nil in production: one clock, Redis's, for every host.
	Clock func() time.Time
	// Planner is where Pass decides a pass's release: PlannerLua (the
	// default), pass.lua in Redis; PlannerGo, the caller, with
	// internal/plan, when the pass needs nothing only pass.lua does (then
	// pass.lua all the same). docs/design.md "Where the decisions run".
	Planner string
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, PrefixDefault)
	c.Shards = cmp.Or(c.Shards, ShardsDefault)
	c.CanceledRetention = cmp.Or(c.CanceledRetention, CanceledRetentionDefault)
	c.WaitTimeout = cmp.Or(c.WaitTimeout, WaitTimeoutDefault)
	c.Planner = cmp.Or(c.Planner, PlannerLua)
	return c
}

var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func (c Config) validate() error {
	var errs []error
	if !prefixPattern.MatchString(c.Prefix) {
		errs = append(errs, invalidf("prefix %q: want 1–64 characters of [A-Za-z0-9._-]", c.Prefix))
	}
	if c.Planner != PlannerLua && c.Planner != PlannerGo {
		errs = append(errs, invalidf("planner %q: want %q or %q", c.Planner, PlannerLua, PlannerGo))
	}
	if c.Shards < 1 || c.Shards > MaxShards {
		errs = append(errs, invalidf("shards %d: want 1 … %d", c.Shards, MaxShards))
	}
	if c.CanceledRetention < time.Millisecond {
		errs = append(errs, invalidf("canceled retention %s: want at least 1ms", c.CanceledRetention))
	}
	if c.WaitReplicas < 0 || c.WaitReplicas > MaxWaitReplicas {
		errs = append(errs, invalidf("wait replicas %d: want 0 … %d", c.WaitReplicas, MaxWaitReplicas))
	}
	if !(c.MemoryHighWater >= 0 && c.MemoryHighWater < 1) {
		errs = append(errs, invalidf("memory high water %v: want 0 (maxmemory) or above 0 and below 1", c.MemoryHighWater))
	}
	if c.WaitTimeout < time.Millisecond || c.WaitTimeout > MaxWaitTimeout {
		errs = append(errs, invalidf("wait timeout %s: want 1ms … %s", c.WaitTimeout, MaxWaitTimeout))
	}
	return errors.Join(errs...)
}

// Store is the Redis layer of tenant backlogs. It is safe for concurrent use;
// it holds no state of its own besides its configuration, so any number of
// Stores in any number of processes may share one Redis.
type Store struct {
	rdb           redis.UniversalClient
	keys          keyspace
	retention     time.Duration
	idemRetention time.Duration
	clock         func() time.Time
	planGo        bool          // Config.Planner is PlannerGo
	plans         *planPolicies // the planner's policies, per shard and epoch
	// seed draws the retry jitter seed of each finish and pass; tests
	// replace it to make the jitter deterministic.
	seed func() uint64
	// jobID makes a new job's id (NewJobID); tests replace it to make ids
	// deterministic.
	jobID func(shard int, at time.Time) (string, error)
	// runner runs the scripts: the library's functions by FCALL until Redis
	// turns out to have no Functions, EVALSHA then.
	runner *redisscript.Runner
	// wait is the replication Enqueue and Replay confirm (Config.WaitReplicas).
	wait redisscript.Wait
	// resultMark is Config.MemoryHighWater in parts per million of
	// maxmemory (finish.lua), 1 … 10⁶.
	resultMark int64
	// enqueues shares enqueue calls among concurrent callers, per shard
	// (Enqueue).
	enqueues *batcher[int, *enqueueReq]

	// The upstream registry and coordinator (PutUpstream, GrantUpstreams,
	// AcquireUpstreamRun, …) and the worker roster (Heartbeat, Capacity,
	// TaskWorkers, …), on the same Redis, prefix and clock: their methods
	// are the Store's.
	*quota.Registry
	*fleet.Roster
}

// NewStore returns a Store on rdb (a plain client or a Cluster client; the
// caller owns it and closes it). cfg is completed with WithDefaults.
func NewStore(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new dispatch store: %w", err)
	}
	s := &Store{
		rdb:       rdb,
		keys:      keyspace{prefix: cfg.Prefix, shards: cfg.Shards},
		retention: cfg.CanceledRetention, idemRetention: cfg.IdempotencyRetention,
		clock:      cfg.Clock,
		planGo:     cfg.Planner == PlannerGo,
		plans:      &planPolicies{},
		seed:       rand.Uint64,
		jobID:      NewJobID,
		runner:     redisscript.NewRunner(rdb, librarySource),
		wait:       waitConfig(cfg),
		resultMark: markPPM(cfg.MemoryHighWater),
	}
	s.enqueues = newEnqueueBatcher(s)
	var err error
	s.Registry, err = quota.New(rdb, quota.Config{Prefix: cfg.Prefix, Shards: cfg.Shards, Clock: cfg.Clock,
		Waiting: s.UpstreamWaiting})
	if err != nil {
		return nil, fmt.Errorf("new dispatch store: %w", err)
	}
	if s.Roster, err = fleet.New(rdb, fleet.Config{Prefix: cfg.Prefix, Clock: cfg.Clock}); err != nil {
		return nil, fmt.Errorf("new dispatch store: %w", err)
	}
	return s, nil
}

// markPPM is a high-water share in parts per million of maxmemory, at
// least 1; 0 (off) is maxmemory itself.
func markPPM(share float64) int64 {
	if share == 0 {
		return 1_000_000
	}
	return max(int64(share*1_000_000), 1)
}

// Shards is the configured number of shards.
func (s *Store) Shards() int { return s.keys.shards }

// now is the injected clock or, without one, the local clock — used only for
// the millisecond inside new job ids, never for a decision.
func (s *Store) now() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

// Package config is Sluice's configuration contract (docs/design.md §7): the YAML
// file both binaries read, its defaults, environment overrides and
// validation.
//
// Binaries call FromFlags (--config PATH, else $SLUICE_CONFIG, else no file);
// $SLUICE_REDIS_URL and $SLUICE_LISTEN override the file. With no file at all
// every value is its default, which is a safe local setup: Redis at
// redis://127.0.0.1:6379/0, the API on 127.0.0.1:8080 and no API keys (every
// /v1 request is refused until keys are configured). Unknown keys are errors,
// and validation reports every problem at once, each named by its path
// ("limits.search.burst: must be at least 1, got 0").
//
// Durations are Go durations ("200ms", "15s"), rates "N/s", "N/m", "N/h" or "N/d",
// sizes "1MiB" (see policy.ByteSize). A zero or absent value means the
// default, as documented on each field.
//
// RedisConfig.Client is the one place a Redis client is built from
// configuration: a *redis.Client, a *redis.ClusterClient or a
// Sentinel-backed *redis.Client (Kind), each with ContextTimeoutEnabled and
// 4 KiB connection buffers (RedisBufferSize), so a pool's high-water mark
// costs little heap. Everything downstream takes a redis.UniversalClient;
// nothing type-switches on it. SecretsConfig prints without secrets.key.
//
// Settings live at three levels (docs/design.md §7): a tenant's policy
// (package policy; this file seeds the defaults and tenants, Redis holds
// them at run time), the deployment-wide settings written to <p>:meta
// (Meta: fixed ones — shards, hash, D, L — checked by every process, the
// adjustable ones written by every throttler at start and re-read by every
// process every few seconds), and each process's own (listen addresses,
// concurrency, fetchers, task-check interval, log), which stay in its file.
package config

import (
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/upstream"
)

// Config is the whole configuration. Load (or FromFlags) returns it with
// defaults applied, plaintext keys hashed and every value validated; a
// Config changed or built in code afterwards is not re-validated.
type Config struct {
	// Listen is the API's listen address, host:port; default ListenDefault.
	// $SLUICE_LISTEN overrides it.
	Listen string `yaml:"listen"`
	// Redis locates Redis and Sluice's keys in it.
	Redis RedisConfig `yaml:"redis"`
	// Auth lists the API keys.
	Auth AuthConfig `yaml:"auth"`
	// Defaults are the policy overrides every tenant gets (the `*` field of
	// the policy hash), merged over policy.Builtin.
	Defaults policy.Overrides `yaml:"defaults"`
	// Tenants holds per-tenant policy overrides, merged over Defaults; keys
	// are tenant ids (policy.ValidTenantID).
	Tenants map[string]policy.Overrides `yaml:"tenants"`
	// Upstreams are the shared upstream quotas jobs may name, by name
	// (upstream.ValidName); each entry's zero fields take upstream's
	// defaults. The throttler seeds them at start (store.SeedUpstreams):
	// an upstream changed by PUT /v1/upstreams/{name} keeps Redis's
	// configuration. Default none.
	Upstreams map[string]upstream.Config `yaml:"upstreams"`
	// Limits are named rate limits: APILimitName is the API's own limiter per
	// API key, the others serve POST /v1/limits/{name}/check. Names are 1–64
	// characters of [A-Za-z0-9_.-]. When `api` is absent it is
	// DefaultAPILimit().
	Limits map[string]LimitConfig `yaml:"limits"`
	// Dispatch tunes the dispatcher loops.
	Dispatch DispatchConfig `yaml:"dispatch"`
	// Throttle tunes reactions to upstream pushback.
	Throttle ThrottleConfig `yaml:"throttle"`
	// Circuit tunes the destinations' circuits (docs/design.md §4.5).
	Circuit CircuitConfig `yaml:"circuit"`
	// Retention bounds how long finished work is kept.
	Retention RetentionConfig `yaml:"retention"`
	// LimitsBytes bounds request and job sizes.
	LimitsBytes LimitsBytesConfig `yaml:"limits_bytes"`
	// TaskQueues are the asynq queues `task` jobs may name; default
	// [TaskQueueDefault]. Names are non-empty, unique and hold no braces.
	TaskQueues []string `yaml:"task_queues"`
	// Egress opens address ranges the SSRF guard would refuse.
	Egress EgressConfig `yaml:"egress"`
	// Worker tunes the worker binary.
	Worker WorkerConfig `yaml:"worker"`
	// Log selects the log format and level.
	Log LogConfig `yaml:"log"`
	// Secrets configures webhook secrets by API: the key that encrypts them
	// in Redis, and whether defaults.webhook_secrets may be shared.
	Secrets SecretsConfig `yaml:"secrets"`
	// Metrics tunes the throttler's per-tenant metrics.
	Metrics MetricsConfig `yaml:"metrics"`
	// UI configures the operator console at /ui/ (default: served).
	UI UIConfig `yaml:"ui"`
}

// Defaults of the top-level fields and of RedisConfig.
const (
	ListenDefault      = "127.0.0.1:8080"
	RedisURLDefault    = "redis://127.0.0.1:6379/0"
	RedisPrefixDefault = tuning.PrefixDefault
	TaskQueueDefault   = job.DefaultTaskQueue
)

// RedisConfig locates Redis. Shards and Prefix are fixed in <prefix>:meta on
// first start; changing them later is an offline command.
//
// Three deployments, picked by what is set (Kind):
//   - a single node: URL only (redis://, rediss:// or unix://);
//   - a Redis Cluster: Addrs (with or without Cluster: true), or Cluster:
//     true with a redis:// URL whose host is the one seed, or a
//     redis+cluster:// URL (see URL);
//   - Sentinel: Sentinel.MasterName and Sentinel.Addrs, or a
//     redis+sentinel:// URL.
//
// Setting two of them (Sentinel with Addrs or Cluster, a redis+cluster://
// URL with Sentinel, a redis+sentinel:// URL with Addrs or Cluster …) is
// an error.
type RedisConfig struct {
	// URL is a go-redis URL; default RedisURLDefault. $SLUICE_REDIS_URL
	// overrides it. redis://, rediss:// or unix:// name a single node — or,
	// with Addrs, Cluster or Sentinel set, supply only credentials, TLS and
	// (Sentinel) the database: the database must be 0 on a Cluster.
	// redis+cluster://[user:pass@]host:port?addr=host2:port2&addr=… (or
	// rediss+cluster://) is a Cluster seeded with every address (go-redis
	// ParseClusterURL after the scheme's "+cluster" is dropped; its other
	// query options apply). redis+sentinel://[user:pass@]host:port[/db]?
	// addr=host2:port2&master_name=NAME[&username=…&password=…] (or
	// rediss+sentinel://) is Sentinel: the URL's hosts are sentinels, its
	// userinfo the sentinels' credentials and the username and password
	// parameters the primary's (go-redis ParseFailoverURL).
	URL string `yaml:"url"`
	// Addrs, when not empty, selects Redis Cluster with these host:port seed
	// addresses.
	Addrs []string `yaml:"addrs"`
	// Cluster selects Redis Cluster explicitly: seeded by Addrs, or by the
	// URL's host when Addrs is empty. Default false (Addrs alone selects
	// Cluster too).
	Cluster bool `yaml:"cluster"`
	// Sentinel, when its MasterName or Addrs is set, selects a primary
	// managed by Redis Sentinel.
	Sentinel SentinelConfig `yaml:"sentinel"`
	// Prefix starts every Sluice key; 1–64 characters of [A-Za-z0-9_.-];
	// default RedisPrefixDefault.
	Prefix string `yaml:"prefix"`
	// Shards is the number of shards, 1…tuning.MaxShards; default
	// tuning.ShardsDefault.
	Shards int `yaml:"shards"`
	// RequestTimeout bounds the Redis work of one API request (every /v1
	// route; /readyz has its own bound, api.ReadyTimeoutDefault): past it
	// the request answers 503 unavailable. Positive, at most
	// MaxRequestTimeout; default RequestTimeoutDefault.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// WaitReplicas, when > 0, makes every write that accepts a job (enqueue,
	// batch, replay) answer only after WAIT confirms it on this many
	// replicas; fewer within WaitTimeout is a 503 replication_timeout (the
	// job possibly stored). 0 … tuning.MaxWaitReplicas; default 0
	// (asynchronous replication).
	WaitReplicas int `yaml:"wait_replicas"`
	// WaitTimeout bounds the WAIT: 1ms … tuning.MaxWaitTimeout and below
	// RequestTimeout (the script and the WAIT share one request's budget);
	// default WaitTimeoutDefault, or half of RequestTimeout when that is
	// less.
	WaitTimeout time.Duration `yaml:"wait_timeout"`
	// MemoryHighWater is the share of a Redis master's maxmemory above
	// which the API refuses new jobs for the shards it stores (507
	// storage_full), so that the dispatch path — the hand-off to asynq,
	// asynq's dequeue, claims, finishes — keeps the rest as headroom and
	// drains the backlog while producers wait (api.Options.MemoryHighWater).
	// 0 turns the check off (Redis's own maxmemory is then the only limit,
	// and delivery stalls when it is reached); otherwise above 0 and below
	// 1. Unset: MemoryHighWaterDefault. A master without maxmemory is never
	// refused.
	MemoryHighWater *float64 `yaml:"memory_high_water"`
}

// MemoryHighWaterDefault is RedisConfig.MemoryHighWater's default.
const MemoryHighWaterDefault = 0.9

// HighWater is MemoryHighWater with its default: 0 when off.
func (r RedisConfig) HighWater() float64 {
	if r.MemoryHighWater == nil {
		return MemoryHighWaterDefault
	}
	return *r.MemoryHighWater
}

// WaitTimeoutDefault is RedisConfig.WaitTimeout's default (when below half
// of RequestTimeout).
const WaitTimeoutDefault = tuning.WaitTimeoutDefault

// SentinelConfig locates a primary through Redis Sentinel. The primary's
// credentials, TLS and database come from RedisConfig.URL.
type SentinelConfig struct {
	// MasterName is the name the sentinels monitor the primary under;
	// required with Addrs.
	MasterName string `yaml:"master_name"`
	// Addrs are the sentinels' host:port addresses; at least one.
	Addrs []string `yaml:"addrs"`
	// Username and Password authenticate to the sentinels (not to the
	// primary); default none.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
}

// RequestTimeoutDefault is RedisConfig.RequestTimeout's default, and
// MaxRequestTimeout its upper bound.
const (
	RequestTimeoutDefault = time.Second
	MaxRequestTimeout     = time.Minute
)

// DispatchConfig holds the dispatcher's timing (docs/design.md §1 "Timing and
// symbols"). Lead and MinLead are fixed in <prefix>:meta once written.
type DispatchConfig struct {
	// Lead is D, the release window: jobs whose slot is ≤ now + D may be
	// handed to asynq; ≥ 2 × MinLead; default tuning.LeadDefault.
	Lead time.Duration `yaml:"lead"`
	// MinLead is L, the pickup horizon: a released job's slot at least L
	// away is spaced from other such slots and claimed at the slot; a
	// nearer one is claimed when a worker picks it up. ≥ 1.5 ×
	// Worker.TaskCheckInterval; default tuning.MinLeadDefault.
	MinLead time.Duration `yaml:"min_lead"`
	// Tolerance is ε, how early before its slot a claim is accepted; default
	// tuning.ToleranceDefault.
	Tolerance time.Duration `yaml:"tolerance"`
	// Grace is the lease slack of a released job past its slot; ≥ Tolerance;
	// default tuning.GraceDefault.
	Grace time.Duration `yaml:"grace"`
	// MaxPromotions is P, the most jobs promoted per pass; default
	// tuning.MaxPromotionsDefault.
	MaxPromotions int `yaml:"max_promotions"`
	// MaxTenants is K, the most tenants visited per pass; default
	// tuning.MaxTenantsDefault.
	MaxTenants int `yaml:"max_tenants"`
	// BatchMax is the most webhook and http jobs one hand-off batch (one
	// asynq task) carries; 1 … tuning.BatchMaxLimit; default
	// tuning.BatchMaxDefault.
	BatchMax int `yaml:"batch_max"`
	// BatchSpan is the widest span of send times within one batch; > 0;
	// default MinLead (a pass, spanning up to Lead, hands off at least
	// Lead/MinLead batches).
	BatchSpan time.Duration `yaml:"batch_span"`
	// MaxSleep is the longest a dispatcher's shard loop sleeps without a
	// wake-up: the safety net under the wake-ups (an idle shard costs one
	// pass per MaxSleep); > 0; default tuning.MaxSleepDefault.
	MaxSleep time.Duration `yaml:"max_sleep"`
	// PreclaimDisabled turns the pass's pre-claim off (docs/design.md
	// §2.2): every job is then claimed by its worker at its slot, one
	// script more per job. Default false: a job due within Tolerance when
	// the pass releases it is claimed by the pass (while every live worker
	// runs pre-claimed jobs).
	PreclaimDisabled bool `yaml:"preclaim_disabled"`
	// Planner is where a pass's release is decided (docs/design.md "Where
	// the decisions run"): "lua", in Redis by the pass script (the
	// default), or "go", by this throttler with internal/plan and written
	// by a script that decides nothing — the pass script all the same for
	// a pass that promotes, sweeps, trims the tenant index or visits a
	// tenant with lanes, upstreams or an open destination. Both leave Redis
	// in the same state; each throttler follows its own.
	Planner string `yaml:"planner"`
}

// The values of DispatchConfig.Planner.
const (
	PlannerLua = "lua"
	PlannerGo  = "go"
)

// AdaptiveFloorDefault is ThrottleConfig.AdaptiveFloor's default:
// tuning.AdaptiveFloorPPMDefault as a fraction.
const AdaptiveFloorDefault = float64(tuning.AdaptiveFloorPPMDefault) / tuning.RateFactorFull

// ThrottleConfig tunes reactions to "slow down" from upstream (docs/design.md §4.2).
type ThrottleConfig struct {
	// DefaultPause is the pause after a 429 without Retry-After; default
	// tuning.DefaultPauseDefault.
	DefaultPause time.Duration `yaml:"default_pause"`
	// MaxPause caps any upstream-requested pause; ≥ DefaultPause; default
	// tuning.MaxPauseDefault.
	MaxPause time.Duration `yaml:"max_pause"`
	// AdaptiveFloor is the lowest fraction of its rate an adaptive tenant is
	// cut to; 0 < x ≤ 1; default AdaptiveFloorDefault.
	AdaptiveFloor float64 `yaml:"adaptive_floor"`
}

// CircuitConfig tunes the circuit every destination (scheme, host, port of
// a webhook or http job's URL) has (docs/design.md §4.5): deployment-wide,
// in <prefix>:meta.
type CircuitConfig struct {
	// Failures is how many consecutive timeouts or connection failures to a
	// destination open its circuit; 1 … tuning.MaxCircuitFailures; default
	// tuning.CircuitFailuresDefault.
	Failures int `yaml:"failures"`
	// Backoff is how long a circuit stays open after it opens; each failed
	// probe doubles it, up to MaxBackoff; default tuning.CircuitBackoffDefault.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff caps the doubled backoff; ≥ Backoff; default
	// tuning.CircuitMaxBackoffDefault.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// Disabled turns the circuits off: every job is sent whatever its
	// destination did before. Default false.
	Disabled bool `yaml:"disabled"`
}

// RetentionConfig bounds how long finished work is kept (docs/design.md §3
// "Expiry"). The defaults are the store package's.
type RetentionConfig struct {
	// Succeeded keeps a succeeded job's hash; default tuning.SucceededRetentionDefault.
	Succeeded time.Duration `yaml:"succeeded"`
	// Canceled keeps a canceled job's hash; default tuning.CanceledRetentionDefault.
	Canceled time.Duration `yaml:"canceled"`
	// Dead keeps dead letters; default tuning.DeadRetentionDefault.
	Dead time.Duration `yaml:"dead"`
	// DeadMaxPerTenant caps a tenant's dead set; default
	// tuning.DeadMaxPerTenantDefault.
	DeadMaxPerTenant int `yaml:"dead_max_per_tenant"`
	// AttemptLog is how many attempt log entries a job keeps; default
	// tuning.AttemptLogDefault.
	AttemptLog int `yaml:"attempt_log"`
	// Idempotency keeps an idempotency key past its job's terminal time;
	// default tuning.IdempotencyRetentionDefault.
	Idempotency time.Duration `yaml:"idempotency"`
}

// Defaults of LimitsBytesConfig.
const (
	MaxJobBytesDefault   = policy.MiB
	MaxBatchBytesDefault = 16 * policy.MiB
)

// LimitsBytesConfig bounds request and job sizes.
type LimitsBytesConfig struct {
	// MaxJobBytes bounds one job's body; default MaxJobBytesDefault.
	MaxJobBytes policy.ByteSize `yaml:"max_job_bytes"`
	// MaxBatchBytes bounds a batch request's body; ≥ MaxJobBytes; default
	// MaxBatchBytesDefault.
	MaxBatchBytes policy.ByteSize `yaml:"max_batch_bytes"`
}

// EgressConfig opens ranges for outgoing requests.
type EgressConfig struct {
	// Allow lists CIDR prefixes ("10.1.0.0/16", "::1/128") the SSRF guard
	// lets through; default none. See Prefixes.
	Allow []string `yaml:"allow"`
}

// Defaults of WorkerConfig.
const (
	WorkerConcurrencyDefault = 100
	FetchersDefault          = 4
	IdlePollDefault          = tuning.SafetyNetDefault
	TaskCheckIntervalDefault = tuning.TaskCheckIntervalDefault
	ShutdownTimeoutDefault   = 20 * time.Second
)

// WorkerConfig tunes the worker binary's asynq server.
type WorkerConfig struct {
	// Concurrency is the jobs one worker process runs at once; default
	// WorkerConcurrencyDefault.
	Concurrency int `yaml:"concurrency"`
	// TaskCheckInterval is asynq's idle poll interval (TCI); default
	// TaskCheckIntervalDefault.
	TaskCheckInterval time.Duration `yaml:"task_check_interval"`
	// ShutdownTimeout bounds the drain at shutdown; default
	// ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Fetchers is how many asynq servers the process runs, sharing
	// Concurrency between them; default min(FetchersDefault, Concurrency).
	// One asynq server fetches one task (a batch of jobs) per Redis round
	// trip, and under load a round trip waits behind the dispatch scripts
	// (milliseconds): four fetch side by side. Idle, they cost no more
	// than one (the dequeue gate polls each queue once per idle poll
	// whatever the servers, and only the first runs asynq's forwarder and
	// janitor).
	Fetchers int `yaml:"fetchers"`
	// IdlePoll is the longest a hand-off queue believed empty goes without
	// a real poll (worker.GateConfig.SafetyNet): between announcements of
	// new batches the worker does not poll Redis, except this often per
	// queue in case an announcement was lost; default IdlePollDefault.
	IdlePoll time.Duration `yaml:"idle_poll"`
}

// Defaults of LogConfig.
const (
	LogFormatDefault = "text"
	LogLevelDefault  = "info"
	LogAsynqDefault  = "warn"
)

// LogConfig selects logging.
type LogConfig struct {
	// Format is "text" or "json"; default LogFormatDefault.
	Format string `yaml:"format"`
	// Level is "debug", "info", "warn" or "error"; default LogLevelDefault.
	Level string `yaml:"level"`
	// Asynq is the least level of asynq's own lines in the worker's log,
	// "debug", "info", "warn" or "error"; default LogAsynqDefault (at debug
	// asynq logs "All queues are empty" on every empty poll of every server).
	// A line shows only when Level lets it through too.
	Asynq string `yaml:"asynq"`
}

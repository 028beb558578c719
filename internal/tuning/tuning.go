// Package tuning declares, once, the default and the bounds of every
// engine parameter the configuration file sets (docs/design.md §7): the
// store's shards, wait and pass bounds, retention and throttle; the
// dispatcher's batches, sleep and state metrics; the worker's task check
// interval and dequeue safety net. Their owners — internal/store,
// internal/dispatch, internal/worker — export each under their own
// XxxDefault name and apply it to a zero field of their config structs
// (WithDefaults); internal/config resolves the YAML with the same values
// without importing the engine. It imports no package of this module and
// does no I/O.
package tuning

import (
	"math"
	"time"
)

// The store's parameters (store.Config, store.PassConfig,
// store.FinishConfig; YAML redis, dispatch, retention, throttle).
const (
	PrefixDefault = "sluice"
	ShardsDefault = 16
	// MaxShards bounds Shards (redis.shards): every shard is a dispatch
	// loop, a lease and a pass per wake-up in each throttler, so the bound
	// is far below Redis Cluster's 16384 slots.
	MaxShards                = 1024
	CanceledRetentionDefault = 24 * time.Hour
	// WaitTimeoutDefault is redis.wait_timeout's default; MaxWaitTimeout
	// its bound, below go-redis's 3 s read timeout (a WAIT must be answered
	// within one read).
	WaitTimeoutDefault = 500 * time.Millisecond
	MaxWaitTimeout     = 2 * time.Second
	// MaxWaitReplicas bounds redis.wait_replicas.
	MaxWaitReplicas = 16

	LeadDefault          = 100 * time.Millisecond // D
	MinLeadDefault       = 50 * time.Millisecond  // L
	ToleranceDefault     = 6 * time.Millisecond   // ε: how early a claim is accepted
	GraceDefault         = time.Second
	MaxPromotionsDefault = 1000 // P
	MaxTenantsDefault    = 256  // K

	SucceededRetentionDefault = 24 * time.Hour
	// IdempotencyRetentionDefault is retention.idempotency's default; a
	// zero store.FinishConfig.IdempotencyRetention keeps its meaning (as
	// long as the record).
	IdempotencyRetentionDefault = 24 * time.Hour
	DeadRetentionDefault        = 168 * time.Hour
	DeadMaxPerTenantDefault     = 10_000
	AttemptLogDefault           = 20
	DefaultPauseDefault         = 30 * time.Second
	MaxPauseDefault             = time.Hour
	AdaptiveFloorPPMDefault     = 50_000 // 0.05 of the policy rate

	// The destinations' circuits (docs/design.md §4.5; YAML circuit):
	// consecutive timeouts or connection failures that open one, its first
	// backoff (doubled by each failed probe) and the backoff's cap.
	CircuitFailuresDefault   = 5
	MaxCircuitFailures       = 1000
	CircuitBackoffDefault    = 10 * time.Second
	CircuitMaxBackoffDefault = 10 * time.Minute
)

// RateFactorFull is the rate factor of a tenant at its full policy rate:
// rate factors are in parts per million (docs/design.md §4.2, adaptive).
const RateFactorFull = 1_000_000

// PPM turns a fraction (config throttle.adaptive_floor) into parts per
// million, rounded to the nearest and clamped to 1 … RateFactorFull.
func PPM(fraction float64) int64 {
	return min(max(int64(math.Round(fraction*RateFactorFull)), 1), RateFactorFull)
}

// The dispatcher's parameters (dispatch.Config, dispatch.StateConfig; YAML
// dispatch, metrics).
const (
	BatchMaxDefault = 64
	MaxSleepDefault = 2 * time.Second
	// BatchMaxLimit is the most jobs a batch may carry (dispatch.batch_max's
	// bound).
	BatchMaxLimit = 1000
	// TopTenantsDefault is metrics.top_tenants' default.
	TopTenantsDefault = 100
	// MaxLabeledTenants bounds metrics.top_tenants: at most this many
	// tenants (plus the summed others) get label values.
	MaxLabeledTenants = 1000
	// StateCacheDefault is metrics.cache_for's default.
	StateCacheDefault = 5 * time.Second
)

// The worker's parameters (worker.Config, worker.GateConfig; YAML worker).
const (
	TaskCheckIntervalDefault = 20 * time.Millisecond // TCI
	// SafetyNetDefault is worker.idle_poll's default: the longest an idle
	// fetcher waits before a real poll.
	SafetyNetDefault = 500 * time.Millisecond
)

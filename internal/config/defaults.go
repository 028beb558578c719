package config

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/upstream"
)

// WithDefaults returns a copy of c with every zero field set to its default
// (see the field docs), the `api` limit added when absent and its FailOpen
// set when unset. c is not modified, and the copy shares no slice or map
// with it (elements are copied shallowly). Invalid values (negative
// durations, an unknown algorithm) are kept for Validate to report.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.Redis.Addrs = slices.Clone(c.Redis.Addrs)
	out.Redis.Sentinel.Addrs = slices.Clone(c.Redis.Sentinel.Addrs)
	out.Auth.Keys = slices.Clone(c.Auth.Keys)
	out.Tenants = maps.Clone(c.Tenants)
	out.Upstreams = upstreamsWithDefaults(c.Upstreams)
	out.TaskQueues = slices.Clone(c.TaskQueues)
	out.Egress.Allow = slices.Clone(c.Egress.Allow)
	out.Listen = cmp.Or(c.Listen, ListenDefault)
	out.Redis = out.Redis.withDefaults()
	out.Limits = limitsWithDefaults(c.Limits)
	out.Dispatch = c.Dispatch.withDefaults()
	out.Throttle = c.Throttle.withDefaults()
	out.Circuit = c.Circuit.withDefaults()
	out.Retention = c.Retention.withDefaults()
	out.Metrics = c.Metrics.withDefaults()
	out.LimitsBytes = LimitsBytesConfig{
		MaxJobBytes:   cmp.Or(c.LimitsBytes.MaxJobBytes, MaxJobBytesDefault),
		MaxBatchBytes: cmp.Or(c.LimitsBytes.MaxBatchBytes, MaxBatchBytesDefault),
	}
	if len(c.TaskQueues) == 0 {
		out.TaskQueues = []string{TaskQueueDefault}
	}
	concurrency := cmp.Or(c.Worker.Concurrency, WorkerConcurrencyDefault)
	out.Worker = WorkerConfig{
		Concurrency:       concurrency,
		TaskCheckInterval: cmp.Or(c.Worker.TaskCheckInterval, TaskCheckIntervalDefault),
		ShutdownTimeout:   cmp.Or(c.Worker.ShutdownTimeout, ShutdownTimeoutDefault),
		Fetchers:          cmp.Or(c.Worker.Fetchers, min(FetchersDefault, max(concurrency, 1))),
		IdlePoll:          cmp.Or(c.Worker.IdlePoll, IdlePollDefault),
	}
	out.Secrets = c.Secrets.withDefaults()
	out.Log = LogConfig{
		Format: cmp.Or(c.Log.Format, LogFormatDefault),
		Level:  cmp.Or(c.Log.Level, LogLevelDefault),
		Asynq:  cmp.Or(c.Log.Asynq, LogAsynqDefault),
	}
	return &out
}

func (r RedisConfig) withDefaults() RedisConfig {
	r.URL = cmp.Or(r.URL, RedisURLDefault)
	r.Prefix = cmp.Or(r.Prefix, RedisPrefixDefault)
	r.Shards = cmp.Or(r.Shards, tuning.ShardsDefault)
	r.RequestTimeout = cmp.Or(r.RequestTimeout, RequestTimeoutDefault)
	r.WaitTimeout = cmp.Or(r.WaitTimeout, min(WaitTimeoutDefault, max(r.RequestTimeout/2, time.Millisecond)))
	if r.MemoryHighWater == nil {
		hw := MemoryHighWaterDefault
		r.MemoryHighWater = &hw
	}
	return r
}

func limitsWithDefaults(limits map[string]LimitConfig) map[string]LimitConfig {
	out := maps.Clone(limits)
	if out == nil {
		out = make(map[string]LimitConfig, 1)
	}
	api, ok := out[APILimitName]
	if !ok {
		api = DefaultAPILimit()
	}
	if api.FailOpen == nil {
		failOpen := FailOpenDefault
		api.FailOpen = &failOpen
	}
	costs := APICosts{}
	if api.Costs != nil {
		costs = *api.Costs
	}
	costs = costs.WithDefaults()
	api.Costs = &costs
	out[APILimitName] = api
	return out
}

func (d DispatchConfig) withDefaults() DispatchConfig {
	d.Lead = cmp.Or(d.Lead, tuning.LeadDefault)
	d.MinLead = cmp.Or(d.MinLead, tuning.MinLeadDefault)
	d.Tolerance = cmp.Or(d.Tolerance, tuning.ToleranceDefault)
	d.Grace = cmp.Or(d.Grace, tuning.GraceDefault)
	d.MaxPromotions = cmp.Or(d.MaxPromotions, tuning.MaxPromotionsDefault)
	d.MaxTenants = cmp.Or(d.MaxTenants, tuning.MaxTenantsDefault)
	d.BatchMax = cmp.Or(d.BatchMax, tuning.BatchMaxDefault)
	d.BatchSpan = cmp.Or(d.BatchSpan, d.MinLead)
	d.MaxSleep = cmp.Or(d.MaxSleep, tuning.MaxSleepDefault)
	d.Planner = cmp.Or(d.Planner, PlannerLua)
	return d
}

func (t ThrottleConfig) withDefaults() ThrottleConfig {
	t.DefaultPause = cmp.Or(t.DefaultPause, tuning.DefaultPauseDefault)
	t.MaxPause = cmp.Or(t.MaxPause, tuning.MaxPauseDefault)
	t.AdaptiveFloor = cmp.Or(t.AdaptiveFloor, AdaptiveFloorDefault)
	return t
}

func (c CircuitConfig) withDefaults() CircuitConfig {
	c.Failures = cmp.Or(c.Failures, tuning.CircuitFailuresDefault)
	c.Backoff = cmp.Or(c.Backoff, tuning.CircuitBackoffDefault)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, max(c.Backoff, tuning.CircuitMaxBackoffDefault))
	return c
}

func (r RetentionConfig) withDefaults() RetentionConfig {
	r.Succeeded = cmp.Or(r.Succeeded, tuning.SucceededRetentionDefault)
	r.Canceled = cmp.Or(r.Canceled, tuning.CanceledRetentionDefault)
	r.Dead = cmp.Or(r.Dead, tuning.DeadRetentionDefault)
	r.DeadMaxPerTenant = cmp.Or(r.DeadMaxPerTenant, tuning.DeadMaxPerTenantDefault)
	r.AttemptLog = cmp.Or(r.AttemptLog, tuning.AttemptLogDefault)
	r.Idempotency = cmp.Or(r.Idempotency, tuning.IdempotencyRetentionDefault)
	return r
}

// upstreamsWithDefaults is ups with each entry's defaults applied (nil for
// nil).
func upstreamsWithDefaults(ups map[string]upstream.Config) map[string]upstream.Config {
	if ups == nil {
		return nil
	}
	out := make(map[string]upstream.Config, len(ups))
	for name, u := range ups {
		out[name] = u.WithDefaults()
	}
	return out
}

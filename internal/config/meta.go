package config

import (
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Meta is c's part of <prefix>:meta (docs/design.md §3): the fixed parameters
// (redis.prefix, redis.shards, dispatch.lead, dispatch.min_lead) and the
// adjustable settings (dispatch.tolerance and grace, retention, throttle)
// that the throttler writes and workers follow. c must have its defaults.
func (c *Config) Meta() wire.Meta {
	return wire.Meta{
		Prefix:  c.Redis.Prefix,
		Shards:  c.Redis.Shards,
		Lead:    c.Dispatch.Lead,
		MinLead: c.Dispatch.MinLead,
		Settings: wire.Settings{
			Tolerance:            c.Dispatch.Tolerance,
			Grace:                c.Dispatch.Grace,
			SucceededRetention:   c.Retention.Succeeded,
			CanceledRetention:    c.Retention.Canceled,
			IdempotencyRetention: c.Retention.Idempotency,
			DeadRetention:        c.Retention.Dead,
			DeadMaxPerTenant:     c.Retention.DeadMaxPerTenant,
			AttemptLog:           c.Retention.AttemptLog,
			DefaultPause:         c.Throttle.DefaultPause,
			MaxPause:             c.Throttle.MaxPause,
			AdaptiveFloorPPM:     store.PPM(c.Throttle.AdaptiveFloor),
		},
	}
}

// StoreConfig is the store.Config of c (redis.prefix and shards, the
// canceled and idempotency retention, redis.wait_replicas and
// wait_timeout).
func (c *Config) StoreConfig() store.Config {
	return store.Config{Prefix: c.Redis.Prefix, Shards: c.Redis.Shards,
		CanceledRetention: c.Retention.Canceled, IdempotencyRetention: c.Retention.Idempotency,
		WaitReplicas: c.Redis.WaitReplicas, WaitTimeout: c.Redis.WaitTimeout}
}

// PassConfig is the dispatcher's pass bounds (docs/design.md §2.2) from c's dispatch
// timing and the retention the sweep applies to the jobs it retires.
func (c *Config) PassConfig() store.PassConfig {
	return store.PassConfig{
		Lead:             c.Dispatch.Lead,
		MinLead:          c.Dispatch.MinLead,
		Grace:            c.Dispatch.Grace,
		MaxPromotions:    c.Dispatch.MaxPromotions,
		MaxTenants:       c.Dispatch.MaxTenants,
		DeadRetention:    c.Retention.Dead,
		DeadMaxPerTenant: c.Retention.DeadMaxPerTenant,
		AttemptLog:       c.Retention.AttemptLog,
	}
}

// SluiceQueues are the asynq queues Sluice feeds: the hand-off queues,
// webhook and http (per-job tasks of earlier versions) and the task queues
// of the allow-list.
func (c *Config) SluiceQueues() []string {
	out := append(wire.HandoffQueueNames(c.Redis.Prefix), wire.WebhookQueue(c.Redis.Prefix), wire.HTTPQueue(c.Redis.Prefix))
	return append(out, c.TaskQueues...)
}

package config

import (
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/wire"
)

// Meta is c's part of <prefix>:meta (docs/design.md §3): the fixed parameters
// (redis.prefix, redis.shards, dispatch.lead, dispatch.min_lead) and the
// adjustable settings (dispatch.tolerance and grace, retention, throttle,
// circuit)
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
			AdaptiveFloorPPM:     tuning.PPM(c.Throttle.AdaptiveFloor),
			CircuitFailures:      c.Circuit.Failures,
			CircuitBackoff:       c.Circuit.Backoff,
			CircuitMaxBackoff:    c.Circuit.MaxBackoff,
			CircuitMode:          circuitMode(c.Circuit.Disabled),
			PreclaimMode:         preclaimMode(c.Dispatch.PreclaimDisabled),
		},
	}
}

// SluiceQueues are the asynq queues Sluice feeds: the hand-off queues,
// webhook and http (per-job tasks of earlier versions) and the task queues
// of the allow-list.
func (c *Config) SluiceQueues() []string {
	out := append(wire.HandoffQueueNames(c.Redis.Prefix), wire.WebhookQueue(c.Redis.Prefix), wire.HTTPQueue(c.Redis.Prefix))
	return append(out, c.TaskQueues...)
}

// circuitMode is Settings.CircuitMode of circuit.disabled.
func circuitMode(disabled bool) int {
	if disabled {
		return wire.CircuitOff
	}
	return wire.CircuitOn
}

// preclaimMode is Settings.PreclaimMode of dispatch.preclaim_disabled.
func preclaimMode(disabled bool) int {
	if disabled {
		return wire.PreclaimOff
	}
	return wire.PreclaimOn
}

package dispatch

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// readMeta reads the adjustable settings in <prefix>:meta and applies the
// ones a pass uses — grace, dead retention, dead cap, attempt log — over
// Config.Pass; a setting Redis does not hold keeps Config.Pass's value. A
// change is logged. Without the hash, or when Redis cannot be read,
// the current settings stay.
func (d *Dispatcher) readMeta(ctx context.Context) {
	m, found, err := store.ReadMeta(ctx, d.cfg.Redis, d.cfg.Prefix)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Logger.Warn("reading deployment settings failed; keeping the current ones", "err", err)
		}
		return
	}
	if !found {
		return
	}
	next := passUnder(d.cfg.Pass, m.Settings)
	if d.passConfig() != next {
		d.cfg.Logger.Info("deployment settings applied", "key", wire.MetaKey(d.cfg.Prefix),
			"grace", next.Grace, "dead_retention", next.DeadRetention,
			"dead_max_per_tenant", next.DeadMaxPerTenant, "attempt_log", next.AttemptLog)
		d.passCfg.Store(&next)
	}
}

// followMeta re-reads <prefix>:meta every MetaRefresh until ctx is done.
func (d *Dispatcher) followMeta(ctx context.Context) { every(ctx, d.cfg.MetaRefresh, d.readMeta) }

// every calls f every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// passUnder is p with the pass settings s holds (non-zero) in place of p's.
func passUnder(p store.PassConfig, s wire.Settings) store.PassConfig {
	if s.Grace > 0 {
		p.Grace = s.Grace
	}
	if s.DeadRetention > 0 {
		p.DeadRetention = s.DeadRetention
	}
	if s.DeadMaxPerTenant > 0 {
		p.DeadMaxPerTenant = s.DeadMaxPerTenant
	}
	if s.AttemptLog > 0 {
		p.AttemptLog = s.AttemptLog
	}
	return p
}

// passConfig is the pass configuration in force: Config.Pass under the settings
// read from <prefix>:meta.
func (d *Dispatcher) passConfig() store.PassConfig {
	if p := d.passCfg.Load(); p != nil {
		return *p
	}
	return d.cfg.Pass
}

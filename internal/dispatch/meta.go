package dispatch

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// readMeta reads the adjustable settings in <prefix>:meta and applies the
// ones a pass uses — grace, dead retention, dead cap, attempt log, the
// pre-claim's mode and ε — over
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
	if p.Preclaim > 0 { // this process pre-claims: the deployment may turn it off, and sets its ε
		switch {
		case s.PreclaimMode == wire.PreclaimOff:
			p.Preclaim = 0
		case s.Tolerance > 0:
			p.Preclaim = s.Tolerance
		}
	}
	return p
}

// preclaimGate is the roster's answer whether every live worker runs
// pre-claimed jobs (*store.Store has it, through internal/fleet).
type preclaimGate interface {
	Preclaimable(ctx context.Context) (bool, error)
}

var _ preclaimGate = (*store.Store)(nil)

// gateRetry is how often a closed pre-claim gate is read again: a worker
// of an earlier version that left opens it within a second. The first
// workers of a fleet open it at once: the capacity reading that finds them
// reads it (budget.workersCame).
const gateRetry = time.Second

// followGate re-reads the pre-claim gate (readGate) until ctx is done:
// every gateRetry while it is closed, every MetaRefresh while it is open
// (a worker of an earlier version that starts then closes it within that
// time; the jobs it gets meanwhile come back by the sweep). Nothing when
// the Dispatcher does not pre-claim.
func (d *Dispatcher) followGate(ctx context.Context) {
	if d.cfg.Pass.Preclaim <= 0 {
		return
	}
	var last time.Time
	every(ctx, min(gateRetry, d.cfg.MetaRefresh), func(ctx context.Context) {
		if d.preclaimable.Load() && time.Since(last) < d.cfg.MetaRefresh {
			return
		}
		last = time.Now()
		d.readGate(ctx)
	})
}

// readGate reads whether every live worker runs pre-claimed jobs (the
// rolling-upgrade gate, docs/design.md §2.2); a Store without the roster,
// or one Redis cannot answer for, closes it until the next reading. A
// change is logged.
func (d *Dispatcher) readGate(ctx context.Context) {
	ok := false
	if g, is := d.cfg.Store.(preclaimGate); is && d.cfg.Pass.Preclaim > 0 {
		var err error
		if ok, err = g.Preclaimable(ctx); err != nil && ctx.Err() == nil {
			d.cfg.Logger.Warn("reading the workers' pre-claim level failed; no pre-claims until the next reading", "err", err)
		}
	}
	if d.preclaimable.Swap(ok) != ok {
		d.cfg.Logger.Info("pre-claim gate", "open", ok)
	}
}

// passConfig is the pass configuration in force: Config.Pass under the settings
// read from <prefix>:meta.
func (d *Dispatcher) passConfig() store.PassConfig {
	if p := d.passCfg.Load(); p != nil {
		return *p
	}
	return d.cfg.Pass
}

package worker

import (
	"context"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Settings are the deployment-wide settings the Worker applies now (the
// claim tolerance ε, retention and throttle for Finish): store's defaults,
// overlaid with Config.Settings, overlaid with the settings stored in
// <prefix>:meta when it holds any. Safe for concurrent use.
func (w *Worker) Settings() wire.Settings { return *w.current.Load() }

// local is the settings before <prefix>:meta: the defaults under
// Config.Settings.
func (w *Worker) local() wire.Settings { return w.cfg.Settings.Over(store.DefaultSettings()) }

// readMeta reads <prefix>:meta (one HGETALL) and applies its settings. Each
// difference between a stored setting and Config.Settings is logged once
// (Redis's value is used); a change of the applied settings is logged too. Without the
// hash (no throttler has written it yet) the local settings apply until it
// appears. Called by Start and then every MetaRefresh by one goroutine.
func (w *Worker) readMeta(ctx context.Context) error {
	m, _, err := store.ReadMeta(ctx, w.cfg.Redis, w.cfg.Prefix)
	if err != nil {
		return err
	}
	if w.stored != nil && *w.stored == m.Settings {
		return nil
	}
	if diffs := w.newDiffs(m.Settings); len(diffs) > 0 {
		w.cfg.Logger.Warn("deployment settings in Redis differ from this process's configuration; using Redis's (the throttler's configuration writes them)",
			"key", wire.MetaKey(w.cfg.Prefix), "differences (configured, redis)", diffs)
	}
	next := m.Settings.Over(w.local())
	if prev := w.current.Load(); w.stored != nil && *prev != next {
		w.cfg.Logger.Info("deployment settings changed in Redis; applied", "key", wire.MetaKey(w.cfg.Prefix),
			"changes (before, now)", prev.Diff(next))
	}
	w.stored = &m.Settings
	w.current.Store(&next)
	return nil
}

// refreshMeta is readMeta for the loop: a failure keeps the settings as
// they are.
func (w *Worker) refreshMeta(ctx context.Context) {
	if err := w.readMeta(ctx); err != nil && ctx.Err() == nil {
		w.cfg.Logger.Warn("reading deployment settings failed; keeping the current ones", "err", err)
	}
}

// newDiffs is Config.Settings.Diff(stored) without the differences logged
// before, which it records.
func (w *Worker) newDiffs(stored wire.Settings) []string {
	var out []string
	for _, d := range w.cfg.Settings.Diff(stored) {
		if _, ok := w.logged[d]; !ok {
			w.logged[d] = struct{}{}
			out = append(out, d)
		}
	}
	return out
}

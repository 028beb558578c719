package worker_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// TestWorkerFollowsMetaSettings: a Worker whose own configuration disagrees
// with the settings the throttler wrote to <prefix>:meta uses Redis's and
// logs the difference once; it picks up a changed setting without a
// restart (and an unrelated change does not repeat the warning); settings
// Redis does not hold keep the Worker's own.
func TestWorkerFollowsMetaSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	meta := wire.Meta{Prefix: h.prefix, Shards: 2, Lead: store.LeadDefault, MinLead: store.MinLeadDefault,
		Settings: wire.Settings{AttemptLog: 9, DeadMaxPerTenant: 50}}
	if _, _, err := store.WriteMeta(h.ctx, h.rdb, meta); err != nil {
		t.Fatal(err)
	}
	var logs redistest.SyncBuffer
	const warning = "differ from this process's configuration"
	own := wire.Settings{AttemptLog: 5, DeadMaxPerTenant: 50, Tolerance: 3 * time.Millisecond}
	unstarted, err := worker.New(worker.Config{Store: h.st, Redis: h.rdb, Executor: worker.ExecutorFunc(nil), Concurrency: 1,
		Prefix: h.prefix, Settings: own})
	if err != nil {
		t.Fatal(err)
	}
	if got := unstarted.Settings(); got != own.Over(store.DefaultSettings()) {
		t.Fatalf("settings before Start: %+v, want the configured ones over the defaults", got)
	}
	w := h.newWorker(nil, func(c *worker.Config) { // started
		c.Settings = own
		c.MetaRefresh = 10 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	got := w.Settings()
	if got.AttemptLog != 9 || got.Tolerance != 3*time.Millisecond || got.DeadMaxPerTenant != 50 || got.MaxPause != store.MaxPauseDefault {
		t.Fatalf("settings after Start: %+v, want attempt_log 9 from Redis, tolerance 3ms from the configuration, the default max pause", got)
	}
	if n := strings.Count(logs.String(), warning); n != 1 || strings.Count(logs.String(), "attempt_log: 5, 9") != 1 {
		t.Fatalf("%d warnings about the difference, want 1 naming attempt_log:\n%s", n, logs.String())
	}

	meta.Settings = wire.Settings{MaxPause: 2 * time.Hour}
	if _, _, err := store.WriteMeta(h.ctx, h.rdb, meta); err != nil {
		t.Fatal(err)
	}
	redistest.PollMsg(t, 5*time.Second, func() (bool, string) {
		s := w.Settings()
		return s.MaxPause == 2*time.Hour, "max pause " + s.MaxPause.String()
	})
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Fatalf("an unrelated change repeated the warning: %d warnings", n)
	}

	meta.Settings = wire.Settings{AttemptLog: 11}
	if _, _, err := store.WriteMeta(h.ctx, h.rdb, meta); err != nil {
		t.Fatal(err)
	}
	redistest.PollMsg(t, 5*time.Second, func() (bool, string) {
		s := w.Settings()
		return s.AttemptLog == 11, fmt.Sprint("attempt log ", s.AttemptLog)
	})
	if strings.Count(logs.String(), "attempt_log: 9, 11") != 1 {
		t.Errorf("the change of attempt_log was not logged:\n%s", logs.String())
	}
}

// TestWorkerWithoutMetaFollowsOnceWritten: before any throttler wrote
// <prefix>:meta the Worker applies its own settings; once written, Redis's.
func TestWorkerWithoutMetaFollowsOnceWritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	w := h.newWorker(nil, func(c *worker.Config) { c.MetaRefresh = 10 * time.Millisecond; c.Settings = wire.Settings{} })
	if got := w.Settings(); got != store.DefaultSettings() {
		t.Fatalf("settings without meta: %+v, want the defaults", got)
	}
	if _, _, err := store.WriteMeta(h.ctx, h.rdb, wire.Meta{Prefix: h.prefix, Shards: 2, Lead: store.LeadDefault,
		MinLead: store.MinLeadDefault, Settings: wire.Settings{DefaultPause: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	redistest.PollMsg(t, 5*time.Second, func() (bool, string) {
		s := w.Settings()
		return s.DefaultPause == time.Minute, "default pause " + s.DefaultPause.String()
	})
}

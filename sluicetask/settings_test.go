package sluicetask_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestMiddlewareAppliesTheThrottlersSettings: with no settings in its
// Config, the middleware finishes jobs with the retention the throttler
// wrote to <prefix>:meta — also one written after the middleware started.
func TestMiddlewareAppliesTheThrottlersSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // meta: 4 shards, no settings yet
	e.policy("acme", store.Overrides{RateUS: p64(10_000), Burst: p64(1), Adaptive: p64(0)})
	rec := newRecorder(func(context.Context, call, int) error { return nil })
	e.startServer(2, rec.ProcessTask)
	e.startDispatcher()
	if _, _, err := store.WriteMeta(e.ctx, e.rdb, wire.Meta{Prefix: e.prefix, Shards: 4, Lead: store.LeadDefault,
		MinLead: store.MinLeadDefault, Settings: wire.Settings{SucceededRetention: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	// The middleware re-reads <prefix>:meta every few seconds: poll until a
	// succeeded job expires within the stored hour instead of 24h.
	redistest.PollMsg(t, 20*time.Second, func() (bool, string) {
		id := e.enqueue("acme", `{"n":1}`)[0]
		e.waitState(id, store.StateSucceeded, 10*time.Second)
		shard, err := store.ShardOfJobID(id)
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := e.rdb.TTL(e.ctx, e.prefix+":{s"+strconv.Itoa(shard)+"}:j:"+id).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ttl > 0 && ttl <= time.Hour, "succeeded job's TTL " + ttl.String()
	})
}

// TestStartWithoutMetaUsesDefaults: before any Sluice process wrote
// <prefix>:meta, Start succeeds with Sluice's defaults (L = 50ms covers
// TCI 20ms).
func TestStartWithoutMetaUsesDefaults(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	e := &env{t: t, ctx: context.Background(), rdb: rdb, prefix: prefix, queue: prefix + "-tasks"}
	m := e.newMiddleware(2, nil)
	if err := m.Start(e.ctx); err != nil {
		t.Fatalf("Start without meta: %v", err)
	}
	m.Stop()
}

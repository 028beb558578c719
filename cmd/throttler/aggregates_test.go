package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// `throttler rebuild-aggregates` builds the aggregates anew from the
// tenants: a count a process of an older release left wrong is right after.
func TestRebuildAggregatesSubcommand(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Enqueue(ctx, "acme", []store.Item{{Type: "webhook", Body: []byte(`{}`)}, {Type: "webhook", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Observe(ctx, store.ObserveOptions{}); err != nil { // built
		t.Fatal(err)
	}
	key := fmt.Sprintf("%s:{s%d}:agg", prefix, store.ShardOf("acme", 2))
	if err := rdb.HSet(ctx, key, "or", 7).Err(); err != nil { // as an older process could leave it
		t.Fatal(err)
	}
	if o, _ := st.Observe(ctx, store.ObserveOptions{}); o.Backlog != 7 {
		t.Fatalf("backlog before the rebuild %d, want the wrong 7", o.Backlog)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("redis: {prefix: "+prefix+", shards: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLUICE_REDIS_URL": redistest.URL()}
	var out redistest.SyncBuffer
	if err := run(ctx, []string{"rebuild-aggregates", "--config", path}, func(k string) string { return env[k] }, &out, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "backlog 2, running 0") {
		t.Fatalf("output %q, want backlog 2", out.String())
	}
	if err := run(ctx, []string{"rebuild-aggregates", "extra"}, func(k string) string { return env[k] }, &out, nil, nil); err == nil ||
		!strings.Contains(err.Error(), aggregatesUsage) {
		t.Fatalf("an extra argument: %v, want the usage", err)
	}
}

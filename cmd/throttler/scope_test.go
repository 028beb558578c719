package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestAPIOptionsCarryLimitScope: limits.<name>.scope reaches the API — a
// limit is per API key unless the file says scope: shared.
func TestAPIOptionsCarryLimitScope(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := `
limits:
  mine: {algorithm: gcra, rate: 1/s, burst: 1}
  common: {algorithm: gcra, rate: 1/s, burst: 1, scope: shared}
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	rdb, _ := redistest.New(t)
	batcher, err := bucket.NewBatcher(rdb, bucket.BatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = batcher.Close() })
	opts, err := apiOptions(cfg, rdb, batcher, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Limits["mine"].Shared || !opts.Limits["common"].Shared {
		t.Errorf("Shared: mine %v, common %v; want false (api_key, the default), true", opts.Limits["mine"].Shared, opts.Limits["common"].Shared)
	}
}

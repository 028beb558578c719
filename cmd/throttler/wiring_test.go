package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/store"
)

// TestStoreAndPassConfigFollowTheFile: the store's and the pass's settings
// are the file's values (and, unset, the configuration's defaults, which
// are the store's).
func TestStoreAndPassConfigFollowTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := "redis: {prefix: wired, shards: 4, wait_replicas: 2, wait_timeout: 300ms, request_timeout: 1s, memory_high_water: 0.8}\n" +
		"dispatch: {lead: 400ms, min_lead: 200ms, grace: 3s, max_promotions: 7, max_tenants: 9, planner: go}\n" +
		"retention: {canceled: 2h, idempotency: 3h, dead: 4h, dead_max_per_tenant: 5, attempt_log: 6}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	wantStore := store.Config{Prefix: "wired", Shards: 4, CanceledRetention: 2 * time.Hour,
		IdempotencyRetention: 3 * time.Hour, WaitReplicas: 2, WaitTimeout: 300 * time.Millisecond, MemoryHighWater: 0.8,
		Planner: store.PlannerGo}
	if got := storeConfig(cfg); !reflect.DeepEqual(got, wantStore) {
		t.Errorf("storeConfig = %+v, want %+v", got, wantStore)
	}
	wantPass := store.PassConfig{Lead: 400 * time.Millisecond, MinLead: 200 * time.Millisecond, Grace: 3 * time.Second,
		MaxPromotions: 7, MaxTenants: 9, DeadRetention: 4 * time.Hour, DeadMaxPerTenant: 5, AttemptLog: 6,
		Preclaim: store.ToleranceDefault} // the pre-claim's ε: dispatch.tolerance
	if got := passConfig(cfg); got != wantPass {
		t.Errorf("passConfig = %+v, want %+v", got, wantPass)
	}
	cfg.Dispatch.PreclaimDisabled = true
	if got := passConfig(cfg); got.Preclaim != 0 {
		t.Errorf("dispatch.preclaim_disabled: pre-claim ε %s, want 0 (off)", got.Preclaim)
	}

	def, err := config.Load("", nil) // no file: every default
	if err != nil {
		t.Fatal(err)
	}
	if got, want := passConfig(def), (store.PassConfig{}).WithDefaults(); got.Lead != want.Lead || got.MinLead != want.MinLead ||
		got.Grace != want.Grace || got.MaxPromotions != want.MaxPromotions || got.MaxTenants != want.MaxTenants {
		t.Errorf("defaults: passConfig = %+v, the store's defaults %+v", got, want)
	}
}

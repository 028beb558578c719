package dispatch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/wire"
)

func TestEnsureMetaWritesOnceAndRefusesMismatches(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	m := wire.Meta{Prefix: prefix, Shards: 16, Lead: 100 * time.Millisecond, MinLead: 50 * time.Millisecond}

	created, err := EnsureMeta(ctx, rdb, m)
	if err != nil || !created {
		t.Fatalf("first EnsureMeta: created %v, %v", created, err)
	}
	stored, err := rdb.HGetAll(ctx, wire.MetaKey(prefix)).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"prefix": prefix, "shards": "16", "hash": "crc32-ieee", "schema": "1", "lead_us": "100000", "min_lead_us": "50000"}
	for k, v := range want {
		if stored[k] != v {
			t.Errorf("meta %s = %q, want %q", k, stored[k], v)
		}
	}
	if created, err := EnsureMeta(ctx, rdb, m); err != nil || created {
		t.Fatalf("same parameters again: created %v, %v", created, err)
	}

	other := m
	other.Shards, other.Lead = 8, 200*time.Millisecond
	_, err = EnsureMeta(ctx, rdb, other)
	if !errors.Is(err, ErrMetaMismatch) {
		t.Fatalf("mismatch: %v, want ErrMetaMismatch", err)
	}
	for _, s := range []string{`shards: stored "16", configured "8"`, `lead_us: stored "100000", configured "200000"`, "offline"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "min_lead_us") {
		t.Errorf("error names an equal field: %v", err)
	}
	if got, _ := rdb.HGet(ctx, wire.MetaKey(prefix), "shards").Result(); got != "16" {
		t.Fatalf("a mismatch changed the stored meta: shards %q", got)
	}
}

package store

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
	want := map[string]string{"prefix": prefix, "shards": "16", "hash": "crc32-ieee", "schema": "2", "lead_us": "100000", "min_lead_us": "50000"}
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

// TestWriteMetaOverwritesSettingsAndKeepsFixedFields: the throttler's
// WriteMeta creates the hash with its settings, later overwrites the
// settings it sets (leaving the others), reports the settings it replaced,
// and on a fixed mismatch writes nothing. ReadMeta reads back what was
// written, and a hash of the six fixed fields only (written before settings
// existed) still reads.
func TestWriteMetaOverwritesSettingsAndKeepsFixedFields(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	if _, found, err := ReadMeta(ctx, rdb, prefix); err != nil || found {
		t.Fatalf("ReadMeta before any write: found %v, %v", found, err)
	}
	if _, err := EnsureMeta(ctx, rdb, wire.Meta{Prefix: prefix, Shards: 4, Lead: 100 * time.Millisecond, MinLead: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	m, found, err := ReadMeta(ctx, rdb, prefix)
	if err != nil || !found || m.Shards != 4 || m.MinLead != 50*time.Millisecond || m.Settings != (wire.Settings{}) {
		t.Fatalf("fixed-only hash: %+v, found %v, %v", m, found, err)
	}

	w := wire.Meta{Prefix: prefix, Shards: 4, Lead: 100 * time.Millisecond, MinLead: 50 * time.Millisecond,
		Settings: wire.Settings{Tolerance: 3 * time.Millisecond, AttemptLog: 7, DefaultPause: time.Minute}}
	before, created, err := WriteMeta(ctx, rdb, w)
	if err != nil || created || before != (wire.Settings{}) {
		t.Fatalf("first WriteMeta: before %+v, created %v, %v", before, created, err)
	}
	w2 := w
	w2.Settings = wire.Settings{AttemptLog: 9, MaxPause: 2 * time.Hour}
	if before, _, err = WriteMeta(ctx, rdb, w2); err != nil || before != w.Settings {
		t.Fatalf("second WriteMeta: before %+v, %v; want %+v", before, err, w.Settings)
	}
	m, _, err = ReadMeta(ctx, rdb, prefix)
	want := wire.Settings{Tolerance: 3 * time.Millisecond, AttemptLog: 9, DefaultPause: time.Minute, MaxPause: 2 * time.Hour}
	if err != nil || m.Settings != want {
		t.Fatalf("settings after two writes: %+v, %v; want %+v", m.Settings, err, want)
	}

	bad := w2
	bad.Shards, bad.Settings = 8, wire.Settings{AttemptLog: 1}
	if _, _, err := WriteMeta(ctx, rdb, bad); !errors.Is(err, ErrMetaMismatch) || !strings.Contains(err.Error(), `shards: stored "4", configured "8"`) {
		t.Fatalf("WriteMeta with 8 shards: %v, want ErrMetaMismatch naming shards", err)
	}
	if m, _, _ = ReadMeta(ctx, rdb, prefix); m.Settings.AttemptLog != 9 {
		t.Fatalf("a refused WriteMeta changed attempt_log to %d", m.Settings.AttemptLog)
	}

	fresh := redistest.Prefix(t)
	w.Prefix = fresh
	if _, created, err := WriteMeta(ctx, rdb, w); err != nil || !created {
		t.Fatalf("WriteMeta on a new prefix: created %v, %v", created, err)
	}
	if m, _, err = ReadMeta(ctx, rdb, fresh); err != nil || m.Settings != w.Settings || m.Shards != 4 {
		t.Fatalf("created hash reads %+v, %v", m, err)
	}
}

// TestReadMetaRefusesUnreadableFields: a field that does not parse, or an
// unknown schema, is an error naming it, wrapping wire.ErrMetaField.
func TestReadMetaRefusesUnreadableFields(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	rdb.HSet(ctx, wire.MetaKey(prefix), "prefix", prefix, "shards", "4", "hash", wire.MetaHash, "schema", "9",
		"lead_us", "100000", "min_lead_us", "x", "attempt_log", "-1")
	_, _, err := ReadMeta(ctx, rdb, prefix)
	if !errors.Is(err, wire.ErrMetaField) {
		t.Fatalf("ReadMeta: %v, want wire.ErrMetaField", err)
	}
	for _, s := range []string{`schema "9"`, `min_lead_us "x"`, `attempt_log "-1"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// TestEnsureMetaRefusesAnEarlierSchemaWithTheUpgradeSteps: a Redis written
// by a Sluice of key schema 1 (tenant fields by name) is refused, changed
// in nothing, with the steps of the upgrade in the error.
func TestEnsureMetaRefusesAnEarlierSchemaWithTheUpgradeSteps(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	ctx := context.Background()
	m := wire.Meta{Prefix: prefix, Shards: 16, Lead: 100 * time.Millisecond, MinLead: 50 * time.Millisecond}
	fields := m.FixedFields()
	for i := 0; i < len(fields); i += 2 {
		if fields[i] == "schema" {
			fields[i+1] = "1"
		}
	}
	if err := rdb.HSet(ctx, wire.MetaKey(prefix), fields).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := EnsureMeta(ctx, rdb, m)
	if !errors.Is(err, ErrMetaMismatch) {
		t.Fatalf("EnsureMeta over schema 1: %v, want ErrMetaMismatch", err)
	}
	for _, s := range []string{`schema: stored "1", configured "2"`, "stop every throttler, worker and sluicetask", "DEL " + wire.MetaKey(prefix)} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if got, _ := rdb.HGet(ctx, wire.MetaKey(prefix), "schema").Result(); got != "1" {
		t.Fatalf("stored schema %q after the refusal, want it unchanged", got)
	}
}

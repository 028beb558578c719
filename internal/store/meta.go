package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/wire"
)

// ErrMetaMismatch is wrapped by the error of EnsureMeta and WriteMeta when
// the stored fixed parameters differ from the process's (a
// *MetaMismatchError).
var ErrMetaMismatch = errors.New("configuration differs from <prefix>:meta")

// MetaMismatchError names every fixed field of <prefix>:meta that differs
// from the process's configuration.
type MetaMismatchError struct {
	Key   string   // <prefix>:meta
	Diffs []string // `field: stored "a", configured "b"`, in wire.Meta.FixedFields order
}

func (e *MetaMismatchError) Error() string {
	for _, d := range e.Diffs {
		if strings.HasPrefix(d, "schema:") {
			return fmt.Sprintf("%s %s: %s — Redis holds the keys of another Sluice version; to upgrade, stop every "+
				"throttler, worker and sluicetask middleware of the earlier version, then `DEL %s` and start this one "+
				"(its settings are written again from the throttler's file; tenants and jobs are kept and migrated on first touch)",
				ErrMetaMismatch, e.Key, strings.Join(e.Diffs, "; "), e.Key)
		}
	}
	return fmt.Sprintf("%s %s: %s — configure the stored values (redis.shards, dispatch.lead, dispatch.min_lead), "+
		"or change them offline: stop every throttler and worker first (no such command exists yet; resharding rewrites job ids)",
		ErrMetaMismatch, e.Key, strings.Join(e.Diffs, "; "))
}

// Is makes errors.Is(err, ErrMetaMismatch) true.
func (e *MetaMismatchError) Is(target error) bool { return target == ErrMetaMismatch }

// Replies of meta.lua.
const (
	metaCreated  = 0
	metaMatched  = 1
	metaMismatch = 2
)

// EnsureMeta writes m's fixed fields to <m.Prefix>:meta when the hash does
// not exist (created reports it; m.Settings is ignored: only WriteMeta, the
// throttler's, writes settings) and otherwise compares the fixed fields: every one that differs (shards, hash,
// schema, D, L; a missing field counts) is named in one *MetaMismatchError.
// It never changes an existing hash. Safe to call from any number of
// processes at once: one script reads and writes atomically.
func EnsureMeta(ctx context.Context, rdb redis.UniversalClient, m wire.Meta) (created bool, err error) {
	status, _, err := runMeta(ctx, rdb, "ensure", m)
	return status == metaCreated, err
}

// WriteMeta is the throttler's EnsureMeta: like EnsureMeta, and when the
// fixed fields match it also writes m.Settings' non-zero fields over the
// stored ones (the throttler's configuration wins; workers and the task
// middleware follow). before is the stored hash's settings as they were
// (zero when created). On a mismatch nothing is written.
func WriteMeta(ctx context.Context, rdb redis.UniversalClient, m wire.Meta) (before wire.Settings, created bool, err error) {
	status, stored, err := runMeta(ctx, rdb, "write", m)
	if err != nil || status == metaCreated {
		return wire.Settings{}, status == metaCreated, err
	}
	old, err := wire.ParseMeta(stored)
	if err != nil {
		// The fixed fields matched, so only a setting can be unreadable; it
		// has just been overwritten (or was not configured).
		return wire.Settings{}, false, fmt.Errorf("write %s: stored settings: %w", wire.MetaKey(m.Prefix), err)
	}
	return old.Settings, false, nil
}

// runMeta runs meta.lua in mode and decodes its reply with checked
// assertions: the status and, unless created, the stored hash. A mismatch
// is returned as a *MetaMismatchError.
func runMeta(ctx context.Context, rdb redis.UniversalClient, mode string, m wire.Meta) (status int64, stored map[string]string, err error) {
	key := wire.MetaKey(m.Prefix)
	fixed, settings := m.FixedFields(), m.Settings.Fields()
	if mode == "ensure" {
		settings = nil
	}
	argv := make([]any, 0, 2+len(fixed)+len(settings))
	argv = append(argv, mode, len(fixed))
	for _, f := range append(fixed, settings...) {
		argv = append(argv, f)
	}
	reply, err := redisscript.NewRunner(rdb, nil).Run(ctx, scriptMeta, []string{key}, argv...)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", mode, key, err)
	}
	arr, err := reply.Array()
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", mode, key, err)
	}
	d := decoder{arr}
	status = d.int(0)
	if status != metaCreated {
		stored = d.fields(1)
	}
	if err := d.Err(); err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", mode, key, err)
	}
	switch status {
	case metaCreated, metaMatched:
		return status, stored, nil
	case metaMismatch:
		if diffs := fixedDiffs(stored, fixed); len(diffs) > 0 {
			return status, stored, &MetaMismatchError{Key: key, Diffs: diffs}
		}
		return 0, nil, fmt.Errorf("%s %s: %w: mismatch reply without a differing field", mode, key, ErrProtocol)
	}
	return 0, nil, fmt.Errorf("%s %s: %w: status %d", mode, key, ErrProtocol, status)
}

// fixedDiffs names each field of want (field, value pairs) whose stored
// value differs; a missing field reads as "".
func fixedDiffs(stored map[string]string, want []string) []string {
	var diffs []string
	for i := 0; i+1 < len(want); i += 2 {
		if got := stored[want[i]]; got != want[i+1] {
			diffs = append(diffs, fmt.Sprintf("%s: stored %q, configured %q", want[i], got, want[i+1]))
		}
	}
	return diffs
}

// MetaRefreshDefault is how often a process that follows the adjustable
// settings re-reads <prefix>:meta (one HGETALL).
const MetaRefreshDefault = 5 * time.Second

// ReadMeta reads <prefix>:meta (one HGETALL) and parses it with
// wire.ParseMeta. found is false, with a zero Meta, when the hash does not
// exist (no Sluice process has started on prefix yet).
func ReadMeta(ctx context.Context, rdb redis.UniversalClient, prefix string) (m wire.Meta, found bool, err error) {
	key := wire.MetaKey(prefix)
	h, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return wire.Meta{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	if len(h) == 0 {
		return wire.Meta{}, false, nil
	}
	if m, err = wire.ParseMeta(h); err != nil {
		return wire.Meta{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	return m, true, nil
}

// DefaultSettings are the settings a deployment applies where neither
// <prefix>:meta nor the process's configuration sets one: the defaults of
// this package.
func DefaultSettings() wire.Settings {
	return wire.Settings{
		Tolerance:            ToleranceDefault,
		Grace:                GraceDefault,
		SucceededRetention:   SucceededRetentionDefault,
		CanceledRetention:    CanceledRetentionDefault,
		IdempotencyRetention: IdempotencyRetentionDefault,
		DeadRetention:        DeadRetentionDefault,
		DeadMaxPerTenant:     DeadMaxPerTenantDefault,
		AttemptLog:           AttemptLogDefault,
		DefaultPause:         DefaultPauseDefault,
		MaxPause:             MaxPauseDefault,
		AdaptiveFloorPPM:     AdaptiveFloorPPMDefault,
		CircuitFailures:      CircuitFailuresDefault,
		CircuitBackoff:       CircuitBackoffDefault,
		CircuitMaxBackoff:    CircuitMaxBackoffDefault,
		CircuitMode:          wire.CircuitOn,
		PreclaimMode:         wire.PreclaimOn,
	}
}

// FinishConfigOf is the FinishConfig that applies s (retention, throttle).
func FinishConfigOf(s wire.Settings) FinishConfig {
	return FinishConfig{
		SucceededRetention:   s.SucceededRetention,
		IdempotencyRetention: s.IdempotencyRetention,
		DeadRetention:        s.DeadRetention,
		DeadMaxPerTenant:     s.DeadMaxPerTenant,
		AttemptLog:           s.AttemptLog,
		DefaultPause:         s.DefaultPause,
		MaxPause:             s.MaxPause,
		AdaptiveFloorPPM:     s.AdaptiveFloorPPM,
	}
}

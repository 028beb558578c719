package dispatch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/wire"
)

// ErrMetaMismatch is wrapped by EnsureMeta's error when the stored
// parameters differ from the process's.
var ErrMetaMismatch = errors.New("configuration differs from <prefix>:meta")

var (
	//go:embed lua/meta.lua
	luaMeta    string
	scriptMeta = redis.NewScript(luaMeta)
)

// EnsureMeta writes m to <m.Prefix>:meta when the hash does not exist
// (created reports it) and otherwise compares: every field that differs
// (shards, hash, schema, D, L; a missing field counts) is named in one error
// wrapping ErrMetaMismatch, which says how to resolve it. Safe to call from
// any number of processes at once: one script writes or reads atomically.
func EnsureMeta(ctx context.Context, rdb redis.UniversalClient, m wire.Meta) (created bool, err error) {
	want := m.Fields()
	v, err := scriptMeta.Run(ctx, rdb, []string{wire.MetaKey(m.Prefix)}, toAny(want)...).Slice()
	if err != nil {
		return false, fmt.Errorf("ensure %s: %w", wire.MetaKey(m.Prefix), err)
	}
	if len(v) == 0 || len(v)%2 != 1 {
		return false, fmt.Errorf("ensure %s: reply of %d elements", wire.MetaKey(m.Prefix), len(v))
	}
	if flag, _ := v[0].(int64); flag == 0 {
		return true, nil
	}
	stored := make(map[string]string, len(v)/2)
	for i := 1; i+1 < len(v); i += 2 {
		k, _ := v[i].(string)
		val, _ := v[i+1].(string)
		stored[k] = val
	}
	var diffs []string
	for i := 0; i < len(want); i += 2 {
		if got := stored[want[i]]; got != want[i+1] {
			diffs = append(diffs, fmt.Sprintf("%s: stored %q, configured %q", want[i], got, want[i+1]))
		}
	}
	if len(diffs) > 0 {
		return false, fmt.Errorf("%w %s: %s — configure the stored values (redis.shards, dispatch.lead, dispatch.min_lead), "+
			"or change them offline: stop every throttler and worker first (no such command exists yet; resharding rewrites job ids)",
			ErrMetaMismatch, wire.MetaKey(m.Prefix), strings.Join(diffs, "; "))
	}
	return false, nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

package dispatch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Meta is a deployment's fixed parameters, kept in <prefix>:meta (DESIGN
// §3): written by the first process that starts, compared by every later
// one. Changing any of them is an offline operation (job ids carry their
// shard; released jobs carry slots computed with D and L).
type Meta struct {
	Prefix  string
	Shards  int
	Lead    time.Duration // D
	MinLead time.Duration // L
}

// The fixed parts of the meta hash.
const (
	MetaHash   = "crc32-ieee" // shard = crc32-IEEE(tenant) mod shards
	MetaSchema = 1            // the key layout's version
)

// ErrMetaMismatch is wrapped by EnsureMeta's error when the stored
// parameters differ from the process's.
var ErrMetaMismatch = errors.New("configuration differs from <prefix>:meta")

var (
	//go:embed lua/meta.lua
	luaMeta    string
	scriptMeta = redis.NewScript(luaMeta)
)

// MetaKey is the key of the meta hash under prefix: "<prefix>:meta".
func MetaKey(prefix string) string { return prefix + ":meta" }

func (m Meta) fields() []string {
	return []string{
		"prefix", m.Prefix,
		"shards", strconv.Itoa(m.Shards),
		"hash", MetaHash,
		"schema", strconv.Itoa(MetaSchema),
		"lead_us", strconv.FormatInt(m.Lead.Microseconds(), 10),
		"min_lead_us", strconv.FormatInt(m.MinLead.Microseconds(), 10),
	}
}

// EnsureMeta writes m to <m.Prefix>:meta when the hash does not exist
// (created reports it) and otherwise compares: every field that differs
// (shards, hash, schema, D, L; a missing field counts) is named in one error
// wrapping ErrMetaMismatch, which says how to resolve it. Safe to call from
// any number of processes at once: one script writes or reads atomically.
func EnsureMeta(ctx context.Context, rdb redis.UniversalClient, m Meta) (created bool, err error) {
	want := m.fields()
	v, err := scriptMeta.Run(ctx, rdb, []string{MetaKey(m.Prefix)}, toAny(want)...).Slice()
	if err != nil {
		return false, fmt.Errorf("ensure %s: %w", MetaKey(m.Prefix), err)
	}
	if len(v) == 0 || len(v)%2 != 1 {
		return false, fmt.Errorf("ensure %s: reply of %d elements", MetaKey(m.Prefix), len(v))
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
			ErrMetaMismatch, MetaKey(m.Prefix), strings.Join(diffs, "; "))
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

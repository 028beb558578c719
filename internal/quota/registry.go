package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
	"github.com/sluicehq/sluice/internal/upstream"
)

// The upstream registry (issue #15): each upstream is one hash in its own
// slot, <p>:{u:<name>}:u (keys.go), written by lua/upstream_put.lua and
// lua/upstream_pause.lua and read here; the listing <p>:upstreams (ZSET,
// every name at score 0) is written after the hash by a separate call, so a
// name with a hash may briefly be missing from the listing (a retried PUT or
// the next seed adds it), never the reverse. Hash fields written here: cfg
// (upstream.View JSON), p (upstream.Params JSON), v (version ≥ 1), src
// (SourceConfig | SourceAPI), pu (paused until, µs; 0 none; ManualPauseUS
// until resume), pr (the pause's reason). The coordinator (upstream_grant)
// keeps its own fields (tat, …) in the same hash.
//
// The configuration file and PUT coexist as tenant policies do, with one
// difference: the file seeds an upstream at every throttler start
// (SeedUpstreams) unless the upstream was last written by PUT, whose
// configuration then wins (logged as a warning while the two differ);
// an upstream only the file ever wrote follows the file's changes.

// Sources of an upstream's configuration (hash field src).
const (
	SourceConfig = "config" // the configuration file (SeedUpstreams)
	SourceAPI    = "api"    // PUT /v1/upstreams/{name} (PutUpstream)
)

// Reasons of an upstream pause (hash field pr).
const (
	PauseManual    = "manual"    // an operator's (POST /v1/upstreams/{name}/pause)
	PauseThrottled = "throttled" // a throttled answer with pause_scope upstream
)

// ManualPauseUS is the stored end (µs) of a pause that lasts until resumed:
// 2^52, beyond every real time the scripts handle.
const ManualPauseUS int64 = 1 << 52

// AnyVersion, as ParseUpstreamIfMatch's answer, writes unconditionally.
const AnyVersion int64 = -1

// MaxUpstreamNames bounds one UpstreamNames page.
const MaxUpstreamNames = 1000

// UpstreamRecord is one upstream as the registry holds it.
type UpstreamRecord struct {
	Name    string
	Config  upstream.Config // defaults applied
	Params  upstream.Params
	Version int64  // ≥ 1; the ETag is "u<Version>"
	Source  string // SourceConfig or SourceAPI
	// PausedUntil is when the pause in force ends: zero when none (or it
	// has ended), time.UnixMicro(ManualPauseUS) until resumed.
	PausedUntil time.Time
	// PauseReason is PauseManual or PauseThrottled; "" when not paused.
	PauseReason string
}

// PausedUntilResume reports whether r's pause lasts until resumed.
func (r UpstreamRecord) PausedUntilResume() bool { return r.PausedUntil.UnixMicro() >= ManualPauseUS }

// PutUpstream writes name's configuration (defaults applied, validated),
// as written by src (SourceAPI, or SourceConfig), and returns the new
// version: 1 when it created the upstream. ifMatch is an If-Match value
// (ParseUpstreamIfMatch): "" or "*" writes unconditionally; a version
// writes only when it is current (0: the upstream must not exist yet),
// else a *VersionMismatchError (Upstream set). The pause and the coordinator's state are
// kept. Bad input (name, configuration, src, ifMatch) is an error wrapping
// ErrInvalid that writes nothing.
func (q *Registry) PutUpstream(ctx context.Context, name string, cfg upstream.Config, src, ifMatch string) (int64, error) {
	want, err := ParseUpstreamIfMatch(ifMatch)
	if err == nil && src != SourceAPI && src != SourceConfig {
		err = invalidf("source %q: want %s or %s", src, SourceAPI, SourceConfig)
	}
	var version int64
	if err == nil {
		version, _, err = q.putUpstream(ctx, "put", name, cfg, src, want)
	}
	if errors.Is(err, ErrVersionMismatch) {
		err = &VersionMismatchError{Upstream: name, Want: want, Current: version}
	}
	if err != nil {
		return 0, fmt.Errorf("put upstream %q: %w", name, err)
	}
	return version, nil
}

// UpstreamETag is the ETag of an upstream's version v: "u<v>", quoted.
func UpstreamETag(v int64) string { return `"u` + strconv.FormatInt(v, 10) + `"` }

// ParseUpstreamIfMatch reads an If-Match value for an upstream: "" or "*"
// is AnyVersion; else a version as UpstreamETag writes it, or the bare
// number, quoted or not ("u3", "3"); 0 means "must not exist". Anything
// else (a weak tag, a list, a negative number) is an error wrapping
// ErrInvalid.
func ParseUpstreamIfMatch(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "*" {
		return AnyVersion, nil
	}
	t := v
	if len(t) >= 2 && t[0] == '"' && t[len(t)-1] == '"' {
		t = t[1 : len(t)-1]
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(t, "u"), 10, 64)
	if err != nil || n < 0 {
		return 0, invalidf(`If-Match %q: want an upstream version such as "u3"`, v)
	}
	return n, nil
}

// SeedUpstreams writes the configuration file's upstreams at throttler
// start (see the registry's comment above): a new upstream, or one the file
// wrote last with another configuration, takes the file's (src config, a
// new version); one written last by PUT keeps Redis's, logged as a warning
// when it differs. Every configuration is validated first; nothing is
// written when one is invalid.
func (q *Registry) SeedUpstreams(ctx context.Context, cfgs map[string]upstream.Config, log *slog.Logger) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(cfgs)) {
		if err := checkUpstream(name, cfgs[name]); err != nil {
			errs = append(errs, fmt.Errorf("seed upstream %q: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(cfgs)) {
		version, outcome, err := q.putUpstream(ctx, "seed", name, cfgs[name], SourceConfig, AnyVersion)
		if err != nil {
			return fmt.Errorf("seed upstream %q: %w", name, err)
		}
		if outcome == "kept" {
			log.WarnContext(ctx, "upstream in Redis was set by PUT /v1/upstreams/{name} and differs from the configuration file; keeping Redis's",
				"upstream", name, "version", version)
			continue
		}
		log.InfoContext(ctx, "seeded upstream", "upstream", name, "version", version, "outcome", outcome)
	}
	return nil
}

// putUpstream runs upstream_put.lua, then adds name to the listing. It
// returns the version (the current one on a mismatch, with the
// *redisscript.Refusal error) and the script's outcome.
func (q *Registry) putUpstream(ctx context.Context, op, name string, cfg upstream.Config, src string, ifVersion int64) (int64, string, error) {
	cfg = cfg.WithDefaults()
	if err := checkUpstream(name, cfg); err != nil {
		return 0, "", err
	}
	view, _ := json.Marshal(cfg.View())     // cannot fail: plain fields
	params, _ := json.Marshal(cfg.Params()) // cannot fail: integers
	d, err := q.runKeys(ctx, scriptUpstreamPut, []string{q.keys.upstream(name)}, q.nowArg(), op, view, params, src, max(ifVersion, AnyVersion))
	if err != nil && !errors.Is(err, ErrVersionMismatch) {
		return 0, "", err
	}
	version := d.Int(1)
	if derr := d.Err(); derr != nil {
		return 0, "", derr
	}
	if err != nil {
		return version, "", err
	}
	outcome := d.Str(2)
	if derr := d.Err(); derr != nil {
		return 0, "", derr
	}
	if err := q.rdb.ZAdd(ctx, q.keys.upstreams(), redis.Z{Member: name}).Err(); err != nil {
		return 0, "", fmt.Errorf("list upstream: %w", err)
	}
	return version, outcome, nil
}

// checkUpstream checks a name and a configuration with defaults applied;
// the error wraps ErrInvalid.
func checkUpstream(name string, cfg upstream.Config) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Upstream reads name's record; ErrUpstreamNotFound when it has none.
func (q *Registry) Upstream(ctx context.Context, name string) (UpstreamRecord, error) {
	recs, err := q.Upstreams(ctx, []string{name})
	if err != nil {
		return UpstreamRecord{}, err
	}
	if len(recs) == 0 {
		return UpstreamRecord{}, fmt.Errorf("get upstream %q: %w", name, ErrUpstreamNotFound)
	}
	return recs[0], nil
}

// Upstreams reads the records of names, in their order, in one pipeline;
// a name without a record (or with an invalid name) is left out.
func (q *Registry) Upstreams(ctx context.Context, names []string) ([]UpstreamRecord, error) {
	names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return upstream.ValidName(n) != nil })
	if len(names) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(names))
	var clock *redis.TimeCmd
	_, err := q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.HGetAll(ctx, q.keys.upstream(n))
		}
		if q.clock == nil {
			clock = p.Time(ctx)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get upstreams: %w", err)
	}
	var now time.Time
	if clock != nil {
		now = clock.Val() // Redis's, the pause script's clock
	} else {
		now = q.clock() // the fake clock of tests
	}
	out := make([]UpstreamRecord, 0, len(names))
	for i, n := range names {
		h := cmds[i].Val()
		if h["cfg"] == "" {
			continue
		}
		rec, err := parseUpstream(n, h, now)
		if err != nil {
			return nil, fmt.Errorf("get upstream %q: %w", n, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// parseUpstream decodes the registry hash h of name; a pause whose end is
// not after now is no pause.
func parseUpstream(name string, h map[string]string, now time.Time) (UpstreamRecord, error) {
	rec := UpstreamRecord{Name: name, Source: h["src"], PauseReason: h["pr"]}
	cfg, err := upstream.DecodeJSON(strings.NewReader(h["cfg"]))
	if err != nil {
		return UpstreamRecord{}, fmt.Errorf("%w: cfg %q: %w", ErrProtocol, h["cfg"], err)
	}
	rec.Config = cfg.WithDefaults()
	if err := json.Unmarshal([]byte(h["p"]), &rec.Params); err != nil {
		return UpstreamRecord{}, fmt.Errorf("%w: p %q: %w", ErrProtocol, h["p"], err)
	}
	if rec.Version, err = strconv.ParseInt(h["v"], 10, 64); err != nil || rec.Version < 1 {
		return UpstreamRecord{}, fmt.Errorf("%w: version %q", ErrProtocol, h["v"])
	}
	pu, _ := strconv.ParseInt(h["pu"], 10, 64) // absent: 0
	if pu > now.UnixMicro() {
		rec.PausedUntil = time.UnixMicro(pu).UTC()
	} else {
		rec.PauseReason = ""
	}
	return rec, nil
}

// UpstreamNames returns up to limit (1 … MaxUpstreamNames) registered
// names after after ("" = from the start), in byte order.
func (q *Registry) UpstreamNames(ctx context.Context, after string, limit int) ([]string, error) {
	if limit < 1 || limit > MaxUpstreamNames {
		return nil, fmt.Errorf("list upstreams: %w", invalidf("limit %d: want 1 … %d", limit, MaxUpstreamNames))
	}
	start := "-"
	if after != "" {
		start = "(" + after
	}
	names, err := q.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: q.keys.upstreams(), Start: start, Stop: "+",
		ByLex: true, Count: int64(limit)}).Result()
	if err != nil {
		return nil, fmt.Errorf("list upstreams: %w", err)
	}
	return names, nil
}

// PauseUpstream pauses name until until (zero: until ResumeUpstream, reason
// normally PauseManual) for every tenant: the coordinator grants it no
// time before then. It never shortens a pause in force: a pause ending
// earlier than the one in force changes nothing. until must be after
// Redis's now, reason PauseManual or PauseThrottled (else an error wrapping
// ErrInvalid). ErrUpstreamNotFound when name has no record.
func (q *Registry) PauseUpstream(ctx context.Context, name string, until time.Time, reason string) error {
	end := ManualPauseUS
	if !until.IsZero() {
		end = min(until.UnixMicro(), ManualPauseUS)
	}
	var err error
	if reason != PauseManual && reason != PauseThrottled {
		err = invalidf("pause reason %q: want %s or %s", reason, PauseManual, PauseThrottled)
	} else {
		_, err = q.pauseUpstream(ctx, name, "pause", end, reason)
	}
	if err != nil {
		return fmt.Errorf("pause upstream %q: %w", name, err)
	}
	return nil
}

// ResumeUpstream ends name's pause, whatever its reason.
// ErrUpstreamNotFound when name has no record.
func (q *Registry) ResumeUpstream(ctx context.Context, name string) error {
	if _, err := q.pauseUpstream(ctx, name, "resume"); err != nil {
		return fmt.Errorf("resume upstream %q: %w", name, err)
	}
	return nil
}

// pauseUpstream runs upstream_pause.lua on name's hash with args after now.
func (q *Registry) pauseUpstream(ctx context.Context, name string, args ...any) (redisscript.Decoder, error) {
	if err := upstream.ValidName(name); err != nil {
		return redisscript.Decoder{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	d, err := q.runKeys(ctx, scriptUpstreamPause, []string{q.keys.upstream(name)}, append([]any{q.nowArg()}, args...)...)
	if errors.Is(err, redisscript.ErrNotFound) {
		return d, ErrUpstreamNotFound
	}
	return d, err
}

package wire

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Meta is a deployment's parameters, kept in the hash MetaKey(prefix)
// (docs/design.md §3).
//
// The fixed ones — Prefix, Shards, the hash function, the schema, Lead (D)
// and MinLead (L) — are written by the first process that starts and
// compared by every later one; changing any of them is an offline operation
// (job ids carry their shard; released jobs carry slots computed with D and
// L).
//
// Settings are adjustable: the throttler writes them from its configuration
// on every start, and workers and the task middleware read them and follow
// their changes. A zero field of Settings is not stored (and a field missing
// from the hash reads as zero), so a hash written before Settings existed —
// the six fixed fields only — is still valid: the schema did not change.
type Meta struct {
	Prefix   string
	Shards   int
	Lead     time.Duration // D
	MinLead  time.Duration // L
	Settings Settings
}

// Settings are a deployment's adjustable settings (docs/design.md §7 `dispatch`,
// `retention`, `throttle`, `circuit`). A zero field means "not set": whoever applies
// them fills it from its own configuration or the defaults.
type Settings struct {
	Tolerance            time.Duration // ε, dispatch.tolerance: field tolerance_us
	Grace                time.Duration // dispatch.grace: field grace_us
	SucceededRetention   time.Duration // retention.succeeded: field succeeded_us
	CanceledRetention    time.Duration // retention.canceled: field canceled_us
	IdempotencyRetention time.Duration // retention.idempotency: field idempotency_us
	DeadRetention        time.Duration // retention.dead: field dead_us
	DeadMaxPerTenant     int           // retention.dead_max_per_tenant: field dead_max_per_tenant
	AttemptLog           int           // retention.attempt_log: field attempt_log
	DefaultPause         time.Duration // throttle.default_pause: field default_pause_us
	MaxPause             time.Duration // throttle.max_pause: field max_pause_us
	AdaptiveFloorPPM     int64         // throttle.adaptive_floor in parts per million: field adaptive_floor_ppm
	CircuitFailures      int           // circuit.failures: field circuit_failures
	CircuitBackoff       time.Duration // circuit.backoff: field circuit_backoff_us
	CircuitMaxBackoff    time.Duration // circuit.max_backoff: field circuit_max_backoff_us
	CircuitMode          int           // circuit.disabled: CircuitOn or CircuitOff (0: not set, on): field circuit_mode
	PreclaimMode         int           // dispatch.preclaim_disabled: PreclaimOn or PreclaimOff (0: not set, on): field preclaim_mode
}

// Settings.CircuitMode's values: the circuits on (config circuit.disabled
// false) or off.
const (
	CircuitOn  = 1
	CircuitOff = 2
)

// Settings.PreclaimMode's values: the pass's pre-claim of due jobs on
// (config dispatch.preclaim_disabled false) or off (docs/design.md §2.2).
const (
	PreclaimOn  = 1
	PreclaimOff = 2
)

// The fixed parts of the meta hash.
const (
	MetaHash = "crc32-ieee" // shard = crc32-IEEE(tenant) mod shards
	// MetaSchema is the key layout's version: 2 since issue 13 keeps a
	// tenant's state packed in one hash field (scripts of schema 1 read
	// the fields by name). A schema-1 tenant is migrated on first touch, but
	// processes of the two schemas must never run at once.
	MetaSchema = 2
)

// MetaKey is the key of the meta hash under prefix: "<prefix>:meta".
func MetaKey(prefix string) string { return prefix + ":meta" }

// FixedFields is the fixed part of m as the meta hash stores it, field name
// then value: prefix, shards, hash, schema, lead_us, min_lead_us.
func (m Meta) FixedFields() []string {
	return []string{
		"prefix", m.Prefix,
		"shards", strconv.Itoa(m.Shards),
		"hash", MetaHash,
		"schema", strconv.Itoa(MetaSchema),
		"lead_us", strconv.FormatInt(m.Lead.Microseconds(), 10),
		"min_lead_us", strconv.FormatInt(m.MinLead.Microseconds(), 10),
	}
}

// Fields is m as the meta hash stores it: FixedFields, then
// m.Settings.Fields().
func (m Meta) Fields() []string { return append(m.FixedFields(), m.Settings.Fields()...) }

// settingField is one field of Settings in the meta hash, read and
// written as an integer: durations in whole microseconds.
type settingField struct {
	name string
	dur  bool
	get  func(*Settings) int64
	set  func(*Settings, int64)
}

func durField(name string, f func(*Settings) *time.Duration) settingField {
	return settingField{name: name, dur: true,
		get: func(s *Settings) int64 { return f(s).Microseconds() },
		set: func(s *Settings, v int64) { *f(s) = time.Duration(v) * time.Microsecond }}
}

func intField[T int | int64](name string, f func(*Settings) *T) settingField {
	return settingField{name: name,
		get: func(s *Settings) int64 { return int64(*f(s)) },
		set: func(s *Settings, v int64) { *f(s) = T(v) }}
}

// settingFields lists every field of Settings, in the hash's order.
var settingFields = []settingField{
	durField("tolerance_us", func(s *Settings) *time.Duration { return &s.Tolerance }),
	durField("grace_us", func(s *Settings) *time.Duration { return &s.Grace }),
	durField("succeeded_us", func(s *Settings) *time.Duration { return &s.SucceededRetention }),
	durField("canceled_us", func(s *Settings) *time.Duration { return &s.CanceledRetention }),
	durField("idempotency_us", func(s *Settings) *time.Duration { return &s.IdempotencyRetention }),
	durField("dead_us", func(s *Settings) *time.Duration { return &s.DeadRetention }),
	intField("dead_max_per_tenant", func(s *Settings) *int { return &s.DeadMaxPerTenant }),
	intField("attempt_log", func(s *Settings) *int { return &s.AttemptLog }),
	durField("default_pause_us", func(s *Settings) *time.Duration { return &s.DefaultPause }),
	durField("max_pause_us", func(s *Settings) *time.Duration { return &s.MaxPause }),
	intField("adaptive_floor_ppm", func(s *Settings) *int64 { return &s.AdaptiveFloorPPM }),
	intField("circuit_failures", func(s *Settings) *int { return &s.CircuitFailures }),
	durField("circuit_backoff_us", func(s *Settings) *time.Duration { return &s.CircuitBackoff }),
	durField("circuit_max_backoff_us", func(s *Settings) *time.Duration { return &s.CircuitMaxBackoff }),
	intField("circuit_mode", func(s *Settings) *int { return &s.CircuitMode }),
	intField("preclaim_mode", func(s *Settings) *int { return &s.PreclaimMode }),
}

// Fields is s as the meta hash stores it, field name then value, without
// the zero fields (see Settings' field comments for the names).
func (s Settings) Fields() []string {
	var out []string
	for _, f := range settingFields {
		if v := f.get(&s); v != 0 {
			out = append(out, f.name, strconv.FormatInt(v, 10))
		}
	}
	return out
}

// Over returns base with every non-zero field of s in place of base's.
func (s Settings) Over(base Settings) Settings {
	for _, f := range settingFields {
		if v := f.get(&s); v != 0 {
			f.set(&base, v)
		}
	}
	return base
}

// Diff lists the fields set in both s and other whose values differ, as
// "name: a, b" with s's value first (durations in Go syntax).
func (s Settings) Diff(other Settings) []string {
	var out []string
	for _, f := range settingFields {
		a, b := f.get(&s), f.get(&other)
		if a != 0 && b != 0 && a != b {
			out = append(out, fmt.Sprintf("%s: %s, %s", f.name, f.format(a), f.format(b)))
		}
	}
	return out
}

func (f settingField) format(v int64) string {
	if f.dur {
		return (time.Duration(v) * time.Microsecond).String()
	}
	return strconv.FormatInt(v, 10)
}

// ErrMetaField is wrapped by ParseMeta's error for a field it cannot read.
var ErrMetaField = errors.New("bad meta field")

// ParseMeta reads a meta hash (HGETALL's field → value). The fixed fields
// are required, and the hash and schema must be this build's (MetaHash,
// MetaSchema); a setting may be missing (zero). Every problem is reported
// at once, each wrapping ErrMetaField. Unknown fields are ignored (a newer
// build may add some).
func ParseMeta(h map[string]string) (Meta, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w %s %q: %s", ErrMetaField, field, h[field], fmt.Sprintf(format, args...)))
	}
	positive := func(field string) int64 {
		v, err := strconv.ParseInt(h[field], 10, 64)
		if err != nil || v < 1 {
			bad(field, "want a positive integer")
		}
		return v
	}
	m := Meta{Prefix: h["prefix"]}
	if m.Prefix == "" {
		bad("prefix", "want the key prefix")
	}
	if h["hash"] != MetaHash {
		bad("hash", "this build knows %q", MetaHash)
	}
	if h["schema"] != strconv.Itoa(MetaSchema) {
		bad("schema", "this build knows %d", MetaSchema)
	}
	m.Shards = int(positive("shards"))
	m.Lead = time.Duration(positive("lead_us")) * time.Microsecond
	m.MinLead = time.Duration(positive("min_lead_us")) * time.Microsecond
	for _, f := range settingFields {
		s, ok := h[f.name]
		if !ok {
			continue
		}
		if v, err := strconv.ParseInt(s, 10, 64); err != nil || v < 1 {
			bad(f.name, "want a positive integer")
		} else {
			f.set(&m.Settings, v)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Meta{}, err
	}
	return m, nil
}

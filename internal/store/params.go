package store

import (
	"errors"
	"sort"
	"strconv"
	"strings"
)

// Params is a tenant's resolved policy in the integer units the scripts use
// (DESIGN §1 and §7). It is what the policy package's resolved Policy turns
// into before it is stored; this package never parses rates or durations.
//
// Stored as JSON with these field names (see Overrides for the stored form).
// Every value is an integer below 10¹⁴, so it survives Lua's doubles and
// cjson's 14-digit number format exactly.
type Params struct {
	RateUS             int64 `json:"rate_us"`               // T: emission interval, µs per token, 1 … 3.6·10⁹ (1/h)
	Burst              int64 `json:"burst"`                 // b: dispatch burst, tokens, 1 … 10⁶
	Concurrency        int64 `json:"concurrency"`           // jobs released or running at once, 1 … 10⁶
	Weight             int64 `json:"weight"`                // share under overload, 1 … 10⁶
	AdmitUS            int64 `json:"admit_us"`              // admission refill interval, µs per token, 1 … 3.6·10⁹
	AdmitBurst         int64 `json:"admit_burst"`           // admission bucket capacity, tokens, 1 … 10⁶
	MaxBacklog         int64 `json:"max_backlog"`           // jobs queued+scheduled+retrying+released, 1 … 10⁹
	MaxBacklogBytes    int64 `json:"max_backlog_bytes"`     // their body bytes, 1 … 10¹³
	MaxAttempts        int64 `json:"max_attempts"`          // counts the first attempt, 1 … 10⁶
	MinBackoffUS       int64 `json:"min_backoff_us"`        // µs, 0 … 10¹³
	MaxBackoffUS       int64 `json:"max_backoff_us"`        // µs, 0 … 10¹³
	MaxDoublings       int64 `json:"max_doublings"`         // 0 … 62
	MaxRetryDurationUS int64 `json:"max_retry_duration_us"` // µs from the first attempt, 0 (no limit) … 10¹³
	TimeoutUS          int64 `json:"timeout_us"`            // per attempt, µs, 1 … 10¹³
	Adaptive           int64 `json:"adaptive"`              // 1 = adaptive rate on, 0 = off
}

// Overrides are a tenant's policy overrides: a nil field inherits the
// shard's defaults (field "*"), which inherit DefaultParams. The JSON form
// omits nil fields; it is what PutTenantPolicy stores, plus "version".
type Overrides struct {
	RateUS             *int64 `json:"rate_us,omitempty"`
	Burst              *int64 `json:"burst,omitempty"`
	Concurrency        *int64 `json:"concurrency,omitempty"`
	Weight             *int64 `json:"weight,omitempty"`
	AdmitUS            *int64 `json:"admit_us,omitempty"`
	AdmitBurst         *int64 `json:"admit_burst,omitempty"`
	MaxBacklog         *int64 `json:"max_backlog,omitempty"`
	MaxBacklogBytes    *int64 `json:"max_backlog_bytes,omitempty"`
	MaxAttempts        *int64 `json:"max_attempts,omitempty"`
	MinBackoffUS       *int64 `json:"min_backoff_us,omitempty"`
	MaxBackoffUS       *int64 `json:"max_backoff_us,omitempty"`
	MaxDoublings       *int64 `json:"max_doublings,omitempty"`
	MaxRetryDurationUS *int64 `json:"max_retry_duration_us,omitempty"`
	TimeoutUS          *int64 `json:"timeout_us,omitempty"`
	Adaptive           *int64 `json:"adaptive,omitempty"`
}

// Bounds of Params fields.
const (
	MaxIntervalUS = 3_600_000_000      // one token per hour
	MaxBurst      = 1_000_000          // also the largest cost Go accepts before the policy is known
	MaxDurationUS = 10_000_000_000_000 // about 115 days
)

// DefaultParams are the built-in defaults of DESIGN §7, used for every field
// that neither the shard's "*" entry nor the tenant's overrides set.
func DefaultParams() Params {
	return Params{
		RateUS: 100_000, Burst: 1, Concurrency: 10, Weight: 1,
		AdmitUS: 10_000, AdmitBurst: 1000,
		MaxBacklog: 100_000, MaxBacklogBytes: 256 << 20,
		MaxAttempts: 8, MinBackoffUS: 1_000_000, MaxBackoffUS: 3_600_000_000, MaxDoublings: 5,
		MaxRetryDurationUS: 86_400_000_000, TimeoutUS: 15_000_000, Adaptive: 1,
	}
}

// paramField describes one field for validation, merging and the Lua table of
// built-in defaults, so the three cannot disagree.
type paramField struct {
	name     string
	min, max int64
	param    func(*Params) *int64
	override func(*Overrides) **int64
}

var paramFields = []paramField{
	{"rate_us", 1, MaxIntervalUS, func(p *Params) *int64 { return &p.RateUS }, func(o *Overrides) **int64 { return &o.RateUS }},
	{"burst", 1, MaxBurst, func(p *Params) *int64 { return &p.Burst }, func(o *Overrides) **int64 { return &o.Burst }},
	{"concurrency", 1, 1_000_000, func(p *Params) *int64 { return &p.Concurrency }, func(o *Overrides) **int64 { return &o.Concurrency }},
	{"weight", 1, 1_000_000, func(p *Params) *int64 { return &p.Weight }, func(o *Overrides) **int64 { return &o.Weight }},
	{"admit_us", 1, MaxIntervalUS, func(p *Params) *int64 { return &p.AdmitUS }, func(o *Overrides) **int64 { return &o.AdmitUS }},
	{"admit_burst", 1, MaxBurst, func(p *Params) *int64 { return &p.AdmitBurst }, func(o *Overrides) **int64 { return &o.AdmitBurst }},
	{"max_backlog", 1, 1_000_000_000, func(p *Params) *int64 { return &p.MaxBacklog }, func(o *Overrides) **int64 { return &o.MaxBacklog }},
	{"max_backlog_bytes", 1, MaxDurationUS, func(p *Params) *int64 { return &p.MaxBacklogBytes }, func(o *Overrides) **int64 { return &o.MaxBacklogBytes }},
	{"max_attempts", 1, 1_000_000, func(p *Params) *int64 { return &p.MaxAttempts }, func(o *Overrides) **int64 { return &o.MaxAttempts }},
	{"min_backoff_us", 0, MaxDurationUS, func(p *Params) *int64 { return &p.MinBackoffUS }, func(o *Overrides) **int64 { return &o.MinBackoffUS }},
	{"max_backoff_us", 0, MaxDurationUS, func(p *Params) *int64 { return &p.MaxBackoffUS }, func(o *Overrides) **int64 { return &o.MaxBackoffUS }},
	{"max_doublings", 0, 62, func(p *Params) *int64 { return &p.MaxDoublings }, func(o *Overrides) **int64 { return &o.MaxDoublings }},
	{"max_retry_duration_us", 0, MaxDurationUS, func(p *Params) *int64 { return &p.MaxRetryDurationUS }, func(o *Overrides) **int64 { return &o.MaxRetryDurationUS }},
	{"timeout_us", 1, MaxDurationUS, func(p *Params) *int64 { return &p.TimeoutUS }, func(o *Overrides) **int64 { return &o.TimeoutUS }},
	{"adaptive", 0, 1, func(p *Params) *int64 { return &p.Adaptive }, func(o *Overrides) **int64 { return &o.Adaptive }},
}

// Validate reports every out-of-range field of p at once; each error wraps
// ErrInvalid.
func (p Params) Validate() error {
	var errs []error
	for _, f := range paramFields {
		if err := f.check(*f.param(&p)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Validate reports every out-of-range field that o sets; each error wraps
// ErrInvalid.
func (o Overrides) Validate() error {
	var errs []error
	for _, f := range paramFields {
		if v := *f.override(&o); v != nil {
			if err := f.check(*v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (f paramField) check(v int64) error {
	if v < f.min || v > f.max {
		return invalidf("policy field %s = %d: want %d … %d", f.name, v, f.min, f.max)
	}
	return nil
}

// Apply returns base with every field that o sets replaced.
func (o Overrides) Apply(base Params) Params {
	for _, f := range paramFields {
		if v := *f.override(&o); v != nil {
			*f.param(&base) = *v
		}
	}
	return base
}

// Full returns overrides that set every field to p's value.
func (p Params) Full() Overrides {
	var o Overrides
	for _, f := range paramFields {
		v := *f.param(&p)
		*f.override(&o) = &v
	}
	return o
}

// luaTable renders p as a Lua table constructor, e.g. {burst=1,rate_us=100000}.
// Used once at init for the scripts' built-in defaults.
func (p Params) luaTable() string {
	parts := make([]string, 0, len(paramFields))
	for _, f := range paramFields {
		parts = append(parts, f.name+"="+strconv.FormatInt(*f.param(&p), 10))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

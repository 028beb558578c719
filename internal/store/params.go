package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// Params is a tenant's resolved policy (policy.Policy) in the integer units
// the scripts take (docs/design.md §1 and §7), derived from it by ParamsOf; this
// package never parses rates or durations. A rate is its emission interval
// bucket.Rate.IntervalMicros() (⌈Per / Tokens⌉ µs per token); a duration is
// whole µs, rounded up so that a positive duration stays positive; a bool is
// 1 (true) or 0. Webhook secrets are not part of Params.
//
// Stored as JSON with these field names (see Overrides for the stored form).
// Every value is an integer below 10¹⁴, so it survives Lua's doubles and
// cjson's 14-digit number format exactly. The bounds are policy's.
type Params struct {
	RateUS             int64 `json:"rate_us"`               // T: emission interval, µs per token, 1 … 8.64·10¹⁰ (1/d); burst·T ≤ MaxSpanUS
	Burst              int64 `json:"burst"`                 // b: dispatch burst, tokens, 1 … policy.MaxBurst
	Concurrency        int64 `json:"concurrency"`           // jobs released or running at once, 1 … policy.MaxCount
	Weight             int64 `json:"weight"`                // share under overload, 1 … policy.MaxCount
	AdmitUS            int64 `json:"admit_us"`              // admission refill interval, µs per token, 1 … 8.64·10¹⁰; admit_burst·admit_us ≤ MaxSpanUS
	AdmitBurst         int64 `json:"admit_burst"`           // admission bucket capacity, tokens, 1 … policy.MaxBurst
	MaxBacklog         int64 `json:"max_backlog"`           // jobs queued+scheduled+retrying+released, 1 … policy.MaxBacklogLimit
	MaxBacklogBytes    int64 `json:"max_backlog_bytes"`     // their body bytes, 1 … policy.MaxBacklogBytesLimit
	MaxAttempts        int64 `json:"max_attempts"`          // counts the first attempt, 1 … policy.MaxCount
	MinBackoffUS       int64 `json:"min_backoff_us"`        // µs, 0 … MaxDurationUS
	MaxBackoffUS       int64 `json:"max_backoff_us"`        // µs, 0 … MaxDurationUS
	MaxDoublings       int64 `json:"max_doublings"`         // 0 … policy.MaxDoublingsLimit
	MaxRetryDurationUS int64 `json:"max_retry_duration_us"` // µs from the first attempt, 0 (no limit) … MaxDurationUS
	TimeoutUS          int64 `json:"timeout_us"`            // per attempt, µs, 1 … MaxDurationUS
	Adaptive           int64 `json:"adaptive"`              // 1 = adaptive rate on, 0 = off
	Unsigned           int64 `json:"unsigned"`              // 1 = webhook jobs without a secret are accepted (sent unsigned)
	DisableOnGone      int64 `json:"disable_on_gone"`       // 1 = a 410 to an http job disables the tenant too
	Pacing             int64 `json:"pacing"`                // 1 = paced by the upstream's quota headers, 0 = off
	MaxResultBytes     int64 `json:"max_result_bytes"`      // bytes of an http job's response body its result keeps, 1 … policy.MaxResultBytesLimit
	// ResultHeaders is the result's header allow-list (policy
	// ResultHeaders); the scripts ignore it.
	ResultHeaders HeaderList `json:"result_headers"`
	// Upstreams are the tenant's default upstreams (policy Upstreams),
	// which the API resolves at enqueue; nil when none (never empty); the
	// scripts ignore them.
	Upstreams HeaderList `json:"upstreams"`
}

// Overrides are a tenant's policy overrides in Params' units: a nil field
// inherits the shard's defaults (field "*"), which inherit DefaultParams.
// The JSON form omits nil fields; it is what PutTenantPolicy stores, plus
// "version". OverridesOf derives them from policy.Overrides.
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
	Unsigned           *int64 `json:"unsigned,omitempty"`
	DisableOnGone      *int64 `json:"disable_on_gone,omitempty"`
	Pacing             *int64 `json:"pacing,omitempty"`
	MaxResultBytes     *int64 `json:"max_result_bytes,omitempty"`
	// ResultHeaders, when not nil, replaces the allow-list (empty: none).
	ResultHeaders HeaderList `json:"result_headers,omitzero"`
	// Upstreams, when not nil, replaces the default upstreams (empty: none).
	Upstreams HeaderList `json:"upstreams,omitzero"`
}

// HeaderList is a list of names (headers, upstreams) as the policy hash
// stores it. Lua's cjson writes an empty list back as {}, which it reads as
// empty.
type HeaderList []string

// UnmarshalJSON reads a JSON array of strings, or {} as an empty list.
func (h *HeaderList) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "{}" {
		*h = HeaderList{}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return err
	}
	*h = l
	return nil
}

// Bounds at the scripts' boundary, in their units, derived from the policy
// package's.
const (
	MaxIntervalUS = int64(bucket.Day / time.Microsecond)     // one token per day
	MaxSpanUS     = int64(policy.MaxSpan / time.Microsecond) // burst × interval, 3.6·10¹⁵
	MaxDurationUS = policy.MaxDuration / time.Microsecond    // 10¹³ (µs, about 115 days)
)

// DefaultParams are policy.Builtin in the scripts' units: the values of
// every field that neither the shard's "*" entry nor the tenant's overrides
// set, and the scripts' BUILTIN table.
func DefaultParams() Params { return ParamsOf(policy.Builtin()) }

// ParamsOf converts a resolved policy into the scripts' units (see Params).
// It does not validate: check p with policy.Policy.Validate (or the result
// with Params.Validate).
func ParamsOf(p policy.Policy) Params {
	return Params{
		RateUS:             p.Rate.IntervalMicros(),
		Burst:              p.Burst,
		Concurrency:        p.Concurrency,
		Weight:             p.Weight,
		AdmitUS:            p.Admit.Rate.IntervalMicros(),
		AdmitBurst:         p.Admit.Burst,
		MaxBacklog:         p.MaxBacklog,
		MaxBacklogBytes:    p.MaxBacklogBytes,
		MaxAttempts:        int64(p.Retry.MaxAttempts),
		MinBackoffUS:       ceilMicros(p.Retry.MinBackoff),
		MaxBackoffUS:       ceilMicros(p.Retry.MaxBackoff),
		MaxDoublings:       int64(p.Retry.MaxDoublings),
		MaxRetryDurationUS: ceilMicros(p.Retry.MaxRetryDuration),
		TimeoutUS:          ceilMicros(p.Timeout),
		Adaptive:           boolInt(p.Adaptive),
		Unsigned:           boolInt(p.Unsigned),
		DisableOnGone:      boolInt(p.DisableOnGone),
		Pacing:             boolInt(p.Pacing != policy.PacingOff),
		MaxResultBytes:     p.MaxResultBytes,
		ResultHeaders:      slices.Clone(p.ResultHeaders),
		Upstreams:          nameList(p.Upstreams),
	}
}

// Policy is the inverse of ParamsOf, for showing p (policy.Policy.View): a
// policy whose ParamsOf is p. A rate is the N/s, N/m, N/h or N/d with exactly p's
// interval (policy.IntervalRate.Rate), else 1 token per interval; secrets
// are none.
func (p Params) Policy() policy.Policy {
	return policy.Policy{
		Rate:            rateOf(p.RateUS),
		Burst:           p.Burst,
		Concurrency:     p.Concurrency,
		Weight:          p.Weight,
		Admit:           policy.Admit{Rate: rateOf(p.AdmitUS), Burst: p.AdmitBurst},
		MaxBacklog:      p.MaxBacklog,
		MaxBacklogBytes: p.MaxBacklogBytes,
		Retry: policy.Retry{
			MaxAttempts:      int(p.MaxAttempts),
			MinBackoff:       redisscript.Micros(p.MinBackoffUS),
			MaxBackoff:       redisscript.Micros(p.MaxBackoffUS),
			MaxDoublings:     int(p.MaxDoublings),
			MaxRetryDuration: redisscript.Micros(p.MaxRetryDurationUS),
		},
		Timeout:        redisscript.Micros(p.TimeoutUS),
		Adaptive:       p.Adaptive == 1,
		Unsigned:       p.Unsigned == 1,
		DisableOnGone:  p.DisableOnGone == 1,
		Pacing:         pacingOf(p.Pacing),
		MaxResultBytes: p.MaxResultBytes,
		ResultHeaders:  slices.Clone(p.ResultHeaders),
		Upstreams:      slices.Clone(p.Upstreams),
	}
}

// OverridesOf converts sparse policy overrides: a field set in o is set to
// its value in Params' units (as ParamsOf converts it), a field unset in o is
// unset. Webhook secrets are dropped (the store keeps integers only).
func OverridesOf(o policy.Overrides) Overrides {
	r := o.Retry
	set := [...]bool{o.Rate != nil, o.Burst != nil, o.Concurrency != nil, o.Weight != nil,
		o.Admit.Rate != nil, o.Admit.Burst != nil, o.MaxBacklog != nil, o.MaxBacklogBytes != nil,
		r.MaxAttempts != nil, r.MinBackoff != nil, r.MaxBackoff != nil, r.MaxDoublings != nil,
		r.MaxRetryDuration != nil, o.Timeout != nil, o.Adaptive != nil, o.Unsigned != nil, o.DisableOnGone != nil,
		o.Pacing != nil, o.MaxResultBytes != nil}
	p := ParamsOf(policy.Resolve(o))
	var out Overrides
	for i, f := range paramFields {
		if set[i] {
			v := *f.param(&p)
			*f.override(&out) = &v
		}
	}
	if o.ResultHeaders != nil {
		out.ResultHeaders = slices.Clone(o.ResultHeaders)
	}
	if o.Upstreams != nil {
		out.Upstreams = slices.Clone(o.Upstreams)
	}
	return out
}

// paramField describes one field for validation, merging and the Lua table of
// built-in defaults, so the three cannot disagree. paramFields lists them in
// the order of Params (and of OverridesOf's set).
type paramField struct {
	name     string
	min, max int64
	param    func(*Params) *int64
	override func(*Overrides) **int64
}

var paramFields = []paramField{
	{"rate_us", 1, MaxIntervalUS, func(p *Params) *int64 { return &p.RateUS }, func(o *Overrides) **int64 { return &o.RateUS }},
	{"burst", 1, policy.MaxBurst, func(p *Params) *int64 { return &p.Burst }, func(o *Overrides) **int64 { return &o.Burst }},
	{"concurrency", 1, policy.MaxCount, func(p *Params) *int64 { return &p.Concurrency }, func(o *Overrides) **int64 { return &o.Concurrency }},
	{"weight", 1, policy.MaxCount, func(p *Params) *int64 { return &p.Weight }, func(o *Overrides) **int64 { return &o.Weight }},
	{"admit_us", 1, MaxIntervalUS, func(p *Params) *int64 { return &p.AdmitUS }, func(o *Overrides) **int64 { return &o.AdmitUS }},
	{"admit_burst", 1, policy.MaxBurst, func(p *Params) *int64 { return &p.AdmitBurst }, func(o *Overrides) **int64 { return &o.AdmitBurst }},
	{"max_backlog", 1, policy.MaxBacklogLimit, func(p *Params) *int64 { return &p.MaxBacklog }, func(o *Overrides) **int64 { return &o.MaxBacklog }},
	{"max_backlog_bytes", 1, int64(policy.MaxBacklogBytesLimit), func(p *Params) *int64 { return &p.MaxBacklogBytes }, func(o *Overrides) **int64 { return &o.MaxBacklogBytes }},
	{"max_attempts", 1, policy.MaxCount, func(p *Params) *int64 { return &p.MaxAttempts }, func(o *Overrides) **int64 { return &o.MaxAttempts }},
	{"min_backoff_us", 0, int64(MaxDurationUS), func(p *Params) *int64 { return &p.MinBackoffUS }, func(o *Overrides) **int64 { return &o.MinBackoffUS }},
	{"max_backoff_us", 0, int64(MaxDurationUS), func(p *Params) *int64 { return &p.MaxBackoffUS }, func(o *Overrides) **int64 { return &o.MaxBackoffUS }},
	{"max_doublings", 0, policy.MaxDoublingsLimit, func(p *Params) *int64 { return &p.MaxDoublings }, func(o *Overrides) **int64 { return &o.MaxDoublings }},
	{"max_retry_duration_us", 0, int64(MaxDurationUS), func(p *Params) *int64 { return &p.MaxRetryDurationUS }, func(o *Overrides) **int64 { return &o.MaxRetryDurationUS }},
	{"timeout_us", 1, int64(MaxDurationUS), func(p *Params) *int64 { return &p.TimeoutUS }, func(o *Overrides) **int64 { return &o.TimeoutUS }},
	{"adaptive", 0, 1, func(p *Params) *int64 { return &p.Adaptive }, func(o *Overrides) **int64 { return &o.Adaptive }},
	{"unsigned", 0, 1, func(p *Params) *int64 { return &p.Unsigned }, func(o *Overrides) **int64 { return &o.Unsigned }},
	{"disable_on_gone", 0, 1, func(p *Params) *int64 { return &p.DisableOnGone }, func(o *Overrides) **int64 { return &o.DisableOnGone }},
	{"pacing", 0, 1, func(p *Params) *int64 { return &p.Pacing }, func(o *Overrides) **int64 { return &o.Pacing }},
	{"max_result_bytes", 1, int64(policy.MaxResultBytesLimit), func(p *Params) *int64 { return &p.MaxResultBytes }, func(o *Overrides) **int64 { return &o.MaxResultBytes }},
}

// Validate reports every out-of-range field of p at once, and burst ×
// emission interval above MaxSpanUS (for rate and admission); each error
// wraps ErrInvalid.
func (p Params) Validate() error {
	var errs []error
	for _, f := range paramFields {
		if err := f.check(*f.param(&p)); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, checkSpan("burst", p.Burst, p.RateUS), checkSpan("admit_burst", p.AdmitBurst, p.AdmitUS))
	errs = append(errs, checkResultHeaders(p.ResultHeaders), checkUpstreamNames(p.Upstreams))
	return errors.Join(errs...)
}

// checkSpan checks burst × interval ≤ MaxSpanUS (policy.MaxSpan) for a
// burst and an interval in their ranges; the error wraps ErrInvalid.
func checkSpan(name string, burst, intervalUS int64) error {
	if burst < 1 || intervalUS < 1 || burst <= MaxSpanUS/intervalUS {
		return nil
	}
	return invalidf("policy field %s = %d: want at most %d at an interval of %d µs (burst × interval ≤ %d µs)",
		name, burst, MaxSpanUS/intervalUS, intervalUS, MaxSpanUS)
}

// Validate reports every out-of-range field that o sets, and burst × rate
// when o sets both; each error wraps ErrInvalid.
func (o Overrides) Validate() error {
	var errs []error
	for _, f := range paramFields {
		if v := *f.override(&o); v != nil {
			if err := f.check(*v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if o.Burst != nil && o.RateUS != nil {
		errs = append(errs, checkSpan("burst", *o.Burst, *o.RateUS))
	}
	if o.AdmitBurst != nil && o.AdmitUS != nil {
		errs = append(errs, checkSpan("admit_burst", *o.AdmitBurst, *o.AdmitUS))
	}
	errs = append(errs, checkResultHeaders(o.ResultHeaders), checkUpstreamNames(o.Upstreams))
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
	if o.ResultHeaders != nil {
		base.ResultHeaders = slices.Clone(o.ResultHeaders)
	}
	if o.Upstreams != nil {
		base.Upstreams = nameList(o.Upstreams)
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
	o.ResultHeaders = slices.Clone(p.ResultHeaders)
	if o.ResultHeaders == nil {
		o.ResultHeaders = []string{}
	}
	o.Upstreams = slices.Clone(p.Upstreams)
	if o.Upstreams == nil {
		o.Upstreams = []string{}
	}
	return o
}

// nameList is a resolved list of names: a copy of l, nil when l is empty
// (an empty list and no list resolve alike).
func nameList(l []string) HeaderList {
	if len(l) == 0 {
		return nil
	}
	return slices.Clone(l)
}

// checkUpstreamNames checks a default upstreams list (nil: unset) with the
// policy package's rules; the error wraps ErrInvalid.
func checkUpstreamNames(names []string) error {
	if err := (policy.Overrides{Upstreams: names}).Validate(); err != nil {
		return invalidf("policy field %v", err)
	}
	return nil
}

// checkResultHeaders checks a result_headers list (nil: unset) with the
// policy package's rules; the error wraps ErrInvalid.
func checkResultHeaders(h []string) error {
	if h == nil {
		return nil
	}
	if err := (policy.Overrides{ResultHeaders: h}).Validate(); err != nil {
		return invalidf("policy field %v", err)
	}
	return nil
}

// luaTable renders p as a Lua table constructor, e.g. {burst=1,rate_us=100000}.
// Used once at init for the scripts' built-in defaults (DefaultParams).
func (p Params) luaTable() string {
	parts := make([]string, 0, len(paramFields))
	for _, f := range paramFields {
		parts = append(parts, f.name+"="+strconv.FormatInt(*f.param(&p), 10))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// rateOf is the rate whose emission interval is us µs (zero for us < 1).
func rateOf(us int64) bucket.Rate {
	if r, ok := policy.IntervalRate(us).Rate(); ok || us < 1 {
		return r
	}
	return bucket.Rate{Tokens: 1, Per: redisscript.Micros(us)}
}

// ceilMicros is d in whole µs, rounded up (down for negative d).
func ceilMicros(d time.Duration) int64 {
	if d <= 0 {
		return d.Microseconds()
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// pacingOf is Params.Pacing's policy mode: 1 PacingHeaders, else PacingOff.
func pacingOf(v int64) policy.Pacing {
	if v == 1 {
		return policy.PacingHeaders
	}
	return policy.PacingOff
}

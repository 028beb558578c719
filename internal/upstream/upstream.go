// Package upstream declares a shared upstream quota (issue #15): an
// account at a third-party API that every tenant's jobs naming it share —
// its rate and burst, an optional concurrency, adaptive rate, how a
// throttled answer pauses (pause_scope) and the header that reports a
// call's real cost (cost_header), and whether the quota its answers report
// in headers paces it (pacing, issue #32). It holds the configuration, its defaults,
// validation, the integers the store's scripts take (Params), the rule for
// upstream names and the most upstreams one job may name.
//
// The package is pure (no I/O): the registry in Redis is
// internal/quota, the routes internal/api. It imports no
// Sluice package but bucket, so internal/job may use its name rules.
//
// Every upstream default and bound is declared once, here; the store's
// scripts take the integers Params derives from them.
package upstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/wire"
)

// MaxPerJob is the most upstreams one job may name.
const MaxPerJob = 4

// MaxNameLen is the longest upstream name, in bytes.
const MaxNameLen = 64

// Defaults and bounds of a Config. MaxBurst and MaxConcurrency equal
// policy.MaxBurst and policy.MaxCount (a test ties them): the scripts'
// arithmetic is exact below them.
const (
	BurstDefault      = 1
	PauseScopeDefault = ScopeTenant
	MaxBurst          = 1_000_000
	MaxConcurrency    = 1_000_000
	// MaxIntervalUS bounds the emission interval: one cost unit per hour
	// (3.6·10⁹ µs), as for a tenant's rate.
	MaxIntervalUS = 3_600_000_000
	// MaxCostHeaderLen bounds cost_header, in bytes.
	MaxCostHeaderLen = 128
)

// The values of pause_scope.
const (
	// ScopeTenant pauses only the tenant of a throttled job (the default).
	ScopeTenant = "tenant"
	// ScopeUpstream pauses the upstream for every tenant, and not the tenant.
	ScopeUpstream = "upstream"
)

// The values of pacing (issue #32).
const (
	// PacingHeaders paces the upstream by the quota its answers report in
	// headers (the default); only an upstream whose pause_scope is
	// upstream is paced as one (for every tenant); with pause_scope tenant
	// the quota paces each tenant by its own policy's pacing.
	PacingHeaders = "headers"
	// PacingOff ignores the reported quota.
	PacingOff     = "off"
	PacingDefault = PacingHeaders
)

// Config is one upstream as the configuration's `upstreams.<name>` entry
// and the body of PUT /v1/upstreams/{name} write it. Zero fields take their
// defaults (WithDefaults). JSON and YAML use the snake_case names below;
// unknown fields are errors (DecodeJSON; the configuration's decoder).
type Config struct {
	// Rate is R, in cost units per second, minute or hour ("20/s"); required.
	Rate bucket.Rate `json:"rate" yaml:"rate"`
	// Burst is B, cost units that may leave at once, 1 … MaxBurst; default
	// BurstDefault (perfectly even spacing).
	Burst int64 `json:"burst" yaml:"burst"`
	// Concurrency is the most jobs naming the upstream running at once,
	// 0 … MaxConcurrency; 0 (the default) is no bound.
	Concurrency int64 `json:"concurrency,omitempty" yaml:"concurrency"`
	// Adaptive cuts the upstream's rate on pushback and recovers it on
	// success, as a tenant's adaptive policy does; default false.
	Adaptive bool `json:"adaptive,omitempty" yaml:"adaptive"`
	// PauseScope is what a throttled answer (429, Retry-After, an exhausted
	// quota header) to a job naming the upstream pauses: ScopeTenant (the
	// default) or ScopeUpstream.
	PauseScope string `json:"pause_scope,omitempty" yaml:"pause_scope"`
	// CostHeader is a response header reporting a call's real cost (an
	// integer), used to correct the job's reserved cost; "" (the default)
	// is none. An HTTP header name, at most MaxCostHeaderLen bytes.
	CostHeader string `json:"cost_header,omitempty" yaml:"cost_header"`
	// Pacing is PacingHeaders (the default) or PacingOff: whether the quota
	// the upstream's answers report in headers (webhook.PaceQuota) paces
	// the upstream — its coordinator spreads what is left over the time to
	// the reset (internal/quota) — when PauseScope is ScopeUpstream.
	Pacing string `json:"pacing,omitempty" yaml:"pacing"`
}

// WithDefaults returns c with every zero field that has a default set.
func (c Config) WithDefaults() Config {
	if c.Burst == 0 {
		c.Burst = BurstDefault
	}
	if c.PauseScope == "" {
		c.PauseScope = PauseScopeDefault
	}
	if c.Pacing == "" {
		c.Pacing = PacingDefault
	}
	return c
}

// FieldError is one problem with one field of a Config, named as in its
// JSON form. Validate joins them with errors.Join.
type FieldError struct {
	Field string
	Err   error
}

// Error formats e as "field: problem".
func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the problem.
func (e *FieldError) Unwrap() error { return e.Err }

// Validate reports every problem with c at once, each a *FieldError: rate
// set with an emission interval of 1 µs … MaxIntervalUS; burst in
// 1 … MaxBurst; concurrency in 0 … MaxConcurrency; pause_scope "tenant" or
// "upstream"; cost_header empty or an HTTP header name of at most
// MaxCostHeaderLen bytes; pacing "headers" or "off". Call it on
// WithDefaults' result: a zero burst, pause_scope or pacing is a problem
// here.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	switch iv := c.Rate.IntervalMicros(); {
	case iv < 1:
		add("rate", "must be set (N/s, N/m or N/h)")
	case iv > MaxIntervalUS:
		add("rate", "must be at least 1/h, got %s", c.Rate)
	case c.Rate.TooFast():
		add("rate", "must be at most %s, got %s", bucket.MaxRate, c.Rate)
	}
	if c.Burst < 1 || c.Burst > MaxBurst {
		add("burst", "must be 1 … %d, got %d", MaxBurst, c.Burst)
	}
	if c.Concurrency < 0 || c.Concurrency > MaxConcurrency {
		add("concurrency", "must be 0 (none) … %d, got %d", MaxConcurrency, c.Concurrency)
	}
	if c.PauseScope != ScopeTenant && c.PauseScope != ScopeUpstream {
		add("pause_scope", "must be %q or %q, got %q", ScopeTenant, ScopeUpstream, c.PauseScope)
	}
	if h := c.CostHeader; h != "" && (len(h) > MaxCostHeaderLen || !headerName(h)) {
		add("cost_header", "must be an HTTP header name of at most %d bytes", MaxCostHeaderLen)
	}
	if c.Pacing != PacingHeaders && c.Pacing != PacingOff {
		add("pacing", "must be %q or %q, got %q", PacingHeaders, PacingOff, c.Pacing)
	}
	return errors.Join(errs...)
}

// headerName reports whether s is an RFC 9110 token.
func headerName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	})
}

// Params are a Config in the integers the store's scripts take: the
// registry hash's field `p`, JSON {"iv", "b", "c", "a", "s", "np"} (bools
// as 0 or 1; "np" is 1 for pacing off, so a p written before the field
// existed reads as the default, pacing by headers).
type Params struct {
	IntervalUS    int64 // T: µs per cost unit (bucket.Rate.IntervalMicros)
	Burst         int64 // B, cost units
	Concurrency   int64 // 0 = no bound
	Adaptive      bool  // adaptive rate
	ScopeUpstream bool  // pause_scope is "upstream"
	NoPacing      bool  // pacing is "off"
}

// Paced reports whether the quota the upstream's answers report paces the
// upstream itself (pacing headers and pause_scope upstream).
func (p Params) Paced() bool { return p.ScopeUpstream && !p.NoPacing }

// Params returns c's integers. c should be valid (WithDefaults, Validate).
func (c Config) Params() Params {
	return Params{IntervalUS: c.Rate.IntervalMicros(), Burst: c.Burst, Concurrency: c.Concurrency,
		Adaptive: c.Adaptive, ScopeUpstream: c.PauseScope == ScopeUpstream, NoPacing: c.Pacing == PacingOff}
}

type paramsJSON struct {
	IV int64 `json:"iv"`
	B  int64 `json:"b"`
	C  int64 `json:"c"`
	A  int64 `json:"a"`
	S  int64 `json:"s"`
	NP int64 `json:"np,omitempty"`
}

// MarshalJSON writes p as {"iv","b","c","a","s","np"}, every value an
// integer.
func (p Params) MarshalJSON() ([]byte, error) {
	return json.Marshal(paramsJSON{IV: p.IntervalUS, B: p.Burst, C: p.Concurrency, A: bit(p.Adaptive), S: bit(p.ScopeUpstream),
		NP: bit(p.NoPacing)})
}

// UnmarshalJSON reads MarshalJSON's form.
func (p *Params) UnmarshalJSON(b []byte) error {
	var v paramsJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("decode upstream params: %w", err)
	}
	*p = Params{IntervalUS: v.IV, Burst: v.B, Concurrency: v.C, Adaptive: v.A == 1, ScopeUpstream: v.S == 1, NoPacing: v.NP == 1}
	return nil
}

func bit(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// View is a Config as the API shows it and the registry stores it (field
// `cfg`): every field present, defaults applied. Fields are only ever added.
type View struct {
	Rate        string `json:"rate"`
	Burst       int64  `json:"burst"`
	Concurrency int64  `json:"concurrency"`
	Adaptive    bool   `json:"adaptive"`
	PauseScope  string `json:"pause_scope"`
	CostHeader  string `json:"cost_header"`
	Pacing      string `json:"pacing"`
}

// View returns c's view, with c's defaults applied.
func (c Config) View() View {
	c = c.WithDefaults()
	return View{Rate: c.Rate.String(), Burst: c.Burst, Concurrency: c.Concurrency,
		Adaptive: c.Adaptive, PauseScope: c.PauseScope, CostHeader: c.CostHeader, Pacing: c.Pacing}
}

// DecodeJSON reads one JSON object of Config from r, rejecting unknown
// fields and trailing data. It neither applies defaults nor validates.
func DecodeJSON(r io.Reader) (Config, error) {
	return wire.DecodeObject[Config](r, "upstream")
}

// ErrInvalidName is wrapped by every error ValidName returns.
var ErrInvalidName = errors.New("invalid upstream name")

// ValidName reports whether name is a valid upstream name: the rules of a
// tenant id (wire.CheckName: characters of [A-Za-z0-9._@-], neither
// "." nor "..") and 1 … MaxNameLen bytes. Such a name is one URL path
// segment and holds no Redis key separator or hash-tag brace. The error
// wraps ErrInvalidName and never echoes name (it may be untrusted input of
// any size).
func ValidName(name string) error {
	if err := wire.CheckName(name, MaxNameLen); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	return nil
}

// CheckNames checks the upstreams a job or a tenant policy names: at most
// MaxPerJob, each a valid name (ValidName), none twice. It returns one
// *FieldError per problem, named "upstreams" or "upstreams[i]"; nil when
// names is valid (nil and empty are valid: none).
func CheckNames(names []string) []*FieldError {
	var out []*FieldError
	if len(names) > MaxPerJob {
		out = append(out, &FieldError{Field: "upstreams", Err: fmt.Errorf("at most %d upstreams, got %d", MaxPerJob, len(names))})
	}
	seen := make(map[string]int, len(names))
	for i, n := range names {
		field := fmt.Sprintf("upstreams[%d]", i)
		if err := ValidName(n); err != nil {
			out = append(out, &FieldError{Field: field, Err: err})
			continue
		}
		if j, dup := seen[n]; dup {
			out = append(out, &FieldError{Field: field, Err: fmt.Errorf("%q is named twice (also upstreams[%d])", n, j)})
			continue
		}
		seen[n] = i
	}
	return out
}

// Sorted returns names sorted, as a new slice; nil for nil (none named)
// and an empty non-nil slice for an empty one (explicitly none).
func Sorted(names []string) []string {
	if names == nil {
		return nil
	}
	out := append(make([]string, 0, len(names)), names...)
	slices.Sort(out)
	return out
}

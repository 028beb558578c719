package config

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/bucket"
)

// APILimitName is the reserved limit name of the API's own per-key limiter.
// It cannot be checked through /v1/limits/{name}/check.
const APILimitName = "api"

// Defaults of the `api` limit when the file has none.
const (
	APIAlgorithmDefault   = bucket.SlidingWindow
	APILimitTokensDefault = 1000
	APIWindowDefault      = time.Minute
	FailOpenDefault       = true
)

// Defaults of limits.api.costs: the tokens one request takes from its API
// key's `api` limit.
const (
	APICostReadDefault      = 1 // a GET
	APICostWriteDefault     = 1 // one job, a check, a cancel, any other write
	APICostBatchItemDefault = 1 // each item of a batch
)

// APICosts are the tokens one request takes from the `api` limit, by route
// class (limits.api.costs). A zero field takes its default; each is at
// least 1 (a free route would let a key call it without bound). Read and
// Write are at most the limit's capacity; a batch of n items costs
// n × BatchItem, and at most the capacity (a batch bigger than the whole
// limit takes all of it, so it can pass at all).
type APICosts struct {
	// Read is what a GET costs; default APICostReadDefault.
	Read int64 `yaml:"read"`
	// Write is what any other call costs; default APICostWriteDefault.
	Write int64 `yaml:"write"`
	// BatchItem is what each item of POST /v1/tenants/{t}/jobs:batch
	// costs; default APICostBatchItemDefault.
	BatchItem int64 `yaml:"batch_item"`
}

// WithDefaults returns c with each zero field at its default.
func (c APICosts) WithDefaults() APICosts {
	c.Read = cmp.Or(c.Read, APICostReadDefault)
	c.Write = cmp.Or(c.Write, APICostWriteDefault)
	c.BatchItem = cmp.Or(c.BatchItem, APICostBatchItemDefault)
	return c
}

func (c APICosts) validate(p *problems, at string, capacity int64) {
	for _, f := range []struct {
		name string
		v    int64
	}{{"read", c.Read}, {"write", c.Write}, {"batch_item", c.BatchItem}} {
		switch {
		case f.v < 1:
			p.add(at+"."+f.name, "must be at least 1, got %d", f.v)
		case capacity > 0 && f.v > capacity:
			p.add(at+"."+f.name, "must be at most the %s limit's capacity %d, got %d", APILimitName, capacity, f.v)
		}
	}
}

// Scopes of a checkable limit's buckets (limits.<name>.scope).
const (
	// ScopeAPIKey gives each API key its own bucket per key string: one API
	// key cannot spend another's tokens.
	ScopeAPIKey = "api_key"
	// ScopeShared gives every API key checking a key string the same bucket.
	ScopeShared = "shared"
	// ScopeDefault is the scope of a limit without one.
	ScopeDefault = ScopeAPIKey
)

// LimitConfig is one named limit. Window algorithms (fixed_window,
// sliding_log, sliding_window) take Limit and Window; bucket algorithms
// (token_bucket, gcra) take Rate and Burst. No field has a default except
// FailOpen and Scope.
type LimitConfig struct {
	// Algorithm is one of bucket.Algorithms.
	Algorithm bucket.Algorithm `yaml:"algorithm"`
	// Limit is the tokens per window (window algorithms), ≥ 1.
	Limit int64 `yaml:"limit"`
	// Window is the window length (window algorithms), ≥ 1ms.
	Window time.Duration `yaml:"window"`
	// Rate is the refill or emission rate (bucket algorithms).
	Rate bucket.Rate `yaml:"rate"`
	// Burst is the capacity or burst tolerance in tokens (bucket
	// algorithms), ≥ 1.
	Burst int64 `yaml:"burst"`
	// FailOpen, for the `api` limit only, admits requests while Redis is
	// unreachable; default FailOpenDefault. Setting it on another limit is
	// an error.
	FailOpen *bool `yaml:"fail_open"`
	// Scope, for the checkable limits (not `api`, always per API key), is
	// ScopeAPIKey or ScopeShared; "" means ScopeDefault (see Shared).
	Scope string `yaml:"scope"`
	// Costs, for the `api` limit only, are the tokens one request takes by
	// route class; see APICosts for the defaults.
	Costs *APICosts `yaml:"costs"`
}

// DefaultAPILimit returns the `api` limit used when the file has none:
// sliding_window, 1000 per 1m, fail open, the default costs.
func DefaultAPILimit() LimitConfig {
	failOpen := FailOpenDefault
	costs := APICosts{}.WithDefaults()
	return LimitConfig{
		Algorithm: APIAlgorithmDefault,
		Limit:     APILimitTokensDefault,
		Window:    APIWindowDefault,
		FailOpen:  &failOpen,
		Costs:     &costs,
	}
}

// Bucket returns l as the bucket package's Limit.
func (l LimitConfig) Bucket() bucket.Limit {
	return bucket.Limit{Algorithm: l.Algorithm, Limit: l.Limit, Window: l.Window, Rate: l.Rate, Burst: l.Burst}
}

// FailsOpen reports whether the limit admits requests while Redis is
// unreachable: FailOpen, or FailOpenDefault when unset.
func (l LimitConfig) FailsOpen() bool {
	if l.FailOpen == nil {
		return FailOpenDefault
	}
	return *l.FailOpen
}

// Shared reports whether every API key checking a key string shares one
// bucket (Scope ScopeShared); otherwise each API key has its own.
func (l LimitConfig) Shared() bool { return l.Scope == ScopeShared }

// validateLimits checks every limit by name, naming the offending field; a
// limit whose fields pass is also checked with bucket.Limit.Validate.
func validateLimits(p *problems, limits map[string]LimitConfig) {
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		at := "limits." + pathKey(name)
		if !validName(name) {
			p.add(at, "name %s", nameRule)
		}
		l := limits[name]
		before := len(p.errs)
		if l.FailOpen != nil && name != APILimitName {
			p.add(at+".fail_open", "only the %s limit takes fail_open", APILimitName)
		}
		if l.Costs != nil && name != APILimitName {
			p.add(at+".costs", "only the %s limit takes costs", APILimitName)
		}
		switch {
		case l.Scope != "" && name == APILimitName:
			p.add(at+".scope", "the %s limit is always per API key and takes no scope", APILimitName)
		case l.Scope != "" && l.Scope != ScopeAPIKey && l.Scope != ScopeShared:
			p.add(at+".scope", "must be %s or %s, got %q", ScopeAPIKey, ScopeShared, l.Scope)
		}
		switch {
		case l.Algorithm == "":
			p.add(at+".algorithm", "must be set, one of %v", bucket.Algorithms)
		case !l.Algorithm.Valid():
			p.add(at+".algorithm", "%q is not one of %v", l.Algorithm, bucket.Algorithms)
		case l.Algorithm.Windowed():
			validateWindowed(p, at, l)
		default:
			validateBucket(p, at, l)
		}
		if len(p.errs) == before {
			p.addErr(at, l.Bucket().Validate())
		}
		if l.Costs != nil && name == APILimitName {
			l.Costs.validate(p, at+".costs", l.Bucket().Capacity())
		}
	}
}

func validateWindowed(p *problems, at string, l LimitConfig) {
	if l.Limit < 1 {
		p.add(at+".limit", "must be at least 1, got %d", l.Limit)
	}
	if l.Window < time.Millisecond || l.Window%time.Microsecond != 0 {
		p.add(at+".window", "must be at least 1ms in whole microseconds, got %s", dur(l.Window))
	}
	if !l.Rate.IsZero() {
		p.add(at+".rate", "not used by %s, which takes limit and window", l.Algorithm)
	}
	if l.Burst != 0 {
		p.add(at+".burst", "not used by %s, which takes limit and window", l.Algorithm)
	}
}

func validateBucket(p *problems, at string, l LimitConfig) {
	if l.Rate.IntervalMicros() < 1 {
		p.add(at+".rate", "must be set (N/s, N/m, N/h or N/d)")
	}
	if l.Burst < 1 {
		p.add(at+".burst", "must be at least 1, got %d", l.Burst)
	}
	if t := l.Rate.IntervalMicros(); t >= 1 && l.Burst > bucket.MaxSpanMicros/t {
		p.add(at+".burst", "must be at most %d at rate %s (burst × 1/rate within 2^52 µs), got %d",
			bucket.MaxSpanMicros/t, l.Rate, l.Burst)
	}
	if l.Limit != 0 {
		p.add(at+".limit", "not used by %s, which takes rate and burst", l.Algorithm)
	}
	if l.Window != 0 {
		p.add(at+".window", "not used by %s, which takes rate and burst", l.Algorithm)
	}
}

// Limiters builds one limiter per configured limit on rdb, all sharing
// batcher, keyed by the limit's name (APILimitName among them).
func (c *Config) Limiters(rdb redis.UniversalClient, batcher *bucket.Batcher) (map[string]*bucket.Limiter, error) {
	out := make(map[string]*bucket.Limiter, len(c.Limits))
	for name, lc := range c.Limits {
		lim, err := bucket.NewLimiter(rdb, c.Redis.Prefix, name, lc.Bucket(), bucket.WithBatcher(batcher))
		if err != nil {
			return nil, fmt.Errorf("limit %q: %w", name, err)
		}
		out[name] = lim
	}
	return out, nil
}

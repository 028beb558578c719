// Package policy holds a tenant's policy (docs/design.md §1, §7): its dispatch rate
// and burst, concurrency cap, weight, admission bucket, backlog caps, retry
// curve, per-attempt timeout, adaptive flag and webhook signing secrets.
//
// Overrides is the sparse form the configuration's defaults and tenant
// entries and the API's PUT body hold; Resolve merges layers of it over
// Builtin into a Policy with every field set. The package has no I/O: Redis
// storage, HTTP handlers and configuration loading live elsewhere.
//
// Every policy default and bound is declared once, here, and everything
// else derives from it (the store's script integers, ParamsOf; the
// configuration's defaults; the API's view). Secrets print without their
// values (Secrets' String and LogValue): nothing logs, counts or shows one.
package policy

import (
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
)

// Built-in defaults: what a tenant gets when neither the configuration's
// defaults nor its own overrides set a field.
const (
	RateDefaultTokens       = 10 // per RateDefaultPer: 10/s
	RateDefaultPer          = time.Second
	BurstDefault            = 1
	ConcurrencyDefault      = 10
	WeightDefault           = 1
	AdmitRateDefaultTokens  = 100 // per AdmitRateDefaultPer: 100/s
	AdmitRateDefaultPer     = time.Second
	AdmitBurstDefault       = 1000
	MaxBacklogDefault       = 100_000
	MaxBacklogBytesDefault  = 256 * MiB
	MaxAttemptsDefault      = 8
	MinBackoffDefault       = time.Second
	MaxBackoffDefault       = time.Hour
	MaxDoublingsDefault     = 5
	MaxRetryDurationDefault = 24 * time.Hour
	TimeoutDefault          = 15 * time.Second
	AdaptiveDefault         = true
	UnsignedDefault         = false
	DisableOnGoneDefault    = false
	PacingDefault           = PacingHeaders
)

// Upper bounds enforced by Validate (the lower bounds are on the fields).
// They are the only declaration of each bound: the store's integer
// parameters and its scripts take their limits from here. Every bound keeps
// the values the scripts compute with below 10¹⁴, exact in Lua's doubles and
// cjson's 14-digit number format.
const (
	// MaxBurst bounds burst and admit.burst. It is also the largest cost of
	// one job.
	MaxBurst = 1_000_000
	// MaxSpan bounds burst × emission interval (and admit.burst × the
	// admission interval): 3.6·10¹⁵ µs, MaxBurst tokens at 1/h, so that b·T,
	// cost·T and now + b·T stay exact in the Lua scripts' doubles. It binds
	// only rates slower than 1/h: at 1/d a burst is at most 41 666.
	MaxSpan = MaxBurst * time.Hour
	// MaxCount bounds concurrency, weight and retry.max_attempts.
	MaxCount = 1_000_000
	// MaxBacklogLimit bounds max_backlog.
	MaxBacklogLimit = 1_000_000_000
	// MaxBacklogBytesLimit bounds max_backlog_bytes (10¹³ bytes, about 9 TiB).
	MaxBacklogBytesLimit ByteSize = 10_000_000_000_000
	// MaxDoublingsLimit bounds retry.max_doublings (2⁶² still fits an int64).
	MaxDoublingsLimit = 62
	// MaxDuration bounds retry.min_backoff, retry.max_backoff and
	// retry.max_retry_duration: 10¹³ µs, about 115 days, the longest duration
	// the store's scripts take.
	MaxDuration = 10_000_000 * time.Second
	// MaxTimeout bounds the per-attempt timeout.
	MaxTimeout = time.Hour
)

// Policy is a tenant's resolved policy: every field set. Build one with
// Resolve (or Builtin) and check it with Validate. Rates and bounds are in
// tokens (sums of job costs). A Policy is a value; copies share only the
// WebhookSecrets backing array, which Resolve allocates afresh.
//
// MarshalJSON emits the View (no secrets); store Overrides, not Policy.
type Policy struct {
	Rate            bucket.Rate   // dispatch rate r; default 10/s
	Burst           int64         // dispatch burst b in tokens, 1 = perfectly even spacing; default 1
	Concurrency     int64         // jobs running at once, claim → finish; default 10
	Weight          int64         // share of worker capacity under overload; default 1
	Admit           Admit         // enqueue token bucket; default {100/s, 1000}
	MaxBacklog      int64         // jobs queued + scheduled + retrying + released; default 100000
	MaxBacklogBytes int64         // bytes of those jobs; default 256 MiB
	Retry           Retry         // retry curve and limits; defaults on Retry
	Timeout         time.Duration // bounds one attempt; default 15s, at most MaxTimeout
	Adaptive        bool          // cut the rate on upstream pushback, recover on success; default true
	// Unsigned lets webhook jobs of a tenant with no signing secret (none
	// by API, none in the configuration) be enqueued and sent unsigned;
	// false refuses them at enqueue (422 no_webhook_secret); default false.
	Unsigned bool
	// DisableOnGone makes a 410 to an http job disable the tenant, as a 410
	// to a webhook job always does; false dead-letters only that job;
	// default false.
	DisableOnGone bool
	// Pacing says whether the tenant's rate follows the quota its
	// upstreams report in response headers (PacingHeaders: while the
	// reported remaining quota would run out before its reset, the rate
	// becomes what is left over the time to the reset, never above Rate)
	// or not (PacingOff); default PacingHeaders.
	Pacing Pacing
	// WebhookSecrets sign webhook deliveries; default none.
	WebhookSecrets Secrets
	// MaxResultBytes is how much of an http job's last response body its
	// result keeps, 1 … MaxResultBytesLimit; default MaxResultBytesDefault.
	MaxResultBytes int64
	// ResultHeaders are the response headers an http job's result keeps
	// (ResultHeaderAllowed); default ResultHeadersDefault(); empty keeps none.
	ResultHeaders []string
	// Upstreams are the shared upstream quotas a job of the tenant consumes
	// when its body has no "upstreams" (at most upstream.MaxPerJob valid,
	// distinct names); default none (nil).
	Upstreams []string
}

// Admit is the admission token bucket checked at enqueue: capacity Burst,
// refilled at Rate.
type Admit struct {
	Rate  bucket.Rate // default 100/s
	Burst int64       // default 1000
}

// Retry is the retry policy, with Google Cloud Tasks' names and curve, which
// the store's scripts compute: after failed attempt n (n = 1 for the first
// failure) the wait is MinBackoff · 2^(n−1) for n ≤ MaxDoublings+1, then grows
// linearly by the last doubled interval s = MinBackoff · 2^MaxDoublings as
// s · (n − MaxDoublings), every wait capped at MaxBackoff. For MinBackoff 10s,
// MaxBackoff 300s, MaxDoublings 3 the waits are 10s, 20s, 40s, 80s, 160s,
// 240s, 300s, … A job gets no further attempt once it has made MaxAttempts,
// or once MaxRetryDuration (when > 0) has passed since its first attempt.
type Retry struct {
	// MaxAttempts is the most attempts a job gets, counting the first; ≥ 1,
	// default 8.
	MaxAttempts int
	// MinBackoff is the wait after the first failure; > 0, default 1s.
	MinBackoff time.Duration
	// MaxBackoff caps every wait; ≥ MinBackoff, default 1h.
	MaxBackoff time.Duration
	// MaxDoublings is how many times the wait doubles before growing
	// linearly; ≥ 0, default 5.
	MaxDoublings int
	// MaxRetryDuration bounds retrying, measured from the first attempt in
	// Redis time; 0 means no bound; default 24h.
	MaxRetryDuration time.Duration
}

// Builtin returns the built-in defaults (the XxxDefault constants).
func Builtin() Policy {
	return Policy{
		Rate:            bucket.Rate{Tokens: RateDefaultTokens, Per: RateDefaultPer},
		Burst:           BurstDefault,
		Concurrency:     ConcurrencyDefault,
		Weight:          WeightDefault,
		Admit:           Admit{Rate: bucket.Rate{Tokens: AdmitRateDefaultTokens, Per: AdmitRateDefaultPer}, Burst: AdmitBurstDefault},
		MaxBacklog:      MaxBacklogDefault,
		MaxBacklogBytes: int64(MaxBacklogBytesDefault),
		Retry: Retry{
			MaxAttempts:      MaxAttemptsDefault,
			MinBackoff:       MinBackoffDefault,
			MaxBackoff:       MaxBackoffDefault,
			MaxDoublings:     MaxDoublingsDefault,
			MaxRetryDuration: MaxRetryDurationDefault,
		},
		Timeout:        TimeoutDefault,
		Adaptive:       AdaptiveDefault,
		Unsigned:       UnsignedDefault,
		DisableOnGone:  DisableOnGoneDefault,
		Pacing:         PacingDefault,
		MaxResultBytes: int64(MaxResultBytesDefault),
		ResultHeaders:  ResultHeadersDefault(),
	}
}

// MaxCost is the largest cost one job may have under p: min(Burst,
// Admit.Burst). A larger cost could never be admitted or dispatched, so the
// enqueue is refused (422).
func (p Policy) MaxCost() int64 { return min(p.Burst, p.Admit.Burst) }

// Pacing is a policy's pacing mode: PacingHeaders or PacingOff.
type Pacing string

// The pacing modes (docs/dispatch.md, "Pacing by quota headers").
const (
	// PacingHeaders paces the tenant by the quota its upstreams report
	// on every response (webhook.ReadQuotas).
	PacingHeaders Pacing = "headers"
	// PacingOff ignores the reported quota until it is used up (an
	// exhausted quota still pauses the tenant).
	PacingOff Pacing = "off"
)

// Valid reports whether m is one of the pacing modes.
func (m Pacing) Valid() bool { return m == PacingHeaders || m == PacingOff }

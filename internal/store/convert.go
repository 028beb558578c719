package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/policy"
)

// Conversions between the policy package's user units (rates, Go durations,
// booleans) and the integer µs units of Params and Overrides, and back for
// display. A rate becomes its emission interval bucket.Rate.IntervalMicros()
// (⌈Per / Tokens⌉ µs per token); a duration becomes whole µs, rounded up so
// that a positive duration stays positive; a bool becomes 1 (true) or 0.

// ParamsFromPolicy converts a resolved policy into the scripts' units. It
// does not validate: check p with policy.Policy.Validate and CheckStorable
// (or the result with Params.Validate). Webhook secrets are not part of
// Params.
func ParamsFromPolicy(p policy.Policy) Params {
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
	}
}

// OverridesFromPolicy converts sparse policy overrides field by field: a
// field unset in o is unset in the result. Webhook secrets are dropped (the
// store keeps integers only).
func OverridesFromPolicy(o policy.Overrides) Overrides {
	return Overrides{
		RateUS:             mapPtr(o.Rate, bucket.Rate.IntervalMicros),
		Burst:              mapPtr(o.Burst, identity),
		Concurrency:        mapPtr(o.Concurrency, identity),
		Weight:             mapPtr(o.Weight, identity),
		AdmitUS:            mapPtr(o.Admit.Rate, bucket.Rate.IntervalMicros),
		AdmitBurst:         mapPtr(o.Admit.Burst, identity),
		MaxBacklog:         mapPtr(o.MaxBacklog, identity),
		MaxBacklogBytes:    mapPtr(o.MaxBacklogBytes, func(b policy.ByteSize) int64 { return int64(b) }),
		MaxAttempts:        mapPtr(o.Retry.MaxAttempts, intInt64),
		MinBackoffUS:       mapPtr(o.Retry.MinBackoff, durationMicros),
		MaxBackoffUS:       mapPtr(o.Retry.MaxBackoff, durationMicros),
		MaxDoublings:       mapPtr(o.Retry.MaxDoublings, intInt64),
		MaxRetryDurationUS: mapPtr(o.Retry.MaxRetryDuration, durationMicros),
		TimeoutUS:          mapPtr(o.Timeout, durationMicros),
		Adaptive:           mapPtr(o.Adaptive, boolInt),
	}
}

// userNames maps Params field names to the policy's JSON names, for errors
// in user terms; durations are the fields whose values are µs.
var userNames = map[string]struct {
	name     string
	duration bool
}{
	"rate_us": {"rate", false}, "burst": {"burst", false}, "concurrency": {"concurrency", false},
	"weight": {"weight", false}, "admit_us": {"admit.rate", false}, "admit_burst": {"admit.burst", false},
	"max_backlog": {"max_backlog", false}, "max_backlog_bytes": {"max_backlog_bytes", false},
	"max_attempts": {"retry.max_attempts", false}, "min_backoff_us": {"retry.min_backoff", true},
	"max_backoff_us": {"retry.max_backoff", true}, "max_doublings": {"retry.max_doublings", false},
	"max_retry_duration_us": {"retry.max_retry_duration", true}, "timeout_us": {"timeout", true},
	"adaptive": {"adaptive", false},
}

// CheckStorable reports, as *policy.FieldError values joined with
// errors.Join and named as in the policy's JSON ("retry.max_doublings"),
// every field of p above the largest value Params can hold. It checks upper
// bounds only: the lower bounds are policy.Policy.Validate's, so calling both
// reports each problem once. nil when p fits.
func CheckStorable(p policy.Policy) error {
	params := ParamsFromPolicy(p)
	var errs []error
	for _, f := range paramFields {
		v := *f.param(&params)
		if v <= f.max {
			continue
		}
		u := userNames[f.name]
		limit := strconv.FormatInt(f.max, 10)
		if u.duration {
			limit = policy.Duration(time.Duration(f.max) * time.Microsecond).String()
		}
		errs = append(errs, &policy.FieldError{Field: u.name, Err: fmt.Errorf("must be at most %s", limit)})
	}
	return errors.Join(errs...)
}

// ParamsView is Params in user units, the JSON shape the API shows for a
// tenant's effective policy: the field names and notations of policy.View
// (rates "N/s", durations "15s", sizes "256MiB"), without webhook secrets,
// which Params does not hold.
type ParamsView struct {
	Rate            IntervalRate    `json:"rate"`
	Burst           int64           `json:"burst"`
	Concurrency     int64           `json:"concurrency"`
	Weight          int64           `json:"weight"`
	Admit           AdmitParamsView `json:"admit"`
	MaxBacklog      int64           `json:"max_backlog"`
	MaxBacklogBytes policy.ByteSize `json:"max_backlog_bytes"`
	Retry           RetryParamsView `json:"retry"`
	Timeout         policy.Duration `json:"timeout"`
	Adaptive        bool            `json:"adaptive"`
}

// AdmitParamsView is ParamsView's admission bucket.
type AdmitParamsView struct {
	Rate  IntervalRate `json:"rate"`
	Burst int64        `json:"burst"`
}

// RetryParamsView is ParamsView's retry curve.
type RetryParamsView struct {
	MaxAttempts      int64           `json:"max_attempts"`
	MinBackoff       policy.Duration `json:"min_backoff"`
	MaxBackoff       policy.Duration `json:"max_backoff"`
	MaxDoublings     int64           `json:"max_doublings"`
	MaxRetryDuration policy.Duration `json:"max_retry_duration"`
}

// View returns p in user units.
func (p Params) View() ParamsView {
	return ParamsView{
		Rate:            IntervalRate(p.RateUS),
		Burst:           p.Burst,
		Concurrency:     p.Concurrency,
		Weight:          p.Weight,
		Admit:           AdmitParamsView{Rate: IntervalRate(p.AdmitUS), Burst: p.AdmitBurst},
		MaxBacklog:      p.MaxBacklog,
		MaxBacklogBytes: policy.ByteSize(p.MaxBacklogBytes),
		Retry: RetryParamsView{
			MaxAttempts:      p.MaxAttempts,
			MinBackoff:       micros(p.MinBackoffUS),
			MaxBackoff:       micros(p.MaxBackoffUS),
			MaxDoublings:     p.MaxDoublings,
			MaxRetryDuration: micros(p.MaxRetryDurationUS),
		},
		Timeout:  micros(p.TimeoutUS),
		Adaptive: p.Adaptive == 1,
	}
}

// IntervalRate is an emission interval in µs per token, shown as a rate.
type IntervalRate int64

// Rate returns the rate "N/s", "N/m" or "N/h" (the first unit that fits, with
// the smallest N) whose emission interval is exactly r, and false when no
// such rate exists.
func (r IntervalRate) Rate() (bucket.Rate, bool) {
	t := int64(r)
	if t < 1 {
		return bucket.Rate{}, false
	}
	for _, per := range []time.Duration{time.Second, time.Minute, time.Hour} {
		rate := bucket.Rate{Tokens: (per.Microseconds() + t - 1) / t, Per: per}
		if rate.IntervalMicros() == t {
			return rate, true
		}
	}
	return bucket.Rate{}, false
}

// MarshalJSON writes r as a rate string ("50/s") when one has exactly this
// interval, else as a number of tokens per second (10⁶ / r).
func (r IntervalRate) MarshalJSON() ([]byte, error) {
	if rate, ok := r.Rate(); ok {
		return json.Marshal(rate.String())
	}
	if r < 1 {
		return []byte("0"), nil
	}
	return json.Marshal(1e6 / float64(r))
}

func micros(us int64) policy.Duration { return policy.Duration(time.Duration(us) * time.Microsecond) }

// ceilMicros is d in whole µs, rounded up (down for negative d).
func ceilMicros(d time.Duration) int64 {
	if d <= 0 {
		return d.Microseconds()
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

func durationMicros(d policy.Duration) int64 { return ceilMicros(time.Duration(d)) }
func identity(v int64) int64                 { return v }
func intInt64(v int) int64                   { return int64(v) }

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func mapPtr[T any](v *T, f func(T) int64) *int64 {
	if v == nil {
		return nil
	}
	out := f(*v)
	return &out
}

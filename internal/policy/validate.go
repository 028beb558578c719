package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/upstream"
)

// FieldError is one problem with one field, named by its dotted path in the
// JSON/YAML form ("admit.burst", "webhook_secrets[1]"). Validate methods
// return several of them joined with errors.Join; callers nesting a policy
// in a larger document (the configuration) prefix Field with WithPrefix.
type FieldError struct {
	Field string
	Err   error
}

// Error formats e as "field: problem".
func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the problem.
func (e *FieldError) Unwrap() error { return e.Err }

// WithPrefix returns err with every FieldError in it (found through
// errors.Join trees) renamed to prefix + "." + Field, and every other error e
// turned into a FieldError{prefix, e}. It returns nil for nil.
func WithPrefix(prefix string, err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = WithPrefix(prefix, e)
		}
		return errors.Join(out...)
	}
	if fe, ok := err.(*FieldError); ok {
		return &FieldError{Field: prefix + "." + fe.Field, Err: fe.Err}
	}
	return &FieldError{Field: prefix, Err: err}
}

// Validate reports every problem with p at once, each a *FieldError:
// rate and admit.rate set; burst and admit.burst in 1…MaxBurst, and each
// times its rate's emission interval at most MaxSpan; concurrency,
// weight and retry.max_attempts in 1…MaxCount; max_backlog in
// 1…MaxBacklogLimit; max_backlog_bytes in 1…MaxBacklogBytesLimit;
// 0 < retry.min_backoff ≤ retry.max_backoff ≤ MaxDuration;
// retry.max_doublings in 0…MaxDoublingsLimit; retry.max_retry_duration in
// 0…MaxDuration; 0 < timeout ≤ MaxTimeout; at most MaxWebhookSecrets webhook
// secrets, each valid for ParseWebhookSecret; max_result_bytes in
// 1…MaxResultBytesLimit; at most MaxResultHeaders result_headers, each a
// header name, optionally ending in "*"; at most upstream.MaxPerJob
// upstreams, valid and distinct names (upstream.CheckNames); pacing
// "headers" or "off".
func (p Policy) Validate() error {
	var c checker
	c.rate("rate", p.Rate)
	c.between("burst", p.Burst, 1, MaxBurst)
	c.span("burst", p.Rate, p.Burst)
	c.between("concurrency", p.Concurrency, 1, MaxCount)
	c.between("weight", p.Weight, 1, MaxCount)
	c.rate("admit.rate", p.Admit.Rate)
	c.between("admit.burst", p.Admit.Burst, 1, MaxBurst)
	c.span("admit.burst", p.Admit.Rate, p.Admit.Burst)
	c.between("max_backlog", p.MaxBacklog, 1, MaxBacklogLimit)
	c.between("max_backlog_bytes", p.MaxBacklogBytes, 1, int64(MaxBacklogBytesLimit))
	c.between("retry.max_attempts", int64(p.Retry.MaxAttempts), 1, MaxCount)
	c.positive("retry.min_backoff", p.Retry.MinBackoff)
	c.positive("retry.max_backoff", p.Retry.MaxBackoff)
	c.backoffOrder(p.Retry.MinBackoff, p.Retry.MaxBackoff)
	c.between("retry.max_doublings", int64(p.Retry.MaxDoublings), 0, MaxDoublingsLimit)
	c.notNegative("retry.max_retry_duration", p.Retry.MaxRetryDuration)
	c.timeout(p.Timeout)
	c.secrets(p.WebhookSecrets)
	c.between("max_result_bytes", p.MaxResultBytes, 1, int64(MaxResultBytesLimit))
	c.resultHeaders(p.ResultHeaders)
	c.upstreams(p.Upstreams)
	c.pacing(p.Pacing)
	return c.err()
}

// Validate reports every problem with the fields o sets, at once, by the
// rules of Policy.Validate; min_backoff ≤ max_backoff is checked only when o
// sets both. Resolve then Policy.Validate checks the merged result.
func (o Overrides) Validate() error {
	var c checker
	ifSet(o.Rate, func(v bucket.Rate) { c.rate("rate", v) })
	ifSet(o.Burst, func(v int64) { c.between("burst", v, 1, MaxBurst) })
	ifSet(o.Concurrency, func(v int64) { c.between("concurrency", v, 1, MaxCount) })
	ifSet(o.Weight, func(v int64) { c.between("weight", v, 1, MaxCount) })
	ifSet(o.Admit.Rate, func(v bucket.Rate) { c.rate("admit.rate", v) })
	ifSet(o.Admit.Burst, func(v int64) { c.between("admit.burst", v, 1, MaxBurst) })
	if o.Rate != nil && o.Burst != nil {
		c.span("burst", *o.Rate, *o.Burst)
	}
	if o.Admit.Rate != nil && o.Admit.Burst != nil {
		c.span("admit.burst", *o.Admit.Rate, *o.Admit.Burst)
	}
	ifSet(o.MaxBacklog, func(v int64) { c.between("max_backlog", v, 1, MaxBacklogLimit) })
	ifSet(o.MaxBacklogBytes, func(v ByteSize) { c.between("max_backlog_bytes", int64(v), 1, int64(MaxBacklogBytesLimit)) })
	r := o.Retry
	ifSet(r.MaxAttempts, func(v int) { c.between("retry.max_attempts", int64(v), 1, MaxCount) })
	ifSet(r.MinBackoff, func(v Duration) { c.positive("retry.min_backoff", time.Duration(v)) })
	ifSet(r.MaxBackoff, func(v Duration) { c.positive("retry.max_backoff", time.Duration(v)) })
	if r.MinBackoff != nil && r.MaxBackoff != nil {
		c.backoffOrder(time.Duration(*r.MinBackoff), time.Duration(*r.MaxBackoff))
	}
	ifSet(r.MaxDoublings, func(v int) { c.between("retry.max_doublings", int64(v), 0, MaxDoublingsLimit) })
	ifSet(r.MaxRetryDuration, func(v Duration) { c.notNegative("retry.max_retry_duration", time.Duration(v)) })
	ifSet(o.Timeout, func(v Duration) { c.timeout(time.Duration(v)) })
	c.secrets(o.WebhookSecrets)
	ifSet(o.MaxResultBytes, func(v ByteSize) { c.between("max_result_bytes", int64(v), 1, int64(MaxResultBytesLimit)) })
	c.resultHeaders(o.ResultHeaders)
	c.upstreams(o.Upstreams)
	ifSet(o.Pacing, c.pacing)
	return c.err()
}

// pacing checks a pacing mode.
func (c *checker) pacing(m Pacing) {
	if !m.Valid() {
		c.add("pacing", "must be %q or %q, got %q", PacingHeaders, PacingOff, string(m))
	}
}

// upstreams checks a list of upstream names (upstream.CheckNames).
func (c *checker) upstreams(names []string) {
	for _, fe := range upstream.CheckNames(names) {
		c.errs = append(c.errs, &FieldError{Field: fe.Field, Err: fe.Err})
	}
}

func ifSet[T any](v *T, check func(T)) {
	if v != nil {
		check(*v)
	}
}

// checker collects FieldErrors.
type checker struct{ errs []error }

func (c *checker) add(field, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Field: field, Err: fmt.Errorf(format, args...)})
}

func (c *checker) err() error { return errors.Join(c.errs...) }

func (c *checker) rate(field string, r bucket.Rate) {
	if r.IntervalMicros() < 1 {
		c.add(field, "must be set (N/s, N/m, N/h or N/d)")
	} else if r.TooFast() {
		c.add(field, "must be at most %s, got %s", bucket.MaxRate, r)
	}
}

// span checks burst × r's emission interval against MaxSpan, for a valid
// rate and burst (the other checks report invalid ones).
func (c *checker) span(field string, r bucket.Rate, burst int64) {
	t, limit := r.IntervalMicros(), MaxSpan.Microseconds()
	if t < 1 || burst < 1 || burst > MaxBurst || burst <= limit/t {
		return
	}
	c.add(field, "must be at most %d at rate %s (burst × 1/rate at most %s), got %d", limit/t, r, MaxSpan, burst)
}

func (c *checker) between(field string, v, lo, hi int64) {
	switch {
	case v < lo:
		c.add(field, "must be at least %d, got %d", lo, v)
	case v > hi:
		c.add(field, "must be at most %d, got %d", hi, v)
	}
}

func (c *checker) positive(field string, d time.Duration) {
	if d <= 0 {
		c.add(field, "must be positive, got %s", Duration(d))
	}
	c.atMost(field, d, MaxDuration)
}

func (c *checker) notNegative(field string, d time.Duration) {
	if d < 0 {
		c.add(field, "must not be negative, got %s", Duration(d))
	}
	c.atMost(field, d, MaxDuration)
}

func (c *checker) atMost(field string, d, limit time.Duration) {
	if d > limit {
		c.add(field, "must be at most %s, got %s", Duration(limit), Duration(d))
	}
}

func (c *checker) backoffOrder(minBackoff, maxBackoff time.Duration) {
	if minBackoff > 0 && maxBackoff > 0 && maxBackoff < minBackoff {
		c.add("retry.max_backoff", "must be at least retry.min_backoff (%s), got %s", Duration(minBackoff), Duration(maxBackoff))
	}
}

func (c *checker) timeout(d time.Duration) {
	if d <= 0 {
		c.add("timeout", "must be positive, got %s", Duration(d))
	}
	c.atMost("timeout", d, MaxTimeout)
}

func (c *checker) secrets(s Secrets) {
	if len(s) > MaxWebhookSecrets {
		c.add("webhook_secrets", "at most %d secrets, got %d", MaxWebhookSecrets, len(s))
	}
	for i, v := range s {
		if _, err := ParseWebhookSecret(v); err != nil {
			c.errs = append(c.errs, &FieldError{Field: fmt.Sprintf("webhook_secrets[%d]", i), Err: err})
		}
	}
}

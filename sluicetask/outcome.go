package sluicetask

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/wire"
)

// ThrottledError is the error of Throttled: the upstream asked to slow down.
type ThrottledError struct {
	// After is how long the upstream asked to wait; 0 means Sluice's
	// throttle.default_pause. Sluice caps it at throttle.max_pause.
	After time.Duration
}

func (e *ThrottledError) Error() string {
	if e.After > 0 {
		return "upstream throttled: retry after " + e.After.String()
	}
	return "upstream throttled"
}

// Throttled returns the error a handler returns when the upstream it calls
// said "slow down" (an HTTP 429, or 503 with Retry-After): Sluice pauses the
// job's tenant for after (0: Sluice's throttle.default_pause; capped at
// throttle.max_pause; negative is 0) and puts the job back at the head of
// the tenant's backlog without using an attempt. Every job of the tenant
// waits for the pause, on every worker; an adaptive tenant's rate is also
// cut. A throttle loop still ends at the policy's max_retry_duration.
//
// Outside a Sluice job (a task without sluice headers) it is an ordinary
// error for asynq.
func Throttled(after time.Duration) error { return &ThrottledError{After: after} }

// Permanent marks err as a permanent failure: Sluice moves the job to its
// tenant's dead letters at once, without further attempts (they can be
// replayed through the API). The result also wraps asynq.SkipRetry, so the
// handler means the same to a plain asynq task; wrapping asynq.SkipRetry
// yourself has the same effect. Its message is err's ("permanent failure"
// for a nil err).
func Permanent(err error) error { return &permanentError{err: err} }

type permanentError struct{ err error }

func (e *permanentError) Error() string {
	if e.err == nil {
		return "permanent failure"
	}
	return e.err.Error()
}

func (e *permanentError) Unwrap() []error { return []error{e.err, asynq.SkipRetry} }

// outcomeOf classifies what a handler returned (see the package
// documentation): nil → success; *ThrottledError → throttled, pausing its
// After; wrapping asynq.SkipRetry → permanent; any other error → retry,
// reported as timed out (wire.ReasonTimeout) when ctx, the attempt's, ran out (an
// adaptive tenant then slows down as for an upstream timeout). The error's
// message is the attempt's error in the job's log, cut by Sluice to
// wire.MaxErrorLen bytes.
func outcomeOf(ctx context.Context, err error, latency time.Duration) wire.AttemptOutcome {
	o := wire.AttemptOutcome{Latency: latency}
	var throttled *ThrottledError
	switch {
	case err == nil:
		o.Kind = wire.FinishSuccess
	case errors.As(err, &throttled):
		o.Kind, o.Pause, o.Error = wire.FinishThrottled, max(throttled.After, 0), err.Error()
	case errors.Is(err, asynq.SkipRetry):
		o.Kind, o.Error = wire.FinishPermanent, err.Error()
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.Kind, o.Error, o.TimedOut = wire.FinishRetry, wire.ReasonTimeout, true
	default:
		o.Kind, o.Error = wire.FinishRetry, err.Error()
	}
	return o
}

// Job describes the Sluice job a handler is running.
type Job struct {
	// ID is the job's id, the same on every attempt: a good idempotency key
	// for the upstream.
	ID     string
	Tenant string
	// Attempt is this attempt's number, from 1 (throttled attempts do not
	// count).
	Attempt int
	// Slot is the instant the job was scheduled to run, in Redis time.
	Slot time.Time
}

type jobKey struct{}

// JobFromContext returns the Sluice job of a handler's ctx; ok is false
// for a task that is not a Sluice job.
func JobFromContext(ctx context.Context) (job Job, ok bool) {
	job, ok = ctx.Value(jobKey{}).(Job)
	return job, ok
}

// errorf is fmt.Errorf with the package's prefix.
func errorf(format string, args ...any) error {
	return fmt.Errorf("sluicetask: "+format, args...)
}

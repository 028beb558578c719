package policy

import (
	"math"
	"time"
)

// Backoff is the wait before the next attempt after attempt failed attempts
// (attempt 1 = the first failure), on Google Cloud Tasks' curve:
//
//   - for attempt = 1 … MaxDoublings+1 the wait doubles from MinBackoff:
//     MinBackoff · 2^(attempt−1);
//   - after that it grows linearly by the last doubled interval
//     s = MinBackoff · 2^MaxDoublings: s · (attempt − MaxDoublings);
//   - every wait is capped at MaxBackoff.
//
// For MinBackoff 10s, MaxBackoff 300s, MaxDoublings 3 the waits are 10s, 20s,
// 40s, 80s, 160s, 240s, 300s, 300s, …; with MaxDoublings 0 they are
// MinBackoff · attempt. An attempt below 1 is treated as 1. Backoff does not
// overflow for any attempt; it is meaningful for a Retry that passed
// Validate. Whether another attempt is due at all is Exhausted's question.
func (r Retry) Backoff(attempt int) time.Duration {
	attempt = max(attempt, 1)
	wait := r.MinBackoff
	doublings := min(attempt-1, r.MaxDoublings)
	for range doublings {
		if wait >= r.MaxBackoff || wait > math.MaxInt64/2 {
			return r.MaxBackoff
		}
		wait *= 2
	}
	if steps := attempt - r.MaxDoublings; steps > 1 {
		if wait > 0 && int64(steps) > int64(r.MaxBackoff/wait) {
			return r.MaxBackoff
		}
		wait *= time.Duration(steps)
	}
	return min(wait, r.MaxBackoff)
}

// Exhausted reports whether a job that has made attempts attempts (counting
// the first), the first of them elapsed ago, gets no further attempt: when
// attempts ≥ MaxAttempts, or MaxRetryDuration > 0 and elapsed ≥
// MaxRetryDuration. Either limit ends retrying (Cloud Tasks instead requires
// both), so MaxRetryDuration also ends throttle loops that use no attempts.
func (r Retry) Exhausted(attempts int, elapsed time.Duration) bool {
	return attempts >= r.MaxAttempts || (r.MaxRetryDuration > 0 && elapsed >= r.MaxRetryDuration)
}

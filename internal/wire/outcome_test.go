package wire

import (
	"testing"
	"time"
)

func TestCongestedSignals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o    AttemptOutcome
		want bool
	}{
		{AttemptOutcome{Kind: FinishThrottled, Status: 429}, true},
		{AttemptOutcome{Kind: FinishThrottled, Status: 503}, true},
		{AttemptOutcome{Kind: FinishThrottled}, true}, // a task's "upstream throttled"
		{AttemptOutcome{Kind: FinishRetry, Status: 500}, true},
		{AttemptOutcome{Kind: FinishRetry, Status: 503}, true},
		{AttemptOutcome{Kind: FinishRetry, Error: ReasonTimeout, TimedOut: true}, true},
		{AttemptOutcome{Kind: FinishRetry, Error: ReasonTimeout}, false}, // the reason alone is text for people
		{AttemptOutcome{Kind: FinishRetry, Status: 504, TimedOut: true}, true},
		{AttemptOutcome{Kind: FinishRetry, Status: 408}, false},
		{AttemptOutcome{Kind: FinishRetry, Status: 425}, false},
		{AttemptOutcome{Kind: FinishRetry, Error: "connection_error"}, false},
		{AttemptOutcome{Kind: FinishRetry, Error: "panic"}, false},
		{AttemptOutcome{Kind: FinishPermanent, Status: 500}, false},
		{AttemptOutcome{Kind: FinishSuccess, Status: 200, Pause: time.Second}, false},
		{AttemptOutcome{Kind: FinishGone, Status: 410}, false},
	} {
		if got := c.o.Congested(); got != c.want {
			t.Errorf("%+v: Congested() = %v, want %v", c.o, got, c.want)
		}
	}
}

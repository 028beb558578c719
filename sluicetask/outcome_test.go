package sluicetask

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestOutcomeOf pins the mapping of a handler's result to a finish
// (package documentation): success, throttled with its pause (wrapped or
// not; negative is 0), permanent for Permanent and asynq.SkipRetry, retry
// for anything else — "timeout" when the attempt's deadline passed.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	bad := errors.New("bad address")
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	cases := []struct {
		name  string
		ctx   context.Context
		err   error
		kind  wire.FinishKind
		pause time.Duration
		msg   string
	}{
		{"nil", context.Background(), nil, wire.FinishSuccess, 0, ""},
		{"throttled", context.Background(), Throttled(5 * time.Second), wire.FinishThrottled, 5 * time.Second, "upstream throttled: retry after 5s"},
		{"throttled, default pause", context.Background(), Throttled(0), wire.FinishThrottled, 0, "upstream throttled"},
		{"throttled, negative", context.Background(), Throttled(-time.Second), wire.FinishThrottled, 0, "upstream throttled"},
		{"throttled, wrapped", context.Background(), fmt.Errorf("call api: %w", Throttled(2*time.Second)), wire.FinishThrottled, 2 * time.Second, "call api: upstream throttled: retry after 2s"},
		{"throttled after the deadline", expired, Throttled(time.Second), wire.FinishThrottled, time.Second, "upstream throttled: retry after 1s"},
		{"permanent", context.Background(), Permanent(bad), wire.FinishPermanent, 0, "bad address"},
		{"permanent nil", context.Background(), Permanent(nil), wire.FinishPermanent, 0, "permanent failure"},
		{"skip retry", context.Background(), fmt.Errorf("no such user: %w", asynq.SkipRetry), wire.FinishPermanent, 0, "no such user: skip retry for the task"},
		{"other", context.Background(), errors.New("upstream 500"), wire.FinishRetry, 0, "upstream 500"},
		{"deadline passed", expired, errors.New("read: i/o timeout"), wire.FinishRetry, 0, wire.ReasonTimeout},
	}
	for _, tc := range cases {
		o := outcomeOf(tc.ctx, tc.err, 3*time.Millisecond)
		timedOut := tc.msg == wire.ReasonTimeout
		if o.Kind != tc.kind || o.Pause != tc.pause || o.Error != tc.msg || o.Latency != 3*time.Millisecond || o.Status != 0 || o.TimedOut != timedOut {
			t.Errorf("%s: %+v, want kind %s pause %s error %q", tc.name, o, tc.kind, tc.pause, tc.msg)
		}
	}
	if p := Permanent(bad); !errors.Is(p, bad) || !errors.Is(p, asynq.SkipRetry) {
		t.Errorf("Permanent(bad) = %v: want it to wrap bad and asynq.SkipRetry", p)
	}
	var te *ThrottledError
	if !errors.As(fmt.Errorf("x: %w", Throttled(time.Minute)), &te) || te.After != time.Minute {
		t.Errorf("Throttled: errors.As gives %+v", te)
	}
}

func TestPrefixDefaultIsSluices(t *testing.T) {
	t.Parallel()
	if PrefixDefault != store.PrefixDefault {
		t.Errorf("PrefixDefault %q, Sluice's is %q", PrefixDefault, store.PrefixDefault)
	}
}

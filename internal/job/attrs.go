package job

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/wire"
)

// Attrs are the parts of a job the store keeps beside its canonical JSON
// (Spec.Canonical): its type, cost, schedule, idempotency key, callback and
// upstreams. Spec.Check
// returns them for a valid Spec; Attrs.Check checks them for callers that
// build a job without a Spec (the store checks every job it is given with
// it). The zero value is not valid (no Type).
type Attrs struct {
	// Type is wire.TypeWebhook, wire.TypeHTTP or wire.TypeTask.
	Type string
	// Cost is the job's size in tokens, 1 … the MaxCost checked against.
	Cost int64
	// Delay, when > 0, runs the job that long after its enqueue; at most
	// MaxDelay, never negative. Not with RunAt.
	Delay time.Duration
	// RunAt, when not zero, is the earliest time the job may run: after
	// 1970, at most MaxRunAt. A RunAt at or before the enqueue queues the
	// job at once.
	RunAt time.Time
	// IdemKey is the idempotency key, "" for none; see CheckIdemKey.
	IdemKey string
	// Callback is the callback URL, "" for none; see CheckURL.
	Callback string
	// Upstreams are the upstreams the job consumes, sorted: at most
	// upstream.MaxPerJob valid, distinct names; nil or empty for none.
	// Spec.Check leaves nil when the job names none (the policy's default
	// applies: the API resolves it), an empty slice for an explicit [].
	Upstreams []string
}

// Check checks a with the same rules and messages as Spec.Check, the cost
// against maxCost (0 = no bound beyond ≥ 1), and returns every problem at
// once, as *FieldError values joined by errors.Join; nil when a is valid.
func (a Attrs) Check(maxCost int64) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	checkType(a.Type, add)
	checkCost(a.Cost, maxCost, add)
	if a.Delay != 0 && !a.RunAt.IsZero() {
		add("delay", "give delay or run_at, not both")
	}
	checkDelay(a.Delay, a.Delay.String(), add)
	if !a.RunAt.IsZero() {
		checkRunAt(a.RunAt, add)
	}
	if err := CheckIdemKey(a.IdemKey); err != nil {
		add("idempotency_key", "%v", err)
	}
	if a.Callback != "" {
		if err := CheckURL(a.Callback); err != nil {
			add("callback.url", "%v", err)
		}
	}
	checkUpstreams(a.Upstreams, add)
	return errors.Join(errs...)
}

// checkUpstreams checks the upstreams a job names (upstream.CheckNames):
// one problem each, named "upstreams" or "upstreams[i]".
func checkUpstreams(names []string, add adder) {
	for _, fe := range upstream.CheckNames(names) {
		add(fe.Field, "%v", fe.Err)
	}
}

// CheckIdemKey checks an idempotency key ("" = none): at most
// MaxIdemKeyLen bytes, each printable ASCII (0x20 … 0x7e). The error says
// what is wrong without naming the field or echoing the key.
func CheckIdemKey(key string) error {
	if len(key) > MaxIdemKeyLen {
		return fmt.Errorf("%d bytes, at most %d", len(key), MaxIdemKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("byte %d is not printable ASCII", i)
		}
	}
	return nil
}

// checkType checks a job type.
func checkType(typ string, add adder) {
	switch typ {
	case wire.TypeWebhook, wire.TypeHTTP, wire.TypeTask:
	case "":
		add("type", "required: webhook, http or task")
	default:
		add("type", "unknown type %q: want webhook, http or task", typ)
	}
}

// checkCost checks a cost against maxCost (0 = no upper bound).
func checkCost(cost, maxCost int64, add adder) {
	switch {
	case cost < 1:
		add("cost", "must be at least 1, got %d", cost)
	case maxCost > 0 && cost > maxCost:
		add("cost", "%d exceeds the tenant's min(burst, admit.burst) = %d and could never be admitted", cost, maxCost)
	}
}

// checkDelay checks a parsed delay; shown is how the caller wrote it.
func checkDelay(d time.Duration, shown string, add adder) {
	switch {
	case d < 0:
		add("delay", "must not be negative, got %s", shown)
	case d > MaxDelay:
		add("delay", "at most %s", MaxDelay)
	}
}

// checkRunAt checks a run_at that is not the zero time.
func checkRunAt(t time.Time, add adder) {
	switch {
	case t.UnixMicro() <= 0:
		add("run_at", "must be after 1970")
	case t.After(MaxRunAt):
		add("run_at", "must be before %s", MaxRunAt.Format(time.RFC3339))
	}
}

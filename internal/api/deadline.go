package api

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// Defaults of Options.RequestTimeout and Options.ReadyTimeout.
const (
	RequestTimeoutDefault = config.RequestTimeoutDefault
	ReadyTimeoutDefault   = time.Second
)

// redisBudget is the context a /v1 route's handler runs under: the time the
// request may still wait on Redis (Options.RequestTimeout less what the API
// limiter used) starts running at the handler's first Redis call, i.e. the
// first time anyone asks the context for its deadline, done channel or
// error. Reading the request body, which touches none of these, does not
// count against it: a large batch on a slow link is not cut short.
//
// Values come from the request's context. Safe for concurrent use; stop
// releases the timer.
type redisBudget struct {
	context.Context // the request's own
	budget          time.Duration

	once   sync.Once
	run    context.Context
	cancel context.CancelFunc
	// spent is set when the budget was used up before the first call: the
	// handler's Redis calls then fail before anything is sent.
	spent bool
}

// budgetKey is the Value key under which a redisBudget returns itself.
type budgetKey struct{}

func newRedisBudget(parent context.Context, budget time.Duration) *redisBudget {
	return &redisBudget{Context: parent, budget: budget}
}

func (b *redisBudget) start() context.Context {
	b.once.Do(func() {
		b.spent = b.budget <= 0
		b.run, b.cancel = context.WithTimeout(b.Context, b.budget)
	})
	return b.run
}

func (b *redisBudget) Deadline() (time.Time, bool) { return b.start().Deadline() }
func (b *redisBudget) Done() <-chan struct{}       { return b.start().Done() }
func (b *redisBudget) Err() error                  { return b.start().Err() }

func (b *redisBudget) Value(key any) any {
	if key == (budgetKey{}) {
		return b
	}
	return b.Context.Value(key)
}

// spentBeforeUse reports whether ctx is a redisBudget that was already used
// up at the handler's first Redis call (so no command was sent).
func spentBeforeUse(ctx context.Context) bool {
	b, ok := ctx.Value(budgetKey{}).(*redisBudget)
	if !ok {
		return false
	}
	b.start()
	return b.spent
}

// stop releases the budget's timer; the context is done afterwards.
func (b *redisBudget) stop() {
	b.start()
	b.cancel()
}

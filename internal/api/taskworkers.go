package api

import (
	"context"
	"github.com/sluicehq/sluice/internal/dispatch"
	"net/http"
	"sync"
	"time"
)

// TaskWorkerCacheDefault is the default of Options.TaskWorkerCache.
const TaskWorkerCacheDefault = time.Second

// taskQueueRefusal answers whether task item it for queue may be enqueued
// (DESIGN §2.5): a 422 no_task_worker when no live sluicetask middleware
// serves the queue (nothing would ever run the job), nil when one does. An
// item under an idempotency key is not refused here: it carries the refusal
// to the store (Item.Unless), which answers a replay of an accepted request
// as usual and refuses only a new job. err is set, and the whole request
// fails (503), when Redis cannot tell. queue must be in the task_queues
// allow-list: that bounds the cache.
func (s *Server) taskQueueRefusal(r *http.Request, it *dispatch.Item, queue string) (*Error, error) {
	live, err := s.taskWorkers.live(r.Context(), queue)
	if err != nil {
		return nil, s.storeError(r, "task_workers", err)
	}
	if live {
		return nil, nil
	}
	refusal := errorf(http.StatusUnprocessableEntity, CodeNoTaskWorker,
		"queue %q has no live task worker: run an asynq server with the sluicetask middleware "+
			"(github.com/sluicehq/sluice/sluicetask) serving it, then retry", queue)
	if it.IdemKey == "" {
		return refusal, nil
	}
	it.Unless = &dispatch.Refusal{Code: dispatch.Code(refusal.Code), Detail: refusal.Message}
	return nil, nil
}

// liveCache remembers per task queue whether a live middleware serves it,
// for ttl (≤ 0: not at all), so that a burst of enqueues costs one Redis
// call per queue and ttl. A middleware that starts is seen within ttl; one
// that stops may still count as live for ttl (its jobs then wait in the
// backlog). Safe for concurrent use.
type liveCache struct {
	ask func(ctx context.Context, queue string) (bool, error)
	ttl time.Duration
	now func() time.Time // the local clock; tests replace it

	mu      sync.Mutex
	answers map[string]liveAnswer
}

type liveAnswer struct {
	live bool
	at   time.Time
}

func newLiveCache(ask func(context.Context, string) (bool, error), ttl time.Duration) *liveCache {
	return &liveCache{ask: ask, ttl: ttl, now: time.Now, answers: map[string]liveAnswer{}}
}

// live is the cached answer for queue when it is younger than ttl, else
// ask's (cached unless it failed).
func (c *liveCache) live(ctx context.Context, queue string) (bool, error) {
	now := c.now()
	if c.ttl > 0 {
		c.mu.Lock()
		a, ok := c.answers[queue]
		c.mu.Unlock()
		if ok && now.Sub(a.at) < c.ttl {
			return a.live, nil
		}
	}
	live, err := c.ask(ctx, queue)
	if err != nil {
		return false, err
	}
	if c.ttl > 0 {
		c.mu.Lock()
		c.answers[queue] = liveAnswer{live: live, at: now}
		c.mu.Unlock()
	}
	return live, nil
}

package api

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// TaskWorkerCacheDefault is the default of Options.TaskWorkerCache.
const TaskWorkerCacheDefault = time.Second

// taskQueueRefusal answers whether task item it for queue may be enqueued
// (docs/design.md §2.5): a 422 no_task_worker when no live sluicetask middleware
// serves the queue (nothing would ever run the job), nil when one does. An
// item under an idempotency key is not refused here: it carries the refusal
// to the store (Item.Unless), which answers a replay of an accepted request
// as usual and refuses only a new job. err is set, and the whole request
// fails (503), when Redis cannot tell. queue must be in the task_queues
// allow-list: that bounds the cache.
func (s *Server) taskQueueRefusal(r *http.Request, it *store.Item, queue string) (*Error, error) {
	live, err := s.taskWorkers.Live(r.Context(), queue)
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
	it.Unless = &store.Refusal{Code: store.Code(refusal.Code), Detail: refusal.Message}
	return nil, nil
}

package dispatch

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/wire"
)

// taskFor builds the asynq task and options of one release (the hand-off
// contract of package wire). A task job's asynq payload is empty: the middleware gets
// the job's payload from the claim. An unknown job type, or a task job
// without a queue, a task type or with braces in its queue, is an error:
// such a job cannot have been admitted by the API.
func (d *Dispatcher) taskFor(r wire.Release) (*asynq.Task, []asynq.Option, error) {
	opts := []asynq.Option{
		asynq.TaskID(r.TaskID()),
		asynq.MaxRetry(0),
		// The worker first waits for SendAt: the slot plus the lateness
		// the tenant's send schedule carries.
		asynq.Timeout(wire.TaskTimeout(d.cfg.Pass.Lead, r.Timeout, d.cfg.Pass.Grace+max(r.SendAt.Sub(r.Slot), 0))),
	}
	p := wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro()}
	switch r.Type {
	case wire.TypeWebhook, wire.TypeHTTP:
		payload, _ := json.Marshal(p) // plain fields: cannot fail
		taskType, queue := wire.TaskTypeWebhook, wire.WebhookQueue(d.cfg.Prefix)
		if r.Type == wire.TypeHTTP {
			taskType, queue = wire.TaskTypeHTTP, wire.HTTPQueue(d.cfg.Prefix)
		}
		return asynq.NewTask(taskType, payload), append(opts, asynq.Queue(queue)), nil
	case wire.TypeTask:
		if r.Queue == "" || r.TaskType == "" || strings.ContainsAny(r.Queue, "{}") {
			return nil, nil, fmt.Errorf("task job %s: queue %q, task type %q: want a queue without braces and a task type", r.ID, r.Queue, r.TaskType)
		}
		return asynq.NewTaskWithHeaders(r.TaskType, nil, p.Headers()), append(opts, asynq.Queue(r.Queue)), nil
	}
	return nil, nil, fmt.Errorf("job %s: unknown type %q", r.ID, r.Type)
}

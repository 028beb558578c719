package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
		asynq.Timeout(wire.TaskTimeout(d.cfg.Pass.Lead, r.Timeout, d.passConfig().Grace+max(r.SendAt.Sub(r.Slot), 0))),
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

// handoff enqueues the released jobs into asynq, up to EnqueueParallelism
// at once. It runs to completion even when ctx ends, bounded by
// handoffBound: a job released but not handed off waits for the sweep.
func (d *Dispatcher) handoff(ctx context.Context, rels []wire.Release) {
	if len(rels) == 0 {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.handoffBound())
	defer cancel()
	n := min(len(rels), d.cfg.EnqueueParallelism)
	if n == 1 {
		for _, r := range rels {
			d.enqueue(hctx, r)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(rels)); i = next.Add(1) - 1 {
				d.enqueue(hctx, rels[i])
			}
		})
	}
	wg.Wait()
}

// handoffBound bounds one pass's hand-off: max(D, grace/2). A release's
// lease runs until its send time + grace, so a hand-off that completes
// within grace/2 still reaches a worker in time to claim; one given up
// earlier costs the job its grace (it waits for the sweep). D alone was too
// tight: a busy Redis or a full pool can take longer than D for one batch.
func (d *Dispatcher) handoffBound() time.Duration {
	return max(d.cfg.Pass.Lead, d.passConfig().Grace/2)
}

// enqueue hands one release to asynq, except a task job for a queue no live
// middleware serves. A task id conflict means the task is already there (a
// pass raced with a retry of this one): fine. Any other failure is repaired
// by the sweep after the job's grace.
func (d *Dispatcher) enqueue(ctx context.Context, r wire.Release) {
	d.metrics.released.WithLabelValues(typeLabel(r.Type)).Inc()
	if r.Type == wire.TypeTask && r.Queue != "" {
		// No middleware serves the queue (it stopped since the enqueue):
		// an asynq task would only wait there, and every sweep of the job
		// would add one more. Leave the job to the sweep instead; when
		// Redis cannot tell, hand it off.
		if live, err := d.live.Live(ctx, r.Queue); err == nil && !live {
			d.metrics.unserved.Inc()
			d.cfg.Logger.Debug("task queue has no live middleware; the sweep returns the job", "job", r.ID, "queue", r.Queue)
			return
		}
	}
	task, opts, err := d.taskFor(r)
	if err == nil {
		_, err = d.cfg.Asynq.EnqueueContext(ctx, task, opts...)
	}
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		d.metrics.enqueueErrors.Inc()
		d.cfg.Logger.Warn("hand released job to asynq", "job", r.ID, "gen", r.Gen, "err", err)
	}
}

package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/wire"
)

// The hand-off (package wire's contract, batch.go): a pass's webhook and
// http releases go to asynq as TaskTypeBatch tasks on the shard's hand-off
// queue, task jobs one task each on the producer's queue.

// batches groups rels (webhook and http releases of one pass) into the
// payloads of batch tasks — a pre-claimed release with its claim
// (wire.Payload.Claimed) —: in send-time order, at most max jobs each, and
// the last job's send time at most span after the first's. rels is sorted
// in place.
func batches(shard int, rels []wire.Release, maxJobs int, span time.Duration) []wire.Batch {
	slices.SortStableFunc(rels, func(a, b wire.Release) int { return a.SendAt.Compare(b.SendAt) })
	var out []wire.Batch
	var first time.Time
	for _, r := range rels {
		p := wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro(), Claimed: r.Claimed}
		if n := len(out); n == 0 || len(out[n-1].Jobs) == maxJobs || r.SendAt.Sub(first) > span {
			out = append(out, wire.Batch{Shard: shard, Jobs: make([]wire.Payload, 0, min(maxJobs, len(rels)))})
			first = r.SendAt
		}
		out[len(out)-1].Jobs = append(out[len(out)-1].Jobs, p)
	}
	return out
}

// batchTaskID is the asynq task id of a batch, "b:<first job>:<its gen>":
// the same batch enqueued twice conflicts, and no two batches share their
// first job's delivery.
func batchTaskID(b wire.Batch) string {
	return "b:" + b.Jobs[0].ID + ":" + strconv.FormatInt(b.Jobs[0].Gen, 10)
}

// timeout is the asynq Timeout of a release's task: wire.TaskTimeout with
// the lateness the tenant's send schedule carries (SendAt − Slot) added to
// the grace.
func (d *Dispatcher) timeout(r wire.Release) time.Duration {
	return wire.TaskTimeout(d.cfg.Pass.Lead, r.Timeout, d.passConfig().Grace+max(r.SendAt.Sub(r.Slot), 0))
}

// batchTask builds the asynq task and options of batch b, whose releases
// are rels (by id): its jobs run side by side in one worker, so its
// timeout is the longest of its jobs' (each covers its wait, one late
// claim, the attempt and the grace).
func (d *Dispatcher) batchTask(b wire.Batch, byID map[string]wire.Release) (*asynq.Task, []asynq.Option) {
	var timeout time.Duration
	for _, p := range b.Jobs {
		timeout = max(timeout, d.timeout(byID[p.ID]))
	}
	return asynq.NewTask(wire.TaskTypeBatch, wire.EncodeBatch(b)), []asynq.Option{
		asynq.TaskID(batchTaskID(b)),
		asynq.MaxRetry(0),
		asynq.Timeout(timeout),
		asynq.Queue(wire.HandoffQueueOf(d.cfg.Prefix, b.Shard)),
	}
}

// taskFor builds the asynq task and options of a task job's release: one
// task on the producer's queue with the protocol in headers and an empty
// payload (the middleware gets the job's payload from the claim). A task
// job without a queue, a task type or with braces in its queue is an
// error: such a job cannot have been admitted by the API.
func (d *Dispatcher) taskFor(r wire.Release) (*asynq.Task, []asynq.Option, error) {
	if r.Queue == "" || r.TaskType == "" || strings.ContainsAny(r.Queue, "{}") {
		return nil, nil, fmt.Errorf("task job %s: queue %q, task type %q: want a queue without braces and a task type", r.ID, r.Queue, r.TaskType)
	}
	p := wire.Payload{ID: r.ID, Gen: r.Gen, SlotUS: r.SendAt.UnixMicro()}
	return asynq.NewTaskWithHeaders(r.TaskType, nil, p.Headers()), []asynq.Option{
		asynq.TaskID(r.TaskID()),
		asynq.MaxRetry(0),
		// The worker first waits for SendAt: the slot plus the lateness
		// the tenant's send schedule carries.
		asynq.Timeout(d.timeout(r)),
		asynq.Queue(r.Queue),
	}, nil
}

// handoff hands shard's released jobs to asynq: webhook and http jobs in
// batches (at most BatchMax jobs within BatchSpan each) on the shard's
// hand-off queue, then one PUBLISH of that queue's name on the hand-off
// channel when a batch went in; task jobs one task each. Up to
// EnqueueParallelism enqueues run at once. It runs to completion even when
// ctx ends, bounded by handoffBound: a job released but not handed off
// waits for the sweep. A release of an unknown type is logged and left to
// the sweep.
func (d *Dispatcher) handoff(ctx context.Context, shard int, rels []wire.Release) {
	if len(rels) == 0 {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.handoffBound())
	defer cancel()
	var sends []wire.Release
	var jobs []func(context.Context) bool
	for _, r := range rels {
		d.metrics.released.WithLabelValues(typeLabel(r.Type)).Inc()
		switch r.Type {
		case wire.TypeWebhook, wire.TypeHTTP:
			sends = append(sends, r)
		case wire.TypeTask:
			jobs = append(jobs, func(ctx context.Context) bool { d.enqueueTask(ctx, r); return false })
		default:
			d.metrics.enqueueErrors.Inc()
			d.cfg.Logger.Warn("released job of unknown type; the sweep returns it", "job", r.ID, "type", r.Type)
		}
	}
	byID := make(map[string]wire.Release, len(sends))
	for _, r := range sends {
		byID[r.ID] = r
	}
	for _, b := range batches(shard, sends, d.cfg.BatchMax, d.cfg.BatchSpan) {
		jobs = append(jobs, func(ctx context.Context) bool { return d.enqueueBatch(ctx, b, byID) })
	}
	if d.run(hctx, jobs) {
		d.announce(hctx, wire.HandoffQueueOf(d.cfg.Prefix, shard))
	}
}

// run runs jobs, up to EnqueueParallelism at once, and reports whether any
// returned true.
func (d *Dispatcher) run(ctx context.Context, jobs []func(context.Context) bool) bool {
	var any atomic.Bool
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(jobs), d.cfg.EnqueueParallelism) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(jobs)); i = next.Add(1) - 1 {
				if jobs[i](ctx) {
					any.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return any.Load()
}

// announce publishes queue's name on the hand-off channel: the workers
// poll a hand-off queue when told a batch may be there. A failed PUBLISH is
// logged; the workers' safety-net poll finds the batch later.
func (d *Dispatcher) announce(ctx context.Context, queue string) {
	if err := d.cfg.Redis.Publish(ctx, wire.HandoffChannel(d.cfg.Prefix), queue).Err(); err != nil {
		d.metrics.enqueueErrors.Inc()
		d.cfg.Logger.Warn("announce hand-off queue", "queue", queue, "err", err)
	}
}

// handoffBound bounds one pass's hand-off: max(D, grace/2). A release's
// lease runs until its send time + grace, so a hand-off that completes
// within grace/2 still reaches a worker in time to claim; one given up
// earlier costs the job its grace (it waits for the sweep). D alone was too
// tight: a busy Redis or a full pool can take longer than D for one batch.
func (d *Dispatcher) handoffBound() time.Duration {
	return max(d.cfg.Pass.Lead, d.passConfig().Grace/2)
}

// enqueueBatch hands one batch to asynq and reports whether it is there. A
// task id conflict means it already is (a pass raced with a retry of this
// one): fine. Any other failure is repaired job by job by the sweep after
// the jobs' grace.
func (d *Dispatcher) enqueueBatch(ctx context.Context, b wire.Batch, byID map[string]wire.Release) bool {
	task, opts := d.batchTask(b, byID)
	_, err := d.cfg.Asynq.EnqueueContext(ctx, task, opts...)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		d.metrics.enqueueErrors.Inc()
		d.cfg.Logger.Warn("hand batch of released jobs to asynq", "shard", b.Shard, "jobs", len(b.Jobs), "first", b.Jobs[0].ID, "err", err)
		return false
	}
	q := wire.HandoffQueueOf(d.cfg.Prefix, b.Shard)
	d.metrics.handoffBatches.WithLabelValues(q).Inc()
	d.metrics.handoffJobs.WithLabelValues(q).Add(float64(len(b.Jobs)))
	return true
}

// enqueueTask hands one task job to asynq, except when no live middleware
// serves its queue. A task id conflict means the task is already there:
// fine. Any other failure is repaired by the sweep after the job's grace.
func (d *Dispatcher) enqueueTask(ctx context.Context, r wire.Release) {
	// No middleware serves the queue (it stopped since the enqueue): an
	// asynq task would only wait there, and every sweep of the job would
	// add one more. Leave the job to the sweep instead; when Redis cannot
	// tell, hand it off.
	if r.Queue != "" {
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
		d.cfg.Logger.Warn("hand released task job to asynq", "job", r.ID, "gen", r.Gen, "err", err)
		return
	}
	d.metrics.handoffBatches.WithLabelValues(taskQueueLabel).Inc()
	d.metrics.handoffJobs.WithLabelValues(taskQueueLabel).Inc()
}

// taskQueueLabel is the queue label of task jobs in the hand-off metrics:
// their queues are the producers', unbounded.
const taskQueueLabel = "task"

// handoffWaiting counts the batch tasks waiting to be fetched in every
// hand-off queue (LLEN of asynq's pending list, one pipeline; on a
// Cluster, go-redis splits it by node). The budget counts them against the
// free capacity.
func (d *Dispatcher) handoffWaiting(ctx context.Context) (int, error) {
	queues := wire.HandoffQueueNames(d.cfg.Prefix)
	cmds := make([]*redis.IntCmd, len(queues))
	_, err := d.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			cmds[i] = p.LLen(ctx, wire.AsynqQueueKey(q, "pending"))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("hand-off tasks waiting: %w", err)
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}

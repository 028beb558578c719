package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisscript"
)

// Task workers (docs/design.md §2.5). The sluicetask middleware, run inside the
// user's own asynq servers, heartbeats every task queue it serves into the
// plain (not shard-tagged) hash <p>:mw:<queue>, field instance id →
// "<concurrency> <expiry µs> <task check interval µs>", with the expiry in
// Redis time. The API refuses task jobs for a queue without a live entry:
// nothing would run them. (Its concurrency counts in the dispatcher's
// back-pressure through Heartbeat, like any worker's.)

// MaxTaskQueueLen bounds a task queue's name in TaskHeartbeat and friends.
const MaxTaskQueueLen = 256

// TaskWorker is one live middleware instance on a task queue.
type TaskWorker struct {
	ID          string
	Concurrency int
	// TaskCheckInterval is the asynq TaskCheckInterval the instance runs
	// with (docs/design.md §1, TCI).
	TaskCheckInterval time.Duration
	Expiry            time.Time // Redis time; the entry is ignored from then on
}

// TaskHeartbeat records that middleware instance runs up to concurrency task
// jobs of queue at once, with asynq TaskCheckInterval tci, until ttl from
// now (Redis time). Call it again well within ttl. A concurrency of 0 keeps
// the entry but makes it not live.
func (f *Roster) TaskHeartbeat(ctx context.Context, queue, instance string, concurrency int, tci, ttl time.Duration) error {
	err := checkTaskWorker(queue, instance)
	switch {
	case err != nil:
	case concurrency < 0 || concurrency > 1_000_000:
		err = invalidf("concurrency %d: want 0 … 1000000", concurrency)
	case tci < 0 || tci > policy.MaxDuration:
		err = invalidf("task check interval %s: want ≥ 0", tci)
	case ttl < time.Millisecond || ttl > policy.MaxDuration:
		err = invalidf("ttl %s: want at least 1ms", ttl)
	}
	if err == nil {
		_, err = f.runKeys(ctx, scriptTaskWorkers, []string{f.keys.taskWorkers(queue)}, f.nowArg(), "beat",
			instance, concurrency, tci.Microseconds(), ttl.Microseconds())
	}
	if err != nil {
		return fmt.Errorf("heartbeat of task worker %q on queue %q: %w", instance, queue, err)
	}
	return nil
}

// TaskWithdraw deletes instance's entry of queue: the queue stops counting
// it as live at once.
func (f *Roster) TaskWithdraw(ctx context.Context, queue, instance string) error {
	err := checkTaskWorker(queue, instance)
	if err == nil {
		_, err = f.runKeys(ctx, scriptTaskWorkers, []string{f.keys.taskWorkers(queue)}, f.nowArg(), "drop", instance)
	}
	if err != nil {
		return fmt.Errorf("withdraw task worker %q from queue %q: %w", instance, queue, err)
	}
	return nil
}

// TaskWorkers lists the live middleware instances of queue: entries not yet
// expired (Redis time) with a concurrency above 0, in no particular order.
// Expired entries are deleted on the way.
func (f *Roster) TaskWorkers(ctx context.Context, queue string) ([]TaskWorker, error) {
	if err := checkTaskQueue(queue); err != nil {
		return nil, fmt.Errorf("task workers of queue %q: %w", queue, err)
	}
	d, err := f.runKeys(ctx, scriptTaskWorkers, []string{f.keys.taskWorkers(queue)}, f.nowArg(), "list")
	if err != nil {
		return nil, fmt.Errorf("task workers of queue %q: %w", queue, err)
	}
	if (d.Len()-1)%4 != 0 {
		d.Fail("%d elements after the status, want groups of 4", d.Len()-1)
	}
	var out []TaskWorker
	for i := 1; i+3 < d.Len(); i += 4 {
		out = append(out, TaskWorker{ID: d.Str(i), Concurrency: int(d.Int(i + 1)),
			TaskCheckInterval: redisscript.Micros(d.Int(i + 2)), Expiry: redisscript.MicrosTime(d.Int(i + 3))})
	}
	if err := d.Err(); err != nil {
		return nil, fmt.Errorf("task workers of queue %q: %w", queue, err)
	}
	return out, nil
}

// TaskQueueLive reports whether queue has at least one live middleware
// instance (see TaskWorkers).
func (f *Roster) TaskQueueLive(ctx context.Context, queue string) (bool, error) {
	ws, err := f.TaskWorkers(ctx, queue)
	return len(ws) > 0, err
}

// checkTaskQueue checks a task queue's name: 1–MaxTaskQueueLen bytes,
// without hash-tag braces (config task_queues has the same rule).
func checkTaskQueue(queue string) error {
	if queue == "" || len(queue) > MaxTaskQueueLen || strings.ContainsAny(queue, "{}") {
		return invalidf("task queue %q: want 1–%d bytes without braces", queue, MaxTaskQueueLen)
	}
	return nil
}

func checkTaskWorker(queue, instance string) error {
	if err := checkTaskQueue(queue); err != nil {
		return err
	}
	if instance == "" || len(instance) > 256 {
		return invalidf("instance id %q: want 1–256 bytes", instance)
	}
	return nil
}

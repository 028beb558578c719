package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/wire"
)

// Archived hand-off tasks. asynq keeps a task whose run failed with
// MaxRetry(0) in its queue's archive — the task hash asynq:{<q>}:t:<id>
// without a TTL — until its own trim (10 000 tasks or 90 days per queue). A
// batch task fails only when its run outlived its asynq Timeout (asynq
// cancels it at the deadline whatever the handler returns), when its worker
// died (asynq's recoverer archives it after its lease), or when its payload
// was malformed. Its jobs are recovered by the sweep either way, so the
// archived task is only a record for inspection: the Dispatcher deletes
// those archived longer than the dead-letter retention ago, as the dead
// letters themselves are.

// archiveTrimEvery is how often the archives of the hand-off queues are
// trimmed; archiveTrimMax bounds the tasks deleted per queue and round.
const (
	archiveTrimEvery = 30 * time.Second
	archiveTrimMax   = 100
)

// trimArchives trims the hand-off queues' archives every archiveTrimEvery
// until ctx is done.
func (d *Dispatcher) trimArchives(ctx context.Context) {
	every(ctx, archiveTrimEvery, func(ctx context.Context) {
		if _, err := d.trimArchived(ctx, time.Now().Add(-d.passConfig().DeadRetention)); err != nil && ctx.Err() == nil {
			d.cfg.Logger.Warn("trim archived hand-off tasks", "err", err)
		}
	})
}

// trimArchived deletes, through asynq (Inspector.DeleteTask: the archive
// entry and the task hash), up to archiveTrimMax tasks per hand-off queue
// archived before cutoff, and returns how many it deleted. A task deleted
// meanwhile by another Dispatcher is not an error.
func (d *Dispatcher) trimArchived(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	var errs []error
	for _, q := range wire.HandoffQueueNames(d.cfg.Prefix) {
		ids, err := d.cfg.Redis.ZRangeByScore(ctx, wire.AsynqQueueKey(q, "archived"), &redis.ZRangeBy{
			Min: "-inf", Max: "(" + strconv.FormatInt(cutoff.Unix(), 10), Count: archiveTrimMax}).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("read archive of %s: %w", q, err))
			continue
		}
		for _, id := range ids {
			if err := d.inspector.DeleteTask(q, id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
				errs = append(errs, fmt.Errorf("delete archived task %s of %s: %w", id, q, err))
				continue
			}
			n++
		}
	}
	if n > 0 {
		d.metrics.archivedTrimmed.Add(float64(n))
	}
	return n, errors.Join(errs...)
}

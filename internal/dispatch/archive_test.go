package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/wire"
)

// TestArchivedHandoffTasksAreTrimmedAfterTheRetention: an archived batch
// task (asynq keeps its hash without a TTL) is deleted — archive entry and
// task hash — once archived before the cutoff; a recent one, a pending one
// and an archived task of another queue stay.
func TestArchivedHandoffTasksAreTrimmedAfterTheRetention(t *testing.T) {
	t.Parallel()
	d, _, rdb, prefix := newRedisDispatcher(t, 1)
	ctx := context.Background()
	client := asynq.NewClientFromRedisClient(rdb)
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	now := time.Now()
	// put enqueues a task on queue; archived, it is archived at (asynq's
	// score: unix seconds).
	put := func(queue, id string, archived time.Time) string {
		if _, err := client.EnqueueContext(ctx, asynq.NewTask(wire.TaskTypeBatch, nil), asynq.Queue(queue), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
		if archived.IsZero() {
			return id
		}
		if err := inspector.ArchiveTask(queue, id); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZAdd(ctx, wire.AsynqQueueKey(queue, "archived"), redis.Z{Score: float64(archived.Unix()), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
		return id
	}
	h0, h5, other := wire.HandoffQueue(prefix, 0), wire.HandoffQueue(prefix, 5), prefix+":user"
	put(h0, "old0", now.Add(-2*time.Hour))
	put(h5, "old5", now.Add(-90*time.Minute))
	put(h0, "recent", now.Add(-time.Minute))
	put(h0, "pending", time.Time{})
	put(other, "elsewhere", now.Add(-2*time.Hour))

	n, err := d.trimArchived(ctx, now.Add(-time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("trimArchived = %d, %v; want the 2 tasks archived over an hour ago", n, err)
	}
	for q, ids := range map[string][]string{h0: {"old0"}, h5: {"old5"}} {
		for _, id := range ids {
			if k := "asynq:{" + q + "}:t:" + id; rdb.Exists(ctx, k).Val() != 0 {
				t.Fatalf("task hash %s still there", k)
			}
		}
	}
	for q, id := range map[string]string{h0: "recent", other: "elsewhere"} {
		if _, err := inspector.GetTaskInfo(q, id); err != nil {
			t.Fatalf("task %s of %s: %v, want it kept", id, q, err)
		}
	}
	if info, err := inspector.GetTaskInfo(h0, "pending"); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("pending task: %+v, %v; want it untouched", info, err)
	}
	if got := testutil.ToFloat64(d.metrics.archivedTrimmed); got != 2 {
		t.Fatalf("archived tasks trimmed counter %v, want 2", got)
	}
	if n, err := d.trimArchived(ctx, now.Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("second trim = %d, %v; want nothing left to trim", n, err)
	}
}

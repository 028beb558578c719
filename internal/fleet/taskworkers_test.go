package fleet

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestTaskWorkerHeartbeats: entries of <p>:mw:<queue> are live until their
// expiry in the store's (Redis) time, carry concurrency and TCI, are
// deleted once expired, and a withdrawal or concurrency 0 ends liveness at
// once. Queues are independent.
func TestTaskWorkerHeartbeats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	live := func(queue string) bool {
		t.Helper()
		ok, err := e.roster.TaskQueueLive(e.ctx, queue)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if live("default") {
		t.Fatal("no heartbeat yet: live")
	}
	beat := func(instance string, conc int, ttl time.Duration) {
		t.Helper()
		if err := e.roster.TaskHeartbeat(e.ctx, "default", instance, conc, 20*time.Millisecond, ttl); err != nil {
			t.Fatal(err)
		}
	}
	beat("a", 10, 5*time.Second)
	beat("b", 3, time.Second)
	ws, err := e.roster.TaskWorkers(e.ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ws, func(x, y TaskWorker) int { return int(x.ID[0]) - int(y.ID[0]) })
	want := []TaskWorker{
		{ID: "a", Concurrency: 10, TaskCheckInterval: 20 * time.Millisecond, Expiry: epoch.Add(5 * time.Second)},
		{ID: "b", Concurrency: 3, TaskCheckInterval: 20 * time.Millisecond, Expiry: epoch.Add(time.Second)},
	}
	same := func(a, b TaskWorker) bool {
		return a.ID == b.ID && a.Concurrency == b.Concurrency && a.TaskCheckInterval == b.TaskCheckInterval && a.Expiry.Equal(b.Expiry)
	}
	if len(ws) != 2 || !same(ws[0], want[0]) || !same(ws[1], want[1]) {
		t.Fatalf("task workers %+v, want %+v", ws, want)
	}
	if !live("default") || live("mail") {
		t.Fatal("want default live, mail not")
	}
	if ttl := e.rdb.PTTL(e.ctx, e.prefix+":mw:default").Val(); ttl < 4*time.Second || ttl > 5*time.Second {
		t.Fatalf("hash TTL %s, want the longest entry's 5s", ttl)
	}

	e.clock.Advance(time.Second) // b's heartbeat ends: not live, deleted on the next list
	if ws, _ := e.roster.TaskWorkers(e.ctx, "default"); len(ws) != 1 || ws[0].ID != "a" {
		t.Fatalf("after b expired: %+v", ws)
	}
	if left := e.rdb.HKeys(e.ctx, e.prefix+":mw:default").Val(); !slices.Equal(left, []string{"a"}) {
		t.Fatalf("hash fields %v, want the expired entry deleted", left)
	}

	beat("a", 0, 5*time.Second) // concurrency 0: kept, not live
	if live("default") {
		t.Fatal("concurrency 0 counted as live")
	}
	beat("a", 4, 5*time.Second)
	if err := e.roster.TaskWithdraw(e.ctx, "default", "a"); err != nil {
		t.Fatal(err)
	}
	if live("default") {
		t.Fatal("withdrawn instance still live")
	}

	for _, err := range []error{
		e.roster.TaskHeartbeat(e.ctx, "{x}", "a", 1, 0, time.Second),
		e.roster.TaskHeartbeat(e.ctx, "", "a", 1, 0, time.Second),
		e.roster.TaskHeartbeat(e.ctx, "default", "", 1, 0, time.Second),
		e.roster.TaskHeartbeat(e.ctx, "default", "a", -1, 0, time.Second),
		e.roster.TaskHeartbeat(e.ctx, "default", "a", 1, -time.Millisecond, time.Second),
		e.roster.TaskHeartbeat(e.ctx, "default", "a", 1, 0, 0),
		e.roster.TaskWithdraw(e.ctx, "default", ""),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("bad argument: %v, want ErrInvalid", err)
		}
	}
	if _, err := e.roster.TaskQueueLive(e.ctx, "a{b}"); !errors.Is(err, ErrInvalid) {
		t.Errorf("queue with braces: %v, want ErrInvalid", err)
	}
}

package dispatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// killSubscription closes the server side of the pub/sub connections of
// the clients named name.
func killSubscription(t *testing.T, rdb redis.UniversalClient, name string) {
	t.Helper()
	ctx := context.Background()
	killed, err := redistest.KillClients(ctx, rdb, name, true)
	if err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatalf("no subscribed connection named %q", name)
	}
}

// When the wake subscription is lost and go-redis restores it, wake-ups
// published meanwhile are lost: every shard passes at once (fake time does
// not move, so nothing else could cause those passes).
func TestResubscriptionWakesEveryShard(t *testing.T) {
	t.Parallel()
	st := newFakeStore(3)
	cfg, fc := fakeClockConfig(t, st)
	o := redistest.Options()
	o.ClientName = cfg.Prefix
	rdb := redistest.NewClient(t, o)
	cfg.Redis = rdb
	t0 := fc.Now()
	d := start(t, cfg)
	asleepUntil(t, fc, t0.Add(cfg.MaxSleep))
	eventually(t, time.Second, "every shard passed", allPassed(st))
	redistest.Hold(t, 100*time.Millisecond, "one pass a shard while asleep", func() bool { return len(st.passes()) == 3 })

	killSubscription(t, rdb, cfg.Prefix)
	eventually(t, 10*time.Second, "every shard passed again after the resubscription", func() bool {
		return st.count(0) == 2 && st.count(1) == 2 && st.count(2) == 2
	})
	redistest.Hold(t, 100*time.Millisecond, "once", func() bool { return len(st.passes()) == 6 })
	for s := range 3 {
		passedAt(t, st, s, t0, 0, 0)
	}
	if n := testutil.ToFloat64(d.metrics.resubscribed); n != 1 {
		t.Fatalf("resubscriptions %v, want 1", n)
	}
}

// recordingAsynq records when each batch arrived, by job id.
type recordingAsynq struct {
	mu  sync.Mutex
	at  map[string]time.Time
	job map[string]wire.Payload
}

func (r *recordingAsynq) EnqueueContext(_ context.Context, t *asynq.Task, _ ...asynq.Option) (*asynq.TaskInfo, error) {
	b, err := wire.DecodeBatch(t.Payload())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range b.Jobs {
		r.at[p.ID], r.job[p.ID] = time.Now(), p
	}
	return &asynq.TaskInfo{}, nil
}

func (r *recordingAsynq) handedOff(id string) (time.Time, wire.Payload, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[id]
	return at, r.job[id], ok
}

// An idle dispatcher (every loop asleep for MaxSleep, an hour here) still
// hands a new job off at once and a delayed one ahead of its send time:
// the enqueue's PUBLISH wakes the shard's loop at the job's time − D.
func TestIdleLoopsHandNewAndDelayedJobsOffInTime(t *testing.T) {
	t.Parallel()
	rdb, prefix, st := realStore(t, 4, 100)
	ctx := context.Background()
	rec := &recordingAsynq{at: map[string]time.Time{}, job: map[string]wire.Payload{}}
	d := start(t, Config{Store: st, Asynq: rec, Redis: rdb, Prefix: prefix, MaxSleep: time.Hour,
		Registerer: prometheus.NewRegistry()})
	eventually(t, 5*time.Second, "every shard passed", func() bool { return testutil.ToFloat64(d.metrics.passes) >= 4 })
	passes := testutil.ToFloat64(d.metrics.passes)

	const delay = 400 * time.Millisecond
	before := time.Now()
	res, err := st.Enqueue(ctx, "acme", []store.Item{{Type: wire.TypeWebhook, Body: []byte(`{}`)}, {Type: wire.TypeWebhook, Body: []byte(`{}`), Delay: delay}})
	if err != nil {
		t.Fatal(err)
	}
	enqueued := time.Now()
	now, delayed := res[0].ID, res[1].ID
	eventually(t, 5*time.Second, "both jobs handed off", func() bool {
		_, _, a := rec.handedOff(now)
		_, _, b := rec.handedOff(delayed)
		return a && b
	})
	at, _, _ := rec.handedOff(now)
	if took := at.Sub(enqueued); took > d.cfg.Pass.Lead {
		t.Errorf("a new job was handed off %s after its enqueue, want within D = %s", took, d.cfg.Pass.Lead)
	}
	at, p, _ := rec.handedOff(delayed)
	// Its due time is between before + delay and enqueued + delay (Redis
	// and this process share the clock); the pass that promotes it runs
	// then and releases it at once.
	if late := at.Sub(enqueued.Add(delay)); late > 50*time.Millisecond {
		t.Errorf("the delayed job was handed off %s after its due time, want at most 50ms", late)
	}
	if p.Slot().Before(before.Add(delay)) {
		t.Errorf("the delayed job's send time is %s before its due time", before.Add(delay).Sub(p.Slot()))
	}
	if n := testutil.ToFloat64(d.metrics.passes) - passes; n > 6 {
		t.Errorf("%v passes for two jobs, want a few (woken, not polling)", n)
	}
}

package sluicetask_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/sluicetask"
)

// tci is the asynq TaskCheckInterval of the tests' servers.
const tci = 20 * time.Millisecond

// env is one test's Sluice on a private prefix: a Store with 4 shards (and
// <prefix>:meta saying so), and an asynq queue of its own.
type env struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	queue  string
	st     *store.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rdb, prefix := redistest.New(t)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := store.EnsureMeta(ctx, rdb, wire.Meta{Prefix: prefix, Shards: 4,
		Lead: store.LeadDefault, MinLead: store.MinLeadDefault}); err != nil {
		t.Fatal(err)
	}
	// asynq's keys are not under Sluice's prefix: each test gets its own queue.
	return &env{t: t, ctx: ctx, rdb: rdb, prefix: prefix, queue: prefix + "-tasks", st: st}
}

// policy stores tenant's overrides.
func (e *env) policy(tenant string, o store.Overrides) {
	e.t.Helper()
	if _, err := e.st.PutTenantPolicy(e.ctx, tenant, o, store.AnyVersion); err != nil {
		e.t.Fatal(err)
	}
}

// enqueue stores one task job of type "email:send" on the env's queue for
// each payload, in order, and returns their ids.
func (e *env) enqueue(tenant string, payloads ...string) []string {
	e.t.Helper()
	items := make([]store.Item, len(payloads))
	for i, p := range payloads {
		spec := job.Spec{Type: wire.TypeTask, TaskType: "email:send", Queue: e.queue, Payload: json.RawMessage(p)}
		items[i] = store.Item{Type: wire.TypeTask, Body: spec.Canonical()}
	}
	rs, err := e.st.Enqueue(e.ctx, tenant, items)
	if err != nil {
		e.t.Fatal(err)
	}
	ids := make([]string, len(rs))
	for i, r := range rs {
		if r.Outcome != store.Accepted {
			e.t.Fatalf("enqueue for %s: %+v", tenant, r)
		}
		ids[i] = r.ID
	}
	return ids
}

func (e *env) jobOf(id string) store.Job {
	e.t.Helper()
	j, err := e.st.GetJob(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// waitState polls until job id is in state.
func (e *env) waitState(id string, state store.State, within time.Duration) store.Job {
	e.t.Helper()
	var j store.Job
	redistest.PollMsg(e.t, within, func() (bool, string) {
		j = e.jobOf(id)
		return j.State == state, fmt.Sprintf("job %s is %s (attempt %d), want %s", id, j.State, j.Attempt, state)
	})
	return j
}

// startDispatcher runs a Dispatcher on the env's store until the test ends.
// Its grace is 3 s, so a slow test machine does not make the sweep recover
// jobs.
func (e *env) startDispatcher() {
	e.t.Helper()
	d, err := dispatch.New(dispatch.Config{Store: e.st, Asynq: asynq.NewClientFromRedisClient(e.rdb), Redis: e.rdb,
		Prefix: e.prefix, Pass: store.PassConfig{Grace: 3 * time.Second}, Logger: testLogger(e.t).With("component", "dispatcher")})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := d.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Stop)
}

// newMiddleware builds a Middleware serving the env's queue; edit, when
// not nil, changes its Config first.
func (e *env) newMiddleware(concurrency int, edit func(*sluicetask.Config)) *sluicetask.Middleware {
	e.t.Helper()
	cfg := sluicetask.Config{Redis: e.rdb, Prefix: e.prefix, Queues: []string{e.queue}, Concurrency: concurrency,
		TaskCheckInterval: tci, Registerer: prometheus.NewRegistry(), Logger: testLogger(e.t)}
	if edit != nil {
		edit(&cfg)
	}
	m, err := sluicetask.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// startServer starts a middleware and a real asynq server on the env's
// queue whose mux runs handler for "email:send" through m.Wrap; both stop
// when the test ends (the server first).
func (e *env) startServer(concurrency int, handler asynq.HandlerFunc) *sluicetask.Middleware {
	e.t.Helper()
	m := e.newMiddleware(concurrency, nil)
	if err := m.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	srv := asynq.NewServerFromRedisClient(e.rdb, asynq.Config{
		Concurrency: concurrency, TaskCheckInterval: tci, Queues: map[string]int{e.queue: 1},
		ShutdownTimeout: 2 * time.Second, Logger: quietLogger{}, LogLevel: asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(m.Wrap)
	mux.Handle("email:send", handler)
	if err := srv.Start(mux); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		srv.Shutdown()
		m.Stop()
	})
	return m
}

// call is one run of a handler.
type call struct {
	taskType string
	payload  string
	headers  map[string]string
	job      sluicetask.Job
	isJob    bool
	start    time.Time
}

// recorder records the calls of a handler and how many run at once, per
// tenant; behave decides each call's result (nil: success).
type recorder struct {
	behave func(ctx context.Context, c call, n int) error // n: this job's calls so far, this one included

	mu      sync.Mutex
	calls   []call
	running map[string]int
	maxRun  map[string]int
}

func newRecorder(behave func(ctx context.Context, c call, n int) error) *recorder {
	return &recorder{behave: behave, running: map[string]int{}, maxRun: map[string]int{}}
}

func (r *recorder) ProcessTask(ctx context.Context, t *asynq.Task) error {
	c := call{taskType: t.Type(), payload: string(t.Payload()), headers: maps.Clone(t.Headers()), start: time.Now()}
	c.job, c.isJob = sluicetask.JobFromContext(ctx)
	r.mu.Lock()
	r.calls = append(r.calls, c)
	n := 0
	for _, o := range r.calls {
		if o.isJob && o.job.ID == c.job.ID {
			n++
		}
	}
	r.running[c.job.Tenant]++
	r.maxRun[c.job.Tenant] = max(r.maxRun[c.job.Tenant], r.running[c.job.Tenant])
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running[c.job.Tenant]--
		r.mu.Unlock()
	}()
	if r.behave == nil {
		return nil
	}
	return r.behave(ctx, c, n)
}

// callsOf returns the calls of job id, in order.
func (r *recorder) callsOf(id string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.isJob && c.job.ID == id {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) all() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recorder) maxRunning(tenant string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxRun[tenant]
}

// hold waits d or until ctx ends: a handler doing work.
func hold(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// quietLogger discards asynq's logs.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// testLogger writes debug logs and above to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func p64(v int64) *int64 { return &v }

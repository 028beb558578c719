package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/deliverytest"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// arrival is one request the receiver saw.
type arrival struct {
	id     string    // webhook-id: the job id
	tenant string    // the URL's last path segment
	at     time.Time // local, monotonic
	redis  time.Time // the same instant on the estimate of Redis's clock
}

// receiver is a real HTTP endpoint on loopback that records every request.
// behave, when set, answers for a tenant (status, and a delay honouring
// the request's context); the default is 204 at once.
type receiver struct {
	srv    *httptest.Server
	clock  *worker.Clock
	behave func(tenant string) (status int, delay time.Duration)

	mu       sync.Mutex
	got      []arrival
	inFlight map[string]int
	maxIn    map[string]int
	notify   chan struct{}
}

func newReceiver(t *testing.T, clock *worker.Clock) *receiver {
	r := &receiver{clock: clock, inFlight: map[string]int{}, maxIn: map[string]int{}, notify: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	at, redisAt := time.Now(), r.clock.Now()
	_, _ = io.Copy(io.Discard, req.Body)
	tenant := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
	r.mu.Lock()
	r.got = append(r.got, arrival{id: req.Header.Get("webhook-id"), tenant: tenant, at: at, redis: redisAt})
	r.inFlight[tenant]++
	r.maxIn[tenant] = max(r.maxIn[tenant], r.inFlight[tenant])
	behave := r.behave
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	status, delay := http.StatusNoContent, time.Duration(0)
	if behave != nil {
		status, delay = behave(tenant)
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-req.Context().Done():
		}
	}
	r.mu.Lock()
	r.inFlight[tenant]--
	r.mu.Unlock()
	w.WriteHeader(status)
}

// arrivals returns the requests of tenant ("" = all) so far, in order.
func (r *receiver) arrivals(tenant string) []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []arrival
	for _, a := range r.got {
		if tenant == "" || a.tenant == tenant {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

func (r *receiver) maxConcurrent(tenant string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxIn[tenant]
}

// waitFor blocks until tenant has n arrivals or within passes.
func (r *receiver) waitFor(t *testing.T, tenant string, n int, within time.Duration) []arrival {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		if got := r.arrivals(tenant); len(got) >= n {
			return got
		}
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("tenant %q: %d of %d requests within %s", tenant, len(r.arrivals(tenant)), n, within)
		}
	}
}

// harness is one test's Sluice: a Store on a private prefix, a receiver,
// and whatever dispatchers and workers the test starts.
type harness struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	prefix string
	reg    *prometheus.Registry // every dispatcher's and worker's metrics
	st     *store.Store
	clock  *worker.Clock
	recv   *receiver

	instances atomic.Int64
}

// counter sums the counters and gauges named name whose labels include
// every given "label=value".
func (h *harness) counter(name string, labels ...string) float64 {
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, want := range labels {
				k, v, _ := strings.Cut(want, "=")
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// histogram sums the observations of the histograms named name: their
// count and the sum of their values.
func (h *harness) histogram(name string) (count uint64, sum float64) {
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			count += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return count, sum
}

// noStall fails when a job needed the sweep (its task was lost or never
// claimed) or a hand-off to asynq failed: the causes of real stalls, as
// opposed to claims that missed ε on a loaded machine.
func (h *harness) noStall(t *testing.T) {
	t.Helper()
	if n := h.counter("sluice_dispatch_swept_total"); n != 0 {
		t.Errorf("%v leases swept", n)
	}
	h.noFailedCalls(t)
}

// noFailedCalls fails when a hand-off to asynq or a finish failed.
func (h *harness) noFailedCalls(t *testing.T) {
	t.Helper()
	if n := h.counter("sluice_dispatch_enqueue_errors_total"); n != 0 {
		t.Errorf("%v hand-offs to asynq failed", n)
	}
	if n := h.counter("sluice_worker_finish_errors_total"); n != 0 {
		t.Errorf("%v finishes failed", n)
	}
}

// metrics returns the gathered series whose names start with prefix, as text.
func (h *harness) metrics(prefix string) string {
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), prefix) {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Fprintf(&b, "%s%v", mf.GetName(), m.GetLabel())
			switch {
			case m.Counter != nil:
				fmt.Fprintf(&b, " %v\n", m.Counter.GetValue())
			case m.Gauge != nil:
				fmt.Fprintf(&b, " %v\n", m.Gauge.GetValue())
			default:
				fmt.Fprintf(&b, " %v\n", m.Histogram.GetSampleCount())
			}
		}
	}
	return b.String()
}

func newHarness(t *testing.T, shards int) *harness {
	t.Helper()
	rdb, prefix := redistest.New(t)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clock := worker.NewClock(rdb, 0)
	if err := clock.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: ctx, rdb: rdb, prefix: prefix, st: st, clock: clock, reg: prometheus.NewRegistry()}
	h.recv = newReceiver(t, clock)
	return h
}

// startedWorker is a started Worker of concurrency 1 on h's store, for
// Serve (the caller stops it).
func (h *harness) startedWorker() *worker.Worker {
	h.t.Helper()
	w, err := worker.New(worker.Config{Store: h.st, Redis: h.rdb, Executor: &worker.WebhookExecutor{}, Prefix: h.prefix,
		Concurrency: 1, Registerer: prometheus.NewRegistry(), Logger: testLogger(h.t)})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	return w
}

func ptr(v int64) *int64 { return &v }

// jobOf reads job id's record.
func (h *harness) jobOf(id string) store.Job {
	h.t.Helper()
	j, err := h.st.GetJob(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return j
}

// policy stores tenant's overrides.
func (h *harness) policy(tenant string, o store.Overrides) {
	h.t.Helper()
	if _, err := h.st.PutTenantPolicy(h.ctx, tenant, o, 0); err != nil {
		h.t.Fatal(err)
	}
}

// enqueue adds n webhook jobs for tenant, posting to the receiver's
// /<tenant>, and returns their ids. Batches hold at most 250 jobs: a batch
// script blocks the Redis every parallel test shares (1 000 jobs ≈ 40 ms).
func (h *harness) enqueue(tenant string, n int) []string {
	h.t.Helper()
	spec := job.Spec{Type: wire.TypeWebhook, URL: h.recv.srv.URL + "/hooks/" + tenant, Event: "test.event", Payload: json.RawMessage(`{"n":1}`)}
	body := spec.Canonical()
	var ids []string
	for n > 0 {
		items := make([]store.Item, min(n, 250))
		for i := range items {
			items[i] = store.Item{Type: wire.TypeWebhook, Body: body}
		}
		rs, err := h.st.Enqueue(h.ctx, tenant, items)
		if err != nil {
			h.t.Fatal(err)
		}
		for _, r := range rs {
			if r.Outcome != store.Accepted {
				h.t.Fatalf("enqueue for %s: %+v", tenant, r)
			}
			ids = append(ids, r.ID)
		}
		n -= len(items)
	}
	return ids
}

// startDispatcher starts a Dispatcher on the harness's store; edit, when not
// nil, changes its Config first. Its grace is 3 s: a starved test machine
// must not make the sweep recover jobs (noStall counts sweeps as stalls).
func (h *harness) startDispatcher(edit func(*dispatch.Config)) *dispatch.Dispatcher {
	h.t.Helper()
	client := asynq.NewClientFromRedisClient(h.rdb)
	cfg := dispatch.Config{Store: h.st, Asynq: client, Redis: h.rdb, Prefix: h.prefix,
		Pass:       store.PassConfig{Grace: 3 * time.Second},
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"instance": fmt.Sprint(h.instances.Add(1))}, h.reg),
		Logger:     testLogger(h.t).With("component", "dispatcher"),
	}
	if edit != nil {
		edit(&cfg)
	}
	d, err := dispatch.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := d.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(d.Stop)
	return d
}

// startWorker starts a Worker with exec (nil: the webhook executor) behind
// a real asynq server; both are stopped when the test ends. edit, when not
// nil, changes the Worker's Config first.
func (h *harness) startWorker(concurrency int, exec worker.Executor, edit ...func(*worker.Config)) *worker.Worker {
	h.t.Helper()
	if exec == nil {
		exec = &worker.WebhookExecutor{Client: loopbackClient(h.t)}
	}
	cfg := worker.Config{
		Store: h.st, Redis: h.rdb, Executor: exec, Prefix: h.prefix, Concurrency: concurrency,
		Settings:   wire.Settings{Grace: 3 * time.Second}, // startDispatcher's: no release dropped as lapsed before its sweep
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"instance": fmt.Sprint(h.instances.Add(1))}, h.reg),
		Logger:     testLogger(h.t),
	}
	for _, e := range edit {
		e(&cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := w.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	srv := asynq.NewServerFromRedisClient(h.rdb, asynq.Config{
		Concurrency: concurrency, TaskCheckInterval: worker.TaskCheckIntervalDefault,
		Queues: w.Queues(), ShutdownTimeout: 2 * time.Second, Logger: quietLogger{}, LogLevel: asynq.FatalLevel,
	})
	if err := srv.Start(w); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		srv.Shutdown()
		w.Stop()
	})
	return w
}

// quietLogger discards asynq's logs.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// checkRate fails unless every window of the arrivals holds at most
// b + r·(Δ + 2ε_r) + 1 tokens (each job costs 1), Δ the window's length and
// ε_r the measured p99 send error (docs/design.md §5). It logs the worst excess
// over the stricter b + r·Δ + 1.
func checkRate(t *testing.T, got []arrival, rate float64, burst int, epsR time.Duration) {
	t.Helper()
	at := make([]time.Time, len(got))
	for i, a := range got {
		at[i] = a.at
	}
	worst, from, _ := deliverytest.WorstWindow(at, rate, burst)
	worstAt := ""
	if len(got) > 0 {
		worstAt = got[from].at.Format(time.StampMicro)
	}
	t.Logf("rate %.0f/s, burst %d: worst window %+.3f tokens against b + r·Δ + 1 (from %s); ε_r = %s",
		rate, burst, worst, worstAt, epsR)
	if worst > rate*2*epsR.Seconds() {
		t.Fatalf("a window from %s holds %.3f tokens more than b + r·Δ + 1, beyond 2·r·ε_r = %.3f",
			worstAt, worst, rate*2*epsR.Seconds())
	}
}

// sendError is the p99 of |arrival − slot| over the arrivals, each job's
// slot read from its record (the slot it was last released at), arrival on
// the receiver's estimate of Redis's clock: the ε_r of docs/design.md §5.
func (h *harness) sendError(got []arrival) time.Duration {
	h.t.Helper()
	var errs []time.Duration
	for _, a := range got {
		errs = append(errs, a.redis.Sub(h.jobOf(a.id).Slot))
	}
	return deliverytest.P99(errs)
}

// sendBound is the largest send error the single-job tests accept: a few ms
// without -race; the race detector slows every goroutine several-fold.
func sendBound() time.Duration {
	if raceEnabled {
		return 40 * time.Millisecond
	}
	return 10 * time.Millisecond
}

// exactlyOnce fails unless ids arrived once each and nothing else arrived.
func exactlyOnce(t *testing.T, got []arrival, ids []string) {
	t.Helper()
	arrived := make([]string, len(got))
	for i, a := range got {
		arrived[i] = a.id
	}
	deliverytest.ExactlyOnce(t, arrived, ids)
}

// testLogger writes the worker's debug logs and above to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

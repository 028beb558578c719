package worker_test

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// cbSecret signs the callbacks of these tests.
const cbSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// loopbackClient is an egress-guarded client that may reach loopback.
func loopbackClient(t *testing.T) *http.Client {
	c := webhook.NewClient(webhook.ClientConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// startCallbacks runs a callback sender signing with cbSecret on client
// (nil: loopbackClient); edit changes its config first. Its safety-net poll
// is a minute, longer than any test: what it sends, it found through the
// shards' announcements and the due times the store reports.
func (h *harness) startCallbacks(client *http.Client, edit ...func(*worker.CallbacksConfig)) {
	h.t.Helper()
	key, err := policy.ParseWebhookSecret(cbSecret)
	if err != nil {
		h.t.Fatal(err)
	}
	if client == nil {
		client = loopbackClient(h.t)
	}
	cfg := worker.CallbacksConfig{Store: h.st, Client: client, Poll: time.Minute, Redis: h.rdb, Prefix: h.prefix,
		Signing:    &worker.SigningKeys{File: func(string) [][]byte { return [][]byte{key} }},
		Registerer: h.reg, Logger: testLogger(h.t)}
	for _, e := range edit {
		e(&cfg)
	}
	cb, err := worker.NewCallbacks(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cb.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(cb.Stop)
}

// enqueueSpec enqueues spec for tenant with its callback, and returns the id.
func (h *harness) enqueueSpec(tenant string, spec job.Spec, delay time.Duration) string {
	h.t.Helper()
	a, err := spec.Check(job.Rules{MaxCost: 1})
	if err != nil {
		h.t.Fatal(err)
	}
	rs, err := h.st.Enqueue(h.ctx, tenant, []store.Item{{Type: a.Type, Body: spec.Canonical(), Callback: a.Callback, Delay: delay}})
	if err != nil || rs[0].Outcome != store.Accepted {
		h.t.Fatalf("enqueue: %v %+v", err, rs)
	}
	return rs[0].ID
}

// pendingCallbacks sums the callback sets of every shard.
func (h *harness) pendingCallbacks() int64 {
	h.t.Helper()
	var n int64
	for shard := range h.st.Shards() {
		c, err := h.st.PendingCallbacks(h.ctx, shard)
		if err != nil {
			h.t.Fatal(err)
		}
		n += c
	}
	return n
}

// callbackEvent is a callback body.
type callbackEvent struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      map[string]any  `json:"data"`
	Raw       json.RawMessage `json:"-"`
}

// verified decodes call's body after checking its signature with cbSecret.
func verified(t *testing.T, call hookCall) callbackEvent {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(cbSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(call.body, call.header); err != nil {
		t.Fatalf("callback %s: signature does not verify: %v", call.id, err)
	}
	var ev callbackEvent
	if err := json.Unmarshal(call.body, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestCallbacksOncePerTerminalState: a succeeded http job, a dead webhook
// job and a canceled job each get one signed callback carrying the job as
// GET shows it (the http job's result included); nothing is left pending.
func TestCallbacksOncePerTerminalState(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	ok := newHookServer(t, func(int) (int, http.Header) {
		return http.StatusOK, http.Header{"Content-Type": {"application/json"}, "X-Secret-Thing": {"no"}}
	})
	gone := newHookServer(t, answer("", http.StatusNotFound))
	cbs := newHookServer(t, answer(""))
	cb := &job.Callback{URL: cbs.srv.URL + "/done"}
	const tenant = "cb-once"
	okID := h.enqueueSpec(tenant, job.Spec{Type: wire.TypeHTTP, Method: "GET", URL: ok.srv.URL + "/x", Callback: cb}, 0)
	deadID := h.enqueueSpec(tenant, job.Spec{Type: wire.TypeWebhook, Event: "e", URL: gone.srv.URL, Callback: cb}, 0)
	canceledID := h.enqueueSpec(tenant, job.Spec{Type: wire.TypeWebhook, Event: "e", URL: ok.srv.URL, Callback: cb}, time.Hour)
	if _, _, err := h.st.Cancel(h.ctx, canceledID); err != nil {
		t.Fatal(err)
	}
	h.startDispatcher(nil)
	h.startWorker(4, &worker.WebhookExecutor{Client: loopbackClient(t), Results: &worker.ResultSettings{Store: h.st}})
	h.startCallbacks(nil)

	calls := cbs.waitCalls(t, 3, 20*time.Second)
	redistest.Poll(t, 10*time.Second, "no callback pending", func() bool { return h.pendingCallbacks() == 0 })
	if got := cbs.snapshot(); len(got) != 3 {
		t.Fatalf("%d callbacks for 3 terminal jobs", len(got))
	}
	want := map[string]string{okID: "job.succeeded", deadID: "job.dead", canceledID: "job.canceled"}
	for _, c := range calls {
		ev := verified(t, c)
		id, _ := ev.Data["id"].(string)
		if want[id] != ev.Type || ev.Data["state"] != strings.TrimPrefix(ev.Type, "job.") || ev.Timestamp == "" {
			t.Errorf("callback %s: type %q for job %q (data state %v)", c.id, ev.Type, id, ev.Data["state"])
		}
		if !strings.HasPrefix(c.id, "cb_"+id+"_") {
			t.Errorf("webhook-id %q, want cb_%s_<ended>", c.id, id)
		}
		delete(want, id)
		if id != okID {
			continue
		}
		res, _ := ev.Data["result"].(map[string]any)
		hdrs, _ := res["headers"].(map[string]any)
		if res["status"] != float64(200) || hdrs["Content-Type"] != "application/json" || hdrs["X-Secret-Thing"] != nil {
			t.Errorf("succeeded http job's result in the callback: %v", res)
		}
	}
	if len(want) != 0 {
		t.Fatalf("no callback for %v", want)
	}
}

// TestCallbackRetriedAfter500: a 500 from the callback receiver is retried
// (after the tenant's min_backoff) with the same webhook-id until a 2xx.
func TestCallbackRetriedAfter500(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	const tenant = "cb-retry"
	h.policy(tenant, store.Overrides{MinBackoffUS: ptr(50_000)})
	ok := newHookServer(t, answer(""))
	cbs := newHookServer(t, answer("", http.StatusInternalServerError, http.StatusBadGateway))
	id := h.enqueueSpec(tenant, job.Spec{Type: wire.TypeWebhook, Event: "e", URL: ok.srv.URL,
		Callback: &job.Callback{URL: cbs.srv.URL}}, 0)
	h.startDispatcher(nil)
	h.startWorker(2, &worker.WebhookExecutor{Client: loopbackClient(t)})
	h.startCallbacks(nil)

	calls := cbs.waitCalls(t, 3, 20*time.Second)
	redistest.Poll(t, 10*time.Second, "no callback pending", func() bool { return h.pendingCallbacks() == 0 })
	if got := cbs.snapshot(); len(got) != 3 || got[0].status != 500 || got[1].status != 502 || got[2].status != 200 {
		t.Fatalf("callback sends %d, want 500, 502, 200", len(got))
	}
	for _, c := range calls {
		if c.id != calls[0].id || verified(t, c).Data["id"] != id {
			t.Fatalf("webhook-id %q, first %q: want one stable id", c.id, calls[0].id)
		}
	}
	if n := h.counter("sluice_worker_callbacks_total", "outcome=retry"); n != 2 {
		t.Errorf("retries counted %v, want 2", n)
	}
}

// TestCallbackEgressRefusedAtDial: a callback to a host name that resolves
// to loopback, with a client that does not allow loopback, is refused when
// dialled: dropped at once, counted, never received.
func TestCallbackEgressRefusedAtDial(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	ok := newHookServer(t, answer(""))
	cbs := newHookServer(t, answer(""))
	port := cbs.srv.URL[strings.LastIndex(cbs.srv.URL, ":"):]
	id := h.enqueueSpec("cb-egress", job.Spec{Type: wire.TypeWebhook, Event: "e", URL: ok.srv.URL,
		Callback: &job.Callback{URL: "http://localhost" + port + "/cb"}}, 0)
	h.startDispatcher(nil)
	h.startWorker(2, &worker.WebhookExecutor{Client: loopbackClient(t)})
	h.startCallbacks(webhook.NewClient(webhook.ClientConfig{})) // the default guard: no loopback

	redistest.Poll(t, 20*time.Second, "callback dropped", func() bool {
		return h.counter("sluice_worker_callbacks_total", "outcome=dropped") == 1
	})
	if n := h.pendingCallbacks(); n != 0 || len(cbs.snapshot()) != 0 {
		t.Fatalf("pending %d, received %d: want the callback dropped unsent", n, len(cbs.snapshot()))
	}
	if j := h.jobOf(id); j.State != store.StateSucceeded || j.CallbackFailures != 1 {
		t.Fatalf("job %s, callback failures %d", j.State, j.CallbackFailures)
	}
}

// TestCallbackSurvivesSenderKill: a callback taken by a sender that died
// (its lease held, never reported) is sent by another once the lease ends.
func TestCallbackSurvivesSenderKill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	ok := newHookServer(t, answer(""))
	cbs := newHookServer(t, answer(""))
	id := h.enqueueSpec("cb-kill", job.Spec{Type: wire.TypeWebhook, Event: "e", URL: ok.srv.URL,
		Callback: &job.Callback{URL: cbs.srv.URL}}, 0)
	h.startDispatcher(nil)
	h.startWorker(2, &worker.WebhookExecutor{Client: loopbackClient(t)})
	redistest.Poll(t, 20*time.Second, "job succeeded", func() bool { return h.jobOf(id).State == store.StateSucceeded })
	taken, _, err := h.st.TakeCallbacks(h.ctx, 0, 10, 300*time.Millisecond) // the sender that is then killed
	if err != nil || !slices.Equal(taken, []string{id}) {
		t.Fatalf("take: %v %v", taken, err)
	}
	h.startCallbacks(nil)
	calls := cbs.waitCalls(t, 1, 20*time.Second)
	if ev := verified(t, calls[0]); ev.Data["id"] != id || ev.Type != "job.succeeded" {
		t.Fatalf("callback %+v", ev)
	}
	redistest.Poll(t, 10*time.Second, "no callback pending", func() bool { return h.pendingCallbacks() == 0 })
}

// TestCallbacksOutsideTenantRate: a tenant at 1/s with 5 jobs with
// callbacks: the jobs keep their 1 s spacing, and each job's callback
// arrives before the job after next is sent — callbacks are not spaced by
// the tenant's rate (they would trail the jobs by seconds if they were).
func TestCallbacksOutsideTenantRate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	const tenant = "cb-rate"
	h.policy(tenant, store.Overrides{RateUS: ptr(1_000_000), Burst: ptr(1)})
	jobs := newHookServer(t, answer(""))
	cbs := newHookServer(t, answer(""))
	var ids []string
	for range 5 {
		ids = append(ids, h.enqueueSpec(tenant, job.Spec{Type: wire.TypeWebhook, Event: "e", URL: jobs.srv.URL,
			Callback: &job.Callback{URL: cbs.srv.URL}}, 0))
	}
	h.startDispatcher(nil)
	h.startWorker(2, &worker.WebhookExecutor{Client: loopbackClient(t)})
	h.startCallbacks(nil)

	sent := jobs.waitCalls(t, 5, 30*time.Second)
	calls := cbs.waitCalls(t, 5, 10*time.Second)
	jobAt := map[string]time.Time{}
	for _, c := range sent {
		jobAt[c.id] = c.at
	}
	cbAt := map[string]time.Time{}
	for _, c := range calls {
		id, _ := verified(t, c).Data["id"].(string)
		cbAt[id] = c.at
	}
	for i, id := range ids {
		if i > 0 && jobAt[id].Sub(jobAt[ids[i-1]]) < 900*time.Millisecond {
			t.Errorf("job %d sent %s after the one before: the tenant's 1/s not kept", i, jobAt[id].Sub(jobAt[ids[i-1]]))
		}
		if cbAt[id].IsZero() || cbAt[id].Before(jobAt[id]) {
			t.Fatalf("job %d: callback at %v, job at %v", i, cbAt[id], jobAt[id])
		}
		if i+2 < len(ids) && !cbAt[id].Before(jobAt[ids[i+2]]) {
			t.Errorf("job %d's callback arrived after job %d was sent: spaced like the tenant's jobs", i, i+2)
		}
	}
	if st, err := h.st.TenantState(h.ctx, tenant); err != nil || st.Running+st.Released+st.Queued != 0 {
		t.Fatalf("tenant state %+v %v", st, err)
	}
}

package worker_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// seedUpstream writes upstream name's hash as the upstream registry does
// (cfg, p) with its schedule TAT_U at tat µs.
func (h *harness) seedUpstream(name, costHeader string, intervalUS, tat int64) {
	h.t.Helper()
	cfg := `{"rate":"1000/s","burst":1,"cost_header":"` + costHeader + `"}`
	p := `{"iv":` + strconv.FormatInt(intervalUS, 10) + `,"b":1,"c":0,"a":0,"s":0}`
	if err := h.rdb.HSet(h.ctx, h.st.UpstreamKey(name), "cfg", cfg, "p", p, "v", 1, "tat", tat).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// namesUpstreams sets job id's upstreams (record field ups, which enqueue
// writes from the job's "upstreams").
func (h *harness) namesUpstreams(id, ups string) {
	h.t.Helper()
	key, err := h.st.JobKey(id)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.rdb.HSet(h.ctx, key, "ups", ups).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// TestCostHeaderCorrectsTenantAndUpstream: an http job naming an upstream
// whose cost_header is X-Usage-Tokens, answered with "X-Usage-Tokens: 7",
// reserved 1 and is charged 6 more on its tenant's schedule (TAT = slot +
// 7T) and on the upstream's (TAT_U + 6·T_U); a job answered with a value
// that is not an integer keeps its reserved cost (TAT = slot + T, TAT_U
// unchanged by it), and the ignored value is counted.
func TestCostHeaderCorrectsTenantAndUpstream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2)
	const T = 60_000_000 // 1/m: the tenants' TAT stays ahead while the test reads it
	for _, tn := range []string{"good", "bad"} {
		h.policy(tn, store.Overrides{RateUS: ptr(T), Burst: ptr(1), Adaptive: ptr(0)})
	}
	const iv = 1000
	upTAT := time.Now().Add(time.Hour).UnixMicro()
	h.seedUpstream("llm", "X-Usage-Tokens", iv, upTAT)
	good := newHookServer(t, func(int) (int, http.Header) { return http.StatusOK, http.Header{"X-Usage-Tokens": {"7"}} })
	bad := newHookServer(t, func(int) (int, http.Header) { return http.StatusOK, http.Header{"X-Usage-Tokens": {"7 tokens"}} })
	goodID := h.enqueueSpec("good", job.Spec{Type: wire.TypeHTTP, Method: "GET", URL: good.srv.URL + "/x"}, 0)
	badID := h.enqueueSpec("bad", job.Spec{Type: wire.TypeHTTP, Method: "GET", URL: bad.srv.URL + "/x"}, 0)
	h.namesUpstreams(goodID, "llm")
	h.namesUpstreams(badID, "llm")

	ups := worker.NewUpstreamCache(h.st) // shared by the cost reader and the worker, as cmd/worker does
	costs, err := worker.NewCostReader(ups, h.reg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	h.startDispatcher(nil)
	h.startWorker(2, &worker.WebhookExecutor{Client: loopbackClient(t), Costs: costs},
		func(c *worker.Config) { c.Upstreams, c.UpstreamRates, c.UpstreamCache = h.st, h.st, ups })
	redistest.PollMsg(t, 20*time.Second, func() (bool, string) {
		g, b := h.jobOf(goodID), h.jobOf(badID)
		return g.State == store.StateSucceeded && b.State == store.StateSucceeded, "jobs " + string(g.State) + ", " + string(b.State)
	})
	g, b := h.jobOf(goodID), h.jobOf(badID)

	if g.ActualCost != 7 || g.Cost != 1 {
		t.Errorf("good job: cost %d, actual %d; want 1, 7", g.Cost, g.ActualCost)
	}
	if st := h.tenantState("good"); !st.TAT.Equal(g.Slot.Add(7 * T * time.Microsecond)) {
		t.Errorf("good tenant's TAT slot + %s, want slot + 7T", st.TAT.Sub(g.Slot))
	}
	if b.ActualCost != 0 {
		t.Errorf("bad header: actual cost %d recorded, want none", b.ActualCost)
	}
	if st := h.tenantState("bad"); !st.TAT.Equal(b.Slot.Add(T * time.Microsecond)) {
		t.Errorf("bad header: tenant's TAT slot + %s, want slot + T (the reserved cost)", st.TAT.Sub(b.Slot))
	}
	// The upstream's correction follows the finish: poll for it.
	var tat int64
	redistest.Poll(t, 5*time.Second, "the upstream's charge", func() bool {
		tat, err = h.rdb.HGet(h.ctx, h.st.UpstreamKey("llm"), "tat").Int64()
		return err == nil && tat != upTAT
	})
	if want := upTAT + 6*iv; tat != want {
		t.Errorf("upstream TAT moved by %d µs, want 6·T_U = %d", tat-upTAT, 6*iv)
	}
	if n := h.counter("sluice_worker_cost_headers_ignored_total", "reason=not_integer"); n != 1 {
		t.Errorf("%v ignored cost headers counted, want 1", n)
	}
}

package worker_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// putUpstream configures upstream name at one request per interval with
// burst (scope: 1 = pause_scope upstream), writing the documented hash
// fields p and v as the upstream API's PutUpstream does.
func (h *harness) putUpstream(name string, interval time.Duration, burst int64, scope int) {
	h.t.Helper()
	p := fmt.Sprintf(`{"iv":%d,"b":%d,"c":0,"a":0,"s":%d}`, interval.Microseconds(), burst, scope)
	if err := h.rdb.HSet(h.ctx, store.UpstreamHashKey(h.prefix, name), "p", p, "v", 1).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// enqueueUp adds n webhook jobs for tenant naming upstreams, posting to the
// receiver's /<tenant>, and returns their ids.
func (h *harness) enqueueUp(tenant string, n int, upstreams ...string) []string {
	h.t.Helper()
	spec := job.Spec{Type: wire.TypeWebhook, URL: h.recv.srv.URL + "/hooks/" + tenant, Event: "test.event", Payload: json.RawMessage(`{"n":1}`)}
	items := make([]store.Item, n)
	for i := range items {
		items[i] = store.Item{Type: wire.TypeWebhook, Body: spec.Canonical(), Upstreams: upstreams}
	}
	rs, err := h.st.Enqueue(h.ctx, tenant, items)
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, r := range rs {
		if r.Outcome != store.Accepted {
			h.t.Fatalf("enqueue for %s: %+v", tenant, r)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// tenantsOnShards returns n tenant names on n different shards of shards.
func tenantsOnShards(prefix string, n, shards int) []string {
	var out []string
	used := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		tn := fmt.Sprintf("%s%d", prefix, i)
		if sh := store.ShardOf(tn, shards); !used[sh] {
			used[sh] = true
			out = append(out, tn)
		}
	}
	return out
}

// TestSharedUpstreamBoundAndShares: three tenants at 50/s on three shards
// share an upstream at 20/s; three dispatchers and two workers deliver
// their 300 jobs. The receiver's combined arrivals obey the upstream's
// bound, each tenant gets a third ± 15 % while all wait, nobody exceeds its
// own bound, and a fourth tenant not naming the upstream keeps its 50/s
// meanwhile.
func TestSharedUpstreamBoundAndShares(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	h.putUpstream("shared", 50*time.Millisecond, 1, 0)
	tenants := tenantsOnShards("up", 3, 4)
	var ids []string
	for _, tn := range tenants {
		h.policy(tn, store.Overrides{RateUS: ptr(20_000), Burst: ptr(1), Concurrency: ptr(20)})
		ids = append(ids, h.enqueueUp(tn, 100, "shared")...)
	}
	h.policy("plain", store.Overrides{RateUS: ptr(20_000), Burst: ptr(1), Concurrency: ptr(20)})
	plainIDs := h.enqueue("plain", 100)
	h.startWorker(20, nil)
	h.startWorker(20, nil)
	for range 3 {
		h.startDispatcher(nil)
	}

	plain := h.recv.waitFor(t, "plain", 100, 10*time.Second)
	exactlyOnce(t, plain, plainIDs)
	checkRate(t, plain, 50, 1, h.sendError(plain))
	if took := plain[len(plain)-1].at.Sub(plain[0].at); took > 3*time.Second {
		t.Errorf("the plain tenant's 100 jobs at 50/s took %s, want ≈ 2s", took)
	}

	var got []arrival
	redistest.Poll(t, 30*time.Second, "300 upstream jobs", func() bool {
		got = nil
		for _, tn := range tenants {
			got = append(got, h.recv.arrivals(tn)...)
		}
		return len(got) >= 300
	})
	slices.SortFunc(got, func(a, b arrival) int { return a.at.Compare(b.at) })
	exactlyOnce(t, got, ids)
	checkRate(t, got, 20, 1, h.sendError(got))
	// Shares while all three wait: the first half of the arrivals.
	half := got[:150]
	for _, tn := range tenants {
		n := 0
		for _, a := range half {
			if a.tenant == tn {
				n++
			}
		}
		if n < 42 || n > 58 {
			t.Errorf("tenant %s: %d of the first 150 upstream arrivals, want 50 ± 15 %%", tn, n)
		}
		own := h.recv.arrivals(tn)
		checkRate(t, own, 50, 1, h.sendError(own))
	}
	h.noStall(t)
	t.Logf("300 upstream jobs over %s (20/s: ≈ 15 s)", got[len(got)-1].at.Sub(got[0].at))
}

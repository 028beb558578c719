package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// GET /v1/circuits lists an opened circuit, the tenant view and its live
// view list the destination a deferred job waits for, and POST
// /v1/circuits:close (admin) closes it; bad input changes nothing.
func TestCircuitsOverHTTP(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	st, ctx := f.srv.opts.Store, context.Background()
	const dest = "https://example.com:443"
	if r := f.get(t, "/v1/circuits", producerToken); r.status != 200 || len(r.body["circuits"].([]any)) != 0 {
		t.Fatalf("no circuit yet: %d %v", r.status, r.body)
	}
	if v := f.tenant(t, "acme-c"); len(v["open_destinations"].([]any)) != 0 {
		t.Fatalf("open destinations of a new tenant: %v", v["open_destinations"])
	}
	if _, err := st.CircuitRecord(ctx, dest, "j:1", true, store.CircuitConfig{Failures: 1, Backoff: time.Minute}); err != nil {
		t.Fatal(err)
	}
	r := f.get(t, "/v1/circuits", producerToken)
	cs := r.body["circuits"].([]any)
	if r.status != 200 || len(cs) != 1 {
		t.Fatalf("circuits: %d %v", r.status, r.body)
	}
	if c := cs[0].(map[string]any); c["destination"] != dest || c["state"] != "open" || c["failures"] != 1.0 ||
		c["backoff_seconds"] != 60.0 || c["until"] == nil {
		t.Fatalf("circuit %v", c)
	}

	requireAccepted(t, f.post(t, "/v1/tenants/acme-c/jobs", producerToken, webhookJob), "acme-c", "queued")
	id, state := attempt(t, st, store.ShardOf("acme-c", st.Shards()),
		wire.AttemptOutcome{Kind: wire.FinishDeferred, Pause: time.Minute, Error: dest})
	if state != store.StateRetrying {
		t.Fatalf("deferred job %s: %s", id, state)
	}
	for _, path := range []string{"/v1/tenants/acme-c", "/v1/tenants/acme-c/live"} {
		r := f.get(t, path, producerToken)
		v := r.body
		if path != "/v1/tenants/acme-c" {
			v, _ = r.body["tenant"].(map[string]any)
		}
		ods, _ := v["open_destinations"].([]any)
		if r.status != 200 || len(ods) != 1 {
			t.Fatalf("%s: %d open destinations %v", path, r.status, v["open_destinations"])
		}
		if od := ods[0].(map[string]any); od["destination"] != dest || od["state"] != "open" || od["until"] == nil || od["jobs_until"] == nil {
			t.Fatalf("%s: %v", path, od)
		}
	}

	for _, c := range []struct {
		token, body string
		status      int
	}{
		{producerToken, `{"destination":"` + dest + `"}`, http.StatusForbidden},
		{adminToken, `{"destination":""}`, http.StatusUnprocessableEntity},
		{adminToken, `{"destination":"https://other.example:443"}`, http.StatusNotFound},
		{adminToken, `{"dest":1}`, http.StatusBadRequest},
	} {
		if r := f.post(t, "/v1/circuits:close", c.token, c.body); r.status != c.status {
			t.Fatalf("close %s: %d %v, want %d", c.body, r.status, r.body, c.status)
		}
	}
	if cs, _, _ := st.Circuits(ctx); len(cs) != 1 {
		t.Fatalf("refused closes changed the circuits: %+v", cs)
	}
	if r := f.post(t, "/v1/circuits:close", adminToken, `{"destination":"`+dest+`"}`); r.status != 200 || r.body["state"] != "closed" {
		t.Fatalf("close: %d %v", r.status, r.body)
	}
	if cs, _, _ := st.Circuits(ctx); len(cs) != 0 {
		t.Fatalf("closed, yet %+v", cs)
	}
	if ods := f.tenant(t, "acme-c")["open_destinations"].([]any); len(ods) != 1 || ods[0].(map[string]any)["state"] != "closed" {
		t.Fatalf("after the close, the deferred job still waits for its due time, shown closed: %v", ods)
	}
}

package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

func TestPauseAndResumeOverHTTP(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	requireAccepted(t, f.post(t, "/v1/tenants/acme-p/jobs", producerToken, hook(1)), "acme-p", "queued")

	if r := f.post(t, "/v1/tenants/acme-p/pause", producerToken, ""); r.status != http.StatusForbidden {
		t.Errorf("pause by a non-admin key: %d, want 403", r.status)
	}
	r := f.post(t, "/v1/tenants/acme-p/pause", adminToken, "")
	if r.status != 200 || r.body["admin_paused"] != true || r.body["next_eligible_at"] != nil {
		t.Fatalf("pause: %d %v, want 200 admin_paused and no next eligible time", r.status, r.body)
	}
	untilT := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	until := untilT.Format(time.RFC3339)
	r = f.post(t, "/v1/tenants/acme-p/pause", adminToken, `{"until":"`+until+`"}`)
	if r.status != 200 || r.body["admin_paused_until"] == nil || nextAt(t, r).Before(untilT) {
		t.Errorf("timed pause: %d %v, want admin_paused_until set and nothing eligible before it", r.status, r.body)
	}
	if r := f.post(t, "/v1/tenants/acme-p/pause", adminToken, `{"until":"soon"}`); r.status != 422 {
		t.Errorf("pause until garbage: %d, want 422", r.status)
	}
	r = f.post(t, "/v1/tenants/acme-p/resume", adminToken, "")
	if r.status != 200 || r.body["admin_paused"] != false || r.body["admin_paused_until"] != nil || r.body["next_eligible_at"] == nil {
		t.Errorf("resume: %d %v, want unpaused and eligible again", r.status, r.body)
	}
	if r.body["backlog"] != 1.0 {
		t.Errorf("backlog after pause and resume = %v, want the 1 job kept", r.body["backlog"])
	}
}

// attempt drives the shard's one queued job through one attempt of the
// dispatch protocol — release, claim, finish with o — and returns its id and
// the state the finish left it in.
func attempt(t *testing.T, st *store.Store, shard int, o wire.AttemptOutcome) (string, store.State) {
	t.Helper()
	ctx := context.Background()
	pass, err := st.Pass(ctx, shard, store.PassConfig{Lead: time.Hour, MinLead: 0, Grace: time.Hour, MaxPromotions: 10, MaxTenants: 10, Capacity: -1})
	if err != nil || len(pass.Released) != 1 {
		t.Fatalf("pass: %v released %d, want 1", err, len(pass.Released))
	}
	rel := pass.Released[0]
	cl, err := st.Claim(ctx, rel.ID, rel.Gen, time.Hour)
	if err != nil || cl.Outcome != store.ClaimOK {
		t.Fatalf("claim: %v %+v", err, cl)
	}
	state, err := st.Finish(ctx, rel.ID, cl.Job.Gen, o, store.FinishConfig{})
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	return rel.ID, state
}

// killJob drives one job to the dead set: an attempt that fails for good.
func killJob(t *testing.T, st *store.Store, shard int) string {
	t.Helper()
	id, state := attempt(t, st, shard, wire.AttemptOutcome{Kind: wire.FinishPermanent, Status: 404, Error: "http_404"})
	if state != store.StateDead {
		t.Fatalf("finish: state %q, want dead", state)
	}
	return id
}

func TestDeadLettersAndReplayOverHTTP(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	id := requireAccepted(t, f.post(t, "/v1/tenants/acme-d/jobs", producerToken, hook(1)), "acme-d", "queued")
	if r := f.post(t, "/v1/jobs/"+id+"/replay", producerToken, ""); r.status != http.StatusConflict {
		t.Errorf("replay of a queued job: %d, want 409", r.status)
	}
	shard, _ := store.ShardOfJobID(id)
	killJob(t, f.srv.opts.Store, shard)

	r := f.get(t, "/v1/tenants/acme-d/dead", producerToken)
	jobs, _ := r.body["jobs"].([]any)
	if r.status != 200 || len(jobs) != 1 || jobs[0].(map[string]any)["id"] != id || r.body["next_cursor"] != nil {
		t.Fatalf("dead letters: %d %v, want the one job and no next page", r.status, r.body)
	}
	if attempts := jobs[0].(map[string]any)["attempts"].([]any); len(attempts) != 1 || attempts[0].(map[string]any)["status"] != 404.0 {
		t.Errorf("dead job's attempt log = %v, want one 404 attempt", attempts)
	}
	if r := f.get(t, "/v1/tenants/acme-d/dead?limit=0", producerToken); r.status != http.StatusBadRequest {
		t.Errorf("limit=0: %d, want 400 as on every list route", r.status)
	}
	r = f.post(t, "/v1/jobs/"+id+"/replay", producerToken, "")
	if r.status != 200 || r.body["state"] != "queued" || r.body["attempt_count"] != 1.0 {
		t.Fatalf("replay: %d %v, want queued with its attempt kept", r.status, r.body)
	}
	if r := f.get(t, "/v1/tenants/acme-d/dead", producerToken); len(r.body["jobs"].([]any)) != 0 {
		t.Errorf("dead set after replay: %v, want empty", r.body)
	}
	if r := f.post(t, "/v1/jobs/"+id+"/replay", producerToken, ""); r.status != http.StatusConflict {
		t.Errorf("second replay: %d, want 409", r.status)
	}
}

func nextAt(t *testing.T, r response) time.Time {
	t.Helper()
	s, _ := r.body["next_eligible_at"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("next_eligible_at %q: %v", s, err)
	}
	return at
}

package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The iterator walks every tenant once across cursors, in order, and
// stops when the loop does.
func TestTenantsIterator(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("acme-%02d", i)
		want = append(want, id)
		if _, err := d.producer.Enqueue(ctx, id, hook(i), client.Delay(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.admin.Enqueue(ctx, "globex", hook(0), client.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	page, err := d.producer.ListTenants(ctx, client.TenantQuery{Limit: 3}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Tenants) != 3 || page.Cursor == "" {
		t.Fatalf("first page of 3: %d tenants, cursor %q; want 3 and a cursor", len(page.Tenants), page.Cursor)
	}
	var got []string
	for ten, err := range d.producer.Tenants(ctx, client.TenantQuery{Limit: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ten.Tenant)
		if ten.Backlog != 1 || len(ten.Raw) == 0 {
			t.Errorf("tenant %s: backlog %d, raw %d bytes; want 1 and the API's JSON", ten.Tenant, ten.Backlog, len(ten.Raw))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("producer's tenants over pages of 3: %v, want %v (its own, each once, by name)", got, want)
	}
	got = got[:0]
	for ten, err := range d.admin.Tenants(ctx, client.TenantQuery{Limit: 2, Prefix: "acme-0", Sort: "backlog"}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ten.Tenant)
		if len(got) == 5 {
			break
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, want[:5]) {
		t.Errorf("admin's first 5 of prefix acme-0 by backlog: %v, want 5 of %v", got, want)
	}
	for _, err := range d.admin.Tenants(ctx, client.TenantQuery{Sort: "sideways"}) {
		if !errors.Is(err, client.ErrInvalid) {
			t.Errorf("bad sort: %v, want ErrInvalid", err)
		}
	}
}

// clientRoutes maps every route of the OpenAPI document to the Client
// method that calls it.
var clientRoutes = map[string]string{
	"POST /v1/tenants/{tenant}/jobs":           "Enqueue",
	"POST /v1/tenants/{tenant}/jobs:batch":     "EnqueueBatch",
	"GET /v1/jobs/{id}":                        "GetJob",
	"DELETE /v1/jobs/{id}":                     "CancelJob",
	"POST /v1/jobs/{id}/replay":                "ReplayJob",
	"GET /v1/tenants":                          "ListTenants",
	"GET /v1/tenants/{tenant}":                 "GetTenant",
	"PUT /v1/tenants/{tenant}/policy":          "PutPolicy",
	"POST /v1/tenants/{tenant}/pause":          "PauseTenant",
	"POST /v1/tenants/{tenant}/resume":         "ResumeTenant",
	"GET /v1/tenants/{tenant}/live":            "TenantLive",
	"GET /v1/tenants/{tenant}/dead":            "DeadLetters",
	"POST /v1/tenants/{tenant}/dead:replay":    "ReplayDead",
	"GET /v1/tenants/{tenant}/jobs":            "TenantJobs",
	"POST /v1/tenants/{tenant}/jobs:cancel":    "CancelJobs",
	"POST /v1/tenants/{tenant}/secrets":        "CreateSecret",
	"GET /v1/tenants/{tenant}/secrets":         "Secrets",
	"DELETE /v1/tenants/{tenant}/secrets/{id}": "DeleteSecret",
	"POST /v1/limits/{name}/check":             "Allow",
	"GET /v1/summary":                          "Summary",
	"GET /v1/upstreams":                        "ListUpstreams",
	"GET /v1/upstreams/{name}":                 "GetUpstream",
	"PUT /v1/upstreams/{name}":                 "PutUpstream",
	"DELETE /v1/upstreams/{name}":              "DeleteUpstream",
	"POST /v1/upstreams/{name}/pause":          "PauseUpstream",
	"POST /v1/upstreams/{name}/resume":         "ResumeUpstream",
	"GET /healthz":                             "Health",
	"GET /readyz":                              "Ready",
	"GET /openapi.json":                        "OpenAPI",
	"POST /v1/keys":                            "CreateKey",
	"GET /v1/keys":                             "Keys",
	"DELETE /v1/keys/{name}":                   "DeleteKey",
	"POST /v1/admin/reload":                    "Reload",
	"GET /v1/circuits":                         "Circuits",
	"POST /v1/circuits:close":                  "CloseCircuit",
	"GET /metrics":                             "", // Prometheus's to scrape, not a client call
}

// Every route the throttler documents has a client method, and every
// method of the table calls a documented route.
func TestEveryRouteHasAMethod(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	doc, err := d.admin.OpenAPI(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var api struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &api); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range api.Paths {
		for method := range ops {
			if m := strings.ToUpper(method); slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, m) {
				documented[m+" "+path] = true
			}
		}
	}
	typ := reflect.TypeFor[*client.Client]()
	for route := range documented {
		name, ok := clientRoutes[route]
		switch {
		case !ok:
			t.Errorf("route %s has no client method: add one and list it in clientRoutes", route)
		case name != "":
			if _, ok := typ.MethodByName(name); !ok {
				t.Errorf("route %s: clientRoutes names %s, which *client.Client does not have", route, name)
			}
		}
	}
	for route := range clientRoutes {
		if !documented[route] {
			t.Errorf("clientRoutes lists %s, which the OpenAPI document does not", route)
		}
	}
}

// Jobs delivered by a real worker to a real receiver; a failing one's jobs
// die, are listed and replayed one by one and in bulk.
func TestDeliveryDeadLettersAndReplay(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, true)
	ctx := ctxFor(t)
	var failing atomic.Bool
	failing.Store(true)
	var got atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		got.Add(1)
	}))
	t.Cleanup(recv.Close)
	job := client.Webhook{URL: recv.URL + "/hook", Event: "order.paid", Payload: map[string]string{"order": "7"}}
	var ids []string
	for range 3 {
		j, err := d.admin.Enqueue(ctx, "dead", job, client.MaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	var page *client.DeadPage
	redistest.PollMsg(t, 30*time.Second, func() (bool, string) {
		ten, err := d.admin.GetTenant(ctx, "dead")
		if err != nil {
			t.Fatal(err)
		}
		return ten.DeadLetters == 3, fmt.Sprintf("%d dead letters, want 3", ten.DeadLetters)
	})
	page, err := d.admin.DeadLetters(ctx, "dead", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 2 || page.Cursor == "" || page.Jobs[0].State != "dead" || page.Jobs[0].AttemptCount < 1 {
		t.Fatalf("first dead page of 2: %s", page.Raw)
	}
	rest, err := d.admin.DeadLetters(ctx, "dead", page.Cursor, 2)
	if err != nil || len(rest.Jobs) != 1 || rest.Cursor != "" {
		t.Fatalf("second dead page: %v, %v; want the third job, the last page", rest, err)
	}
	failing.Store(false)
	if v, err := d.admin.ReplayJob(ctx, page.Jobs[0].ID); err != nil || v.State == "dead" {
		t.Fatalf("replay one: %v, %v", v, err)
	}
	if _, err := d.admin.ReplayJob(ctx, page.Jobs[0].ID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("replay a job that is no longer dead: %v, want ErrConflict", err)
	}
	res, err := d.admin.ReplayDead(ctx, "dead", client.DeadReplay{})
	if err != nil || res.Replayed != 2 || res.Cursor != "" {
		t.Fatalf("bulk replay: %+v, %v; want the 2 others, the walk done", res, err)
	}
	redistest.PollMsg(t, 30*time.Second, func() (bool, string) {
		for _, id := range ids {
			v, err := d.admin.GetJob(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if v.State != "succeeded" {
				return false, fmt.Sprintf("job %s is %s, want succeeded", id, v.State)
			}
		}
		return true, ""
	})
	if got.Load() != 3 {
		t.Errorf("the receiver got %d deliveries, want 3", got.Load())
	}
}

// Secrets, upstreams, pause and resume, limits, the summary and the live
// view, each through its method.
func TestOperatorCalls(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)

	sec, err := d.admin.CreateSecret(ctx, "acme-1", client.SecretOptions{})
	if err != nil || !strings.HasPrefix(sec.Secret, "whsec_") {
		t.Fatalf("create secret: %+v, %v", sec, err)
	}
	list, err := d.admin.Secrets(ctx, "acme-1")
	if err != nil || len(list) != 1 || list[0].ID != sec.ID || list[0].Secret != "" {
		t.Fatalf("secrets: %+v, %v; want the one made, without its value", list, err)
	}
	if err := d.admin.DeleteSecret(ctx, "acme-1", sec.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.admin.DeleteSecret(ctx, "acme-1", sec.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("delete it again: %v, want ErrNotFound", err)
	}

	up, err := d.admin.PutUpstream(ctx, "crm", client.UpstreamConfig{Rate: "10/s", Burst: 5}, client.AnyVersion)
	if err != nil || up.Config.Burst != 5 || up.Version < 1 {
		t.Fatalf("put upstream: %+v, %v", up, err)
	}
	if up, err = d.admin.PauseUpstream(ctx, "crm", time.Minute); err != nil || !up.Paused || up.PausedUntil == nil {
		t.Fatalf("pause upstream for a minute: %+v, %v", up, err)
	}
	if up, err = d.admin.ResumeUpstream(ctx, "crm"); err != nil || up.Paused {
		t.Fatalf("resume upstream: %+v, %v", up, err)
	}
	ups, err := d.admin.ListUpstreams(ctx, "", 0)
	if err != nil || len(ups.Upstreams) != 1 || ups.Upstreams[0].Name != "crm" {
		t.Fatalf("list upstreams: %+v, %v", ups, err)
	}
	if err := d.admin.DeleteUpstream(ctx, "crm", up.Version); err != nil {
		t.Fatal(err)
	}

	ten, err := d.admin.PauseTenant(ctx, "acme-1", time.Now().Add(time.Hour))
	if err != nil || ten.AdminPausedUntil == nil {
		t.Fatalf("pause tenant for an hour: %v, %v", ten, err)
	}
	if ten, err = d.admin.ResumeTenant(ctx, "acme-1"); err != nil || ten.AdminPaused || ten.AdminPausedUntil != nil {
		t.Fatalf("resume tenant: %v, %v", ten, err)
	}
	pol, err := d.admin.PutPolicy(ctx, "acme-1", map[string]any{"rate": "5/s", "burst": 7}, ten.Version)
	if err != nil || pol.Version != ten.Version+1 || !strings.Contains(string(pol.Policy), `"burst":7`) {
		t.Fatalf("put policy at version %d: %+v, %v", ten.Version, pol, err)
	}

	for i := range 3 {
		dec, err := d.admin.Allow(ctx, "search", "user-1", 1)
		if err != nil || !dec.Allowed || dec.Remaining != int64(2-i) {
			t.Fatalf("check %d: %+v, %v; want allowed, %d left", i, dec, err, 2-i)
		}
	}
	dec, err := d.admin.Allow(ctx, "search", "user-1", 1)
	if err != nil || dec.Allowed || dec.RetryAfter <= 0 {
		t.Fatalf("4th check of 3/h: %+v, %v; want a denial with RetryAfter, no error", dec, err)
	}

	sum, err := d.admin.Summary(ctx)
	if err != nil || sum.Key.Name != "admin" || !sum.Key.Admin {
		t.Fatalf("summary: %+v, %v", sum, err)
	}
	live, err := d.admin.TenantLive(ctx, "acme-1", 0)
	if err != nil || live.Tenant.Tenant != "acme-1" || live.Points == nil {
		t.Fatalf("live: %s, %v", live.Raw, err)
	}
	if err := d.admin.Health(ctx); err != nil {
		t.Error(err)
	}
	if err := d.admin.Ready(ctx); err != nil {
		t.Error(err)
	}
}

// TenantJobs pages a tenant's jobs by state both ways; CancelJobs cancels
// one event's along its cursor and leaves the rest; bad input is ErrInvalid.
func TestTenantJobsAndCancelJobs(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	var ids []string
	for i := range 4 {
		w := hook(i)
		if i%2 == 0 {
			w.Event = "order.stale"
		}
		info, err := d.producer.Enqueue(ctx, "acme-1", w)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	if _, err := d.producer.Enqueue(ctx, "acme-1", hook(9), client.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for q := (client.JobsQuery{Limit: 3}); ; {
		page, err := d.producer.TenantJobs(ctx, "acme-1", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			got = append(got, j.ID)
		}
		if page.Cursor == "" {
			break
		}
		q.Cursor = page.Cursor
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("queued: %q, want %q", got, ids)
	}
	if page, err := d.producer.TenantJobs(ctx, "acme-1", client.JobsQuery{State: "delayed", Newest: true}); err != nil || len(page.Jobs) != 1 {
		t.Fatalf("delayed: %+v, %v; want the one delayed job", page, err)
	}
	canceled := 0
	for sel := (client.JobsCancel{State: "queued", Event: "order.stale", Limit: 1}); ; {
		r, err := d.admin.CancelJobs(ctx, "acme-1", sel)
		if err != nil {
			t.Fatal(err)
		}
		canceled += r.Canceled
		if r.Cursor == "" {
			break
		}
		sel.Cursor = r.Cursor
	}
	page, err := d.producer.TenantJobs(ctx, "acme-1", client.JobsQuery{})
	if err != nil || canceled != 2 || len(page.Jobs) != 2 || page.Jobs[0].ID != ids[1] || page.Jobs[1].ID != ids[3] {
		t.Fatalf("canceled %d, queued after %+v (%v); want 2 canceled, %s and %s left", canceled, page, err, ids[1], ids[3])
	}
	if _, err := d.producer.TenantJobs(ctx, "acme-1", client.JobsQuery{State: "done"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("state done: %v, want ErrInvalid", err)
	}
	if _, err := d.admin.CancelJobs(ctx, "acme-1", client.JobsCancel{State: "running"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("cancel running: %v, want ErrInvalid", err)
	}
	if _, err := d.producer.CancelJobs(ctx, "acme-1", client.JobsCancel{}); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("cancel with a producer key: %v, want ErrForbidden", err)
	}
}

// Circuits lists no destination on a fresh deployment; closing one that
// has no circuit is ErrNotFound, an empty destination ErrInvalid, and a
// producer key may not close circuits.
func TestCircuits(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	cs, err := d.producer.Circuits(ctx)
	if err != nil || cs == nil || len(cs) != 0 {
		t.Fatalf("circuits of a fresh deployment: %v, %v; want an empty list", cs, err)
	}
	if err := d.admin.CloseCircuit(ctx, "https://nowhere.example:443"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("close a destination without a circuit: %v, want ErrNotFound", err)
	}
	if err := d.admin.CloseCircuit(ctx, ""); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("close an empty destination: %v, want ErrInvalid", err)
	}
	if err := d.producer.CloseCircuit(ctx, "https://nowhere.example:443"); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("a producer closes a circuit: %v, want ErrForbidden", err)
	}
}

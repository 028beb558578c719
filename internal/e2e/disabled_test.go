package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// listedTenant is the part of a tenant view this file checks.
type listedTenant struct {
	Tenant     string   `json:"tenant"`
	Backlog    int64    `json:"backlog"`
	Disabled   bool     `json:"disabled"`
	DrainETAS  *float64 `json:"drain_eta_s"`
	OldestAgeS *float64 `json:"oldest_job_age_s"`
	Draining   bool     `json:"draining"`
}

// listTenants is every page of GET /v1/tenants?query on p, in order.
func (c *cluster) listTenants(p *proc, query string) []listedTenant {
	c.t.Helper()
	var all []listedTenant
	cursor := ""
	for page := 0; ; page++ {
		if page > 100 {
			c.t.Fatalf("GET /v1/tenants?%s: more than 100 pages", query)
		}
		var r struct {
			Tenants []listedTenant `json:"tenants"`
			Cursor  *string        `json:"cursor"`
		}
		path := "/v1/tenants?limit=2&" + query
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		if st := c.call(p, http.MethodGet, path, nil, &r); st != http.StatusOK {
			c.t.Fatalf("GET %s: %d", path, st)
		}
		all = append(all, r.Tenants...)
		if r.Cursor == nil {
			return all
		}
		cursor = *r.Cursor
	}
}

func tenantIDs(ts []listedTenant) []string {
	ids := make([]string, len(ts))
	for i, v := range ts {
		ids[i] = v.Tenant
	}
	slices.Sort(ids)
	return ids
}

// TestDisabledTenantsListed: tenants made at run time, with a real worker
// and receiver. One is disabled by a webhook answered 410, one by an http
// job answered 410 under disable_on_gone; one http job's 410 kills only
// that job; one tenant is admin-paused, one delivers normally. GET
// /v1/tenants?state=disabled lists exactly the two disabled ones in every
// sort (page by page), state=paused and state=active the others; the
// forecast of a disabled tenant with a backlog says draining: false and
// no drain ETA. After a resume (and the receiver answering again) the
// tenant drains and leaves the disabled list.
func TestDisabledTenantsListed(t *testing.T) {
	t.Parallel()
	c := newCluster(t, options{})
	th := c.startThrottler()
	c.startWorker()
	// One job a minute: after the first 410 the other two stay queued.
	slow := map[string]any{"rate": "1/m", "burst": 1}
	policies := map[string]map[string]any{
		"gone-hook": slow, "gone-http": {"rate": "1/m", "burst": 1, "disable_on_gone": true},
		"http-410": slow, "held": slow, "fine": {},
	}
	for tenant, p := range policies {
		if st := c.call(th, http.MethodPut, "/v1/tenants/"+tenant+"/policy", p, nil); st != http.StatusOK {
			t.Fatalf("PUT /v1/tenants/%s/policy: %d", tenant, st)
		}
	}
	for _, tenant := range []string{"gone-hook", "gone-http", "http-410"} {
		c.recv.setStatus(tenant, http.StatusGone)
	}
	if st := c.call(th, http.MethodPost, "/v1/tenants/held/pause", nil, nil); st != http.StatusOK {
		t.Fatalf("pause: %d", st)
	}
	httpJob := func(tenant string) map[string]any {
		return map[string]any{"type": "http", "method": "POST", "url": c.recv.url(tenant)}
	}
	c.enqueue(th, "gone-hook", 3)
	c.enqueueOne(th, "held", c.webhookJob("held", 0), "")
	fine := c.enqueue(th, "fine", 2)
	for range 3 {
		c.enqueueOne(th, "gone-http", httpJob("gone-http"), "")
	}
	killed := c.enqueueOne(th, "http-410", httpJob("http-410"), "")
	c.enqueueOne(th, "http-410", httpJob("http-410"), "")

	tenant := func(id string) listedTenant {
		var v listedTenant
		if st := c.call(th, http.MethodGet, "/v1/tenants/"+id, nil, &v); st != http.StatusOK {
			t.Fatalf("GET /v1/tenants/%s: %d", id, st)
		}
		return v
	}
	poll(t, 30*time.Second, func() (bool, string) {
		a, b := tenant("gone-hook"), tenant("gone-http")
		return a.Disabled && b.Disabled, fmt.Sprintf("gone-hook %+v, gone-http %+v: want both disabled", a, b)
	})
	c.waitSucceeded(th, fine, 15*time.Second)
	poll(t, 30*time.Second, func() (bool, string) {
		var j jobState
		c.call(th, http.MethodGet, "/v1/jobs/"+killed, nil, &j)
		return j.State == "dead", fmt.Sprintf("the http-410 tenant's first job is %s, want dead", j.State)
	})

	for _, sort := range []string{"name", "backlog", "oldest"} {
		disabled := c.listTenants(th, "state=disabled&sort="+sort)
		if got := tenantIDs(disabled); !slices.Equal(got, []string{"gone-hook", "gone-http"}) {
			t.Errorf("state=disabled&sort=%s lists %v, want [gone-hook gone-http]", sort, got)
		}
		for _, v := range disabled {
			if !v.Disabled || v.Draining || v.DrainETAS != nil {
				t.Errorf("sort=%s: disabled tenant %+v: want disabled, draining false, drain_eta_s null", sort, v)
			}
		}
		if got := tenantIDs(c.listTenants(th, "state=paused&sort="+sort)); !slices.Equal(got, []string{"held"}) {
			t.Errorf("state=paused&sort=%s lists %v, want [held]", sort, got)
		}
		if got := tenantIDs(c.listTenants(th, "state=active&sort="+sort)); !slices.Equal(got, []string{"fine", "http-410"}) {
			t.Errorf("state=active&sort=%s lists %v, want [fine http-410]", sort, got)
		}
	}
	// The forecast of a disabled tenant with a backlog (its first job
	// dead, two queued): the same in GET /v1/tenants/{t}.
	for _, id := range []string{"gone-hook", "gone-http"} {
		if v := tenant(id); v.Backlog != 2 || v.OldestAgeS == nil || v.Draining || v.DrainETAS != nil {
			t.Errorf("forecast of disabled %s: %+v; want backlog 2, an oldest job age, draining false, no drain ETA", id, v)
		}
	}

	// Resumed: no longer listed as disabled, listed as active.
	c.recv.setStatus("gone-hook", 0)
	if st := c.call(th, http.MethodPost, "/v1/tenants/gone-hook/resume", nil, nil); st != http.StatusOK {
		t.Fatalf("resume: %d", st)
	}
	if got := tenantIDs(c.listTenants(th, "state=disabled")); !slices.Equal(got, []string{"gone-http"}) {
		t.Errorf("after resuming gone-hook, state=disabled lists %v, want [gone-http]", got)
	}
	if got := tenantIDs(c.listTenants(th, "state=active")); !slices.Equal(got, []string{"fine", "gone-hook", "http-410"}) {
		t.Errorf("after resuming gone-hook, state=active lists %v, want [fine gone-hook http-410]", got)
	}
}

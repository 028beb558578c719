package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/procstat"
)

// viewerKey is the read-only (non-admin) key of the console test.
const viewerKey = "e2e-viewer-key"

// The operator console in a real browser against a real throttler, worker
// and Redis: sign in; the overview lists three tenants with backlogs and
// counts deliveries per second; the tenants' search box finds a tenant
// that is not on the first page; a
// tenant page's chart gains points while jobs flow; pause from the page and
// see the state in the API; edit a policy, then a stale edit shows the
// conflict and changes nothing; replay a dead letter and see it delivered;
// webhook secrets created, rotated and deleted from the page (the API
// agrees; no secret left in the page once its dialog closed); a read-only
// key sees no write button and the API refuses its forged write; the tenant
// page lists recent attempts; the configuration's upstream is listed and
// paused and resumed from its page, and one created by API deleted from its
// page. Screenshots of the overview and a tenant page go to .sluice/ui/.
func TestConsole(t *testing.T) {
	t.Parallel()
	c := newCluster(t, options{
		tenants: map[string]string{
			"alpha": "{rate: 2/s, burst: 1}", "bravo": "{rate: 3/s, burst: 1}", "charlie": "{rate: 4/s, burst: 1}",
			"dlq": "{rate: 20/s, retry: {max_attempts: 1}}",
		},
		sections: map[string]string{"auth": fmt.Sprintf(`{keys: [{name: e2e, key: %q, tenants: ["*"], admin: true}, `+
			`{name: viewer, key: %q, tenants: ["*"]}]}`, adminKey, viewerKey),
			"secrets":   fmt.Sprintf("{key: %q}", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))),
			"upstreams": "{sms-7: {rate: 100/s, burst: 10, pause_scope: upstream}}",
			"circuit":   "{failures: 2, backoff: 10m}"},
	})
	p := c.startThrottler()
	c.startWorker()
	for i, tn := range []string{"alpha", "bravo", "charlie"} {
		c.enqueue(p, tn, 100+20*i)
	}
	b := newBrowser(t)
	tab := b.tab()
	signIn(b, tab, p, adminKey)

	t.Run("overview lists the backlogs", func(t *testing.T) {
		for _, tn := range []string{"alpha", "bravo", "charlie"} {
			b.run(tab, "busiest lists "+tn, chromedp.WaitVisible(chromedp.CSS(`#busiest tr[data-tenant="`+tn+`"]`)))
		}
		b.waitJS(tab, "totals count the backlog", `Number(document.querySelector('#total-backlog .v').textContent.replace(/,/g, '')) > 0`)
		b.waitJS(tab, "totals count deliveries per second", `Number(document.querySelector('#total-deliveries .v').textContent.replace(/,/g, '')) > 0`)
		var sum struct {
			Deliveries float64 `json:"deliveries_per_s"`
		}
		if c.call(p, http.MethodGet, "/v1/summary", nil, &sum); sum.Deliveries <= 0 || sum.Deliveries > 2+3+4+1 {
			t.Fatalf("summary: %v deliveries/s while alpha, bravo and charlie deliver at 2+3+4/s (bursts of 1)", sum.Deliveries)
		}
	})

	t.Run("the tenant page lists its jobs by state", func(t *testing.T) {
		b.run(tab, "open bravo", chromedp.Navigate(p.url()+"/ui/#/tenant/bravo"), chromedp.WaitVisible(chromedp.CSS(`#jobs-state`)))
		b.waitJS(tab, "queued jobs listed", `document.querySelectorAll('#jobs tbody tr[data-job]').length > 0`)
		id := evalJS[string](b, tab, "first queued job", `document.querySelector('#jobs tbody tr[data-job]').dataset.job`)
		var j struct {
			Tenant string `json:"tenant"`
		}
		if c.call(p, http.MethodGet, "/v1/jobs/"+id, nil, &j); j.Tenant != "bravo" {
			t.Fatalf("listed job %s is of tenant %q, want bravo", id, j.Tenant)
		}
		evalJS[bool](b, tab, "pick delayed", `(() => { const s = document.querySelector('#jobs-state');
			s.value = 'delayed'; s.dispatchEvent(new Event('change')); return true; })()`)
		b.waitJS(tab, "no delayed job", `document.querySelector('p#jobs') !== null && document.querySelector('#jobs-state').value === 'delayed'`)
	})

	t.Run("the chart gains points while jobs flow", func(t *testing.T) {
		b.run(tab, "open alpha", chromedp.Navigate(p.url()+"/ui/#/tenant/alpha"), chromedp.WaitVisible(chromedp.CSS(`#tenant-stats`)))
		b.waitJS(tab, "three points", `Number(document.querySelector('#chart').dataset.points) >= 3`)
		first := evalJS[int](b, tab, "points", `Number(document.querySelector('#chart').dataset.points)`)
		b.waitJS(tab, "more points", fmt.Sprintf(`Number(document.querySelector('#chart').dataset.points) >= %d`, first+2))
		var live struct {
			Points []struct {
				Delivered float64 `json:"delivered_per_s"`
				Rate      float64 `json:"rate"`
			} `json:"points"`
		}
		poll(t, startTimeout, func() (bool, string) {
			c.call(p, http.MethodGet, "/v1/tenants/alpha/live", nil, &live)
			for _, pt := range live.Points {
				if pt.Delivered > 0 && pt.Rate == 2 {
					return true, ""
				}
			}
			return false, fmt.Sprintf("no point with deliveries at rate 2/s: %+v", live.Points)
		})
		b.waitJS(tab, "a quarter minute of points", `Number(document.querySelector('#chart').dataset.points) >= 15`)
		requireRecentAttempts(t, b, tab, c, p)
		b.screenshot(tab, "tenant.png")
	})

	t.Run("pause from the page", func(t *testing.T) {
		b.run(tab, "pause", press(`#pause`),
			chromedp.WaitVisible(chromedp.CSS(`#tenant-state [data-state="paused"]`)))
		var v struct {
			AdminPaused bool `json:"admin_paused"`
		}
		if c.call(p, http.MethodGet, "/v1/tenants/alpha", nil, &v); !v.AdminPaused {
			t.Fatal("paused from the console, the API says not paused")
		}
		b.run(tab, "resume", press(`#resume`),
			chromedp.WaitVisible(chromedp.CSS(`#tenant-state [data-state="active"]`)))
	})

	t.Run("the tenant page lists its open destinations", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // a port that refuses connections once closed
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + ln.Addr().String()
		ln.Close()
		for i := range 4 {
			c.enqueueOne(p, "echo", map[string]any{"type": "webhook", "url": dead + "/hook", "event": "e2e.circuit",
				"payload": map[string]any{"i": i}}, fmt.Sprintf("circuit-%d", i))
		}
		b.run(tab, "open echo", chromedp.Navigate(p.url()+"/ui/#/tenant/echo"), chromedp.WaitVisible(chromedp.CSS(`#circuits-box`)))
		b.waitJS(tab, "the dead destination listed open", `document.querySelector('#open-destinations tr[data-destination="`+dead+`"] [data-state="open"]') !== null`)
		var circuits struct {
			Circuits []struct {
				Destination string `json:"destination"`
				State       string `json:"state"`
			} `json:"circuits"`
		}
		if c.call(p, http.MethodGet, "/v1/circuits", nil, &circuits); len(circuits.Circuits) != 1 || circuits.Circuits[0].State != "open" {
			t.Fatalf("circuits: %+v", circuits)
		}
		b.screenshot(tab, "tenant-circuit.png")
	})

	t.Run("the search finds a tenant beyond the first page", func(t *testing.T) {
		// The overview again, its deliveries' 10 s window full by now: docs/console.md's screenshot.
		b.run(tab, "overview", chromedp.Navigate(p.url()+"/ui/#/"), chromedp.WaitVisible(chromedp.CSS(`#busiest tr[data-tenant="alpha"]`)))
		// The first answer may be the summary read when the overview was last open (served while the next is read).
		b.waitJS(tab, "deliveries per second", `Number(document.querySelector('#total-deliveries .v').textContent) >= 5`)
		b.screenshot(tab, "overview.png")
		for i := range 60 { // zulu-00 … zulu-59: after alpha … dlq in name order, zulu-46 on are on page 2
			if st := c.call(p, http.MethodPut, fmt.Sprintf("/v1/tenants/zulu-%02d/policy", i), map[string]any{"rate": "1/s"}, nil); st != http.StatusOK {
				t.Fatalf("PUT zulu-%02d's policy: %d", i, st)
			}
		}
		b.run(tab, "open tenants", chromedp.Navigate(p.url()+"/ui/#/tenants"),
			chromedp.WaitVisible(chromedp.CSS(`#tenants tr[data-tenant="alpha"]`)))
		if n := evalJS[int](b, tab, "zulu-59 on page 1", `document.querySelectorAll('#tenants tr[data-tenant="zulu-59"]').length`); n != 0 {
			t.Fatal("zulu-59 is on the first page: the test shows nothing")
		}
		b.run(tab, "search zulu-5", chromedp.SendKeys(chromedp.CSS(`#tenants-search`), "zulu-5"))
		b.waitJS(tab, "zulu-50 … zulu-59 listed", `document.querySelectorAll('#tenants tbody tr').length === 10 && `+
			`!!document.querySelector('#tenants tr[data-tenant="zulu-59"]') && !document.querySelector('#tenants tr[data-tenant="alpha"]')`)
	})

	t.Run("policy edit, then a stale edit conflicts", func(t *testing.T) {
		var before struct {
			Version int64 `json:"version"`
		}
		c.call(p, http.MethodGet, "/v1/tenants/bravo", nil, &before) // the file's policy was seeded as a version
		editPolicy(b, tab, p, "bravo", `"3/s"`, `"5/s"`)
		b.run(tab, "saved", chromedp.WaitVisible(chromedp.CSS(`#policy-saved`)))
		requirePolicy(t, c, p, "bravo", before.Version+1, "5/s")
		b.run(tab, "edit again", chromedp.Click(chromedp.CSS(`#policy-edit`)), chromedp.WaitVisible(chromedp.CSS(`#policy-body`)))
		// Another operator saves first (the version the form holds goes stale).
		if st := c.callWith(p, http.MethodPut, "/v1/tenants/bravo/policy", map[string]any{"rate": "7/s"}, nil,
			map[string]string{"If-Match": fmt.Sprintf(`"%d"`, before.Version+1)}, nil); st != http.StatusOK {
			t.Fatalf("the other operator's PUT: %d", st)
		}
		setPolicyText(b, tab, `"5/s"`, `"9/s"`)
		b.run(tab, "save stale", chromedp.Click(chromedp.CSS(`#policy-save`)))
		b.waitJS(tab, "conflict shown", `document.querySelector('#policy-error').textContent.includes('Conflict')`)
		requirePolicy(t, c, p, "bravo", before.Version+2, "7/s")
	})

	t.Run("replay a dead letter", func(t *testing.T) {
		c.recv.setStatus("dlq", http.StatusBadRequest)
		id := c.enqueue(p, "dlq", 1)[0]
		poll(t, startTimeout, func() (bool, string) {
			var j jobState
			c.call(p, http.MethodGet, "/v1/jobs/"+id, nil, &j)
			return j.State == "dead", "job state " + j.State + ", want dead"
		})
		c.recv.setStatus("dlq", 0)
		b.run(tab, "open dlq", chromedp.Navigate(p.url()+"/ui/#/tenant/dlq"),
			chromedp.WaitVisible(chromedp.CSS(`#dead tr[data-job="`+id+`"] button.replay`)),
			chromedp.Click(chromedp.CSS(`#dead tr[data-job="`+id+`"] button.replay`)))
		c.waitSucceeded(p, []string{id}, startTimeout)
		if got := len(c.recv.arrivals("dlq")); got != 2 {
			t.Fatalf("the receiver saw %d requests of dlq, want 2 (the failed one, the replay)", got)
		}
		b.run(tab, "dead letters empty", chromedp.WaitVisible(chromedp.CSS(`p#dead`)))
	})

	t.Run("secrets: create, rotate, delete; none rendered after its dialog", func(t *testing.T) {
		b.run(tab, "open charlie", chromedp.Navigate(p.url()+"/ui/#/tenant/charlie"), chromedp.WaitVisible(chromedp.CSS(`p#secrets`)))
		first := newSecretInUI(t, b, tab)
		if got := apiSecrets(t, c, p, "charlie"); len(got) != 1 || got[0].ID != first || got[0].ExpiresAt != nil {
			t.Fatalf("after create: %+v, want %s alone, no expiry", got, first)
		}
		b.run(tab, "listed", chromedp.WaitVisible(chromedp.CSS(`#secrets tr[data-secret="`+first+`"]`)))
		second := newSecretInUI(t, b, tab) // a rotation: the first expires in 24 h
		got := apiSecrets(t, c, p, "charlie")
		if len(got) != 2 || got[0].ID != first || got[0].ExpiresAt == nil || got[1].ID != second || got[1].ExpiresAt != nil {
			t.Fatalf("after rotate: %+v, want %s expiring, %s not", got, first, second)
		}
		b.run(tab, "both listed", chromedp.WaitVisible(chromedp.CSS(`#secrets tr[data-secret="`+second+`"]`)))
		evalJS[bool](b, tab, "accept the confirmation", `(window.confirm = () => true, true)`)
		b.run(tab, "delete the first", chromedp.Click(chromedp.CSS(`#secrets tr[data-secret="`+first+`"] .secret-delete`)))
		b.waitJS(tab, "deleted from the list", `!document.querySelector('#secrets tr[data-secret="`+first+`"]') && !!document.querySelector('#secrets tr[data-secret="`+second+`"]')`)
		if got := apiSecrets(t, c, p, "charlie"); len(got) != 1 || got[0].ID != second {
			t.Fatalf("after delete: %+v, want %s alone", got, second)
		}
	})

	t.Run("upstreams: listed, paused and resumed from the page", func(t *testing.T) {
		b.run(tab, "open upstreams", chromedp.Navigate(p.url()+"/ui/#/upstreams"),
			chromedp.WaitVisible(chromedp.CSS(`#upstreams tr[data-upstream="sms-7"]`)),
			chromedp.Click(chromedp.CSS(`#upstreams tr[data-upstream="sms-7"] a`)),
			chromedp.WaitVisible(chromedp.CSS(`#upstream-pause-btn`)))
		b.run(tab, "pause", press(`#upstream-pause-btn`))
		b.waitJS(tab, "paused shown", `document.querySelector('#upstream-pause').textContent.startsWith('paused until resumed')`)
		var v struct {
			Paused bool `json:"paused"`
		}
		if c.call(p, http.MethodGet, "/v1/upstreams/sms-7", nil, &v); !v.Paused {
			t.Fatal("paused from the console, the API says not paused")
		}
		b.run(tab, "resume", press(`#upstream-resume-btn`))
		b.waitJS(tab, "active shown", `document.querySelector('#upstream-pause').textContent === 'active'`)
		if c.call(p, http.MethodGet, "/v1/upstreams/sms-7", nil, &v); v.Paused {
			t.Fatal("resumed from the console, the API says paused")
		}
		// An upstream created by API, deleted from its page.
		if st := c.call(p, http.MethodPut, "/v1/upstreams/tmp-del", map[string]any{"rate": "5/s"}, nil); st != http.StatusCreated {
			t.Fatalf("PUT tmp-del: %d", st)
		}
		b.run(tab, "open tmp-del", chromedp.Navigate(p.url()+"/ui/#/upstream/tmp-del"), chromedp.WaitVisible(chromedp.CSS(`#upstream-delete-btn`)))
		evalJS[bool](b, tab, "accept the confirmation", `(window.confirm = () => true, true)`)
		b.run(tab, "delete", press(`#upstream-delete-btn`))
		b.waitJS(tab, "back on the list", `location.hash === '#/upstreams'`)
		if st := c.call(p, http.MethodGet, "/v1/upstreams/tmp-del", nil, nil); st != http.StatusNotFound {
			t.Fatalf("deleted from the console, GET answers %d, want 404", st)
		}
	})

	t.Run("a read-only key sees no write button; the API refuses its forged write", func(t *testing.T) {
		ro := b.tab()
		signIn(b, ro, p, viewerKey)
		b.run(ro, "open charlie", chromedp.Navigate(p.url()+"/ui/#/tenant/charlie"),
			chromedp.WaitVisible(chromedp.CSS(`#tenant-stats`)), chromedp.WaitVisible(chromedp.CSS(`#policy-view`)))
		writes := evalJS[int](b, ro, "write buttons", `document.querySelectorAll('#pause, #resume, #policy-edit, .replay, #replay-all, #secret-rotate, .secret-delete').length`)
		if writes != 0 {
			t.Fatalf("a read-only key's page shows %d write buttons", writes)
		}
		b.run(ro, "open sms-7", chromedp.Navigate(p.url()+"/ui/#/upstream/sms-7"), chromedp.WaitVisible(chromedp.CSS(`#upstream-config`)))
		b.waitJS(ro, "sms-7 shown", `document.querySelector('#upstream-config').textContent.includes('100/s')`)
		if n := evalJS[int](b, ro, "upstream write buttons", `document.querySelectorAll('#upstream-pause-btn, #upstream-resume-btn, #upstream-delete-btn').length`); n != 0 {
			t.Fatalf("a read-only key's upstream page shows %d write buttons", n)
		}
		status := evalJS[int](b, ro, "forged pause", `fetch('/v1/tenants/charlie/pause', {method: 'POST',
			headers: {Authorization: 'Bearer ' + sessionStorage.getItem('sluice.apiKey')}}).then((r) => r.status)`)
		if status != http.StatusForbidden {
			t.Fatalf("a forged pause with the read-only key: %d, want 403", status)
		}
		var v struct {
			AdminPaused bool `json:"admin_paused"`
		}
		if c.call(p, http.MethodGet, "/v1/tenants/charlie", nil, &v); v.AdminPaused {
			t.Fatal("the refused pause paused the tenant")
		}
	})

	t.Run("20 pages' polls", func(t *testing.T) { pollCost(t, c, p, 10*time.Second) })
}

// requireRecentAttempts waits for the tenant page's recent attempts table to
// list at least 3 deliveries and checks its newest row against the job in
// the API (a success: the job succeeded, with that status on its last
// attempt; its latency shown in ms).
func requireRecentAttempts(t *testing.T, b *browser, tab context.Context, c *cluster, p *proc) {
	t.Helper()
	b.waitJS(tab, "recent attempts listed", `document.querySelectorAll('#recent-attempts tbody tr').length >= 3`)
	row := evalJS[[]string](b, tab, "newest attempt", `[...document.querySelector('#recent-attempts tbody tr').cells].map((td) => td.textContent)`)
	if len(row) != 5 {
		t.Fatalf("recent attempt row %q, want 5 cells", row)
	}
	var j struct {
		Tenant   string `json:"tenant"`
		State    string `json:"state"`
		Attempts []struct {
			Status int `json:"status"`
		} `json:"attempts"`
	}
	if st := c.call(p, http.MethodGet, "/v1/jobs/"+row[1], nil, &j); st != http.StatusOK || j.Tenant != "alpha" || len(j.Attempts) == 0 {
		t.Fatalf("the newest recent attempt's job %s: %d %+v", row[1], st, j)
	}
	last := j.Attempts[len(j.Attempts)-1]
	if row[2] != "success" || j.State != "succeeded" || row[3] != fmt.Sprint(last.Status) || !strings.HasSuffix(row[4], " ms") {
		t.Fatalf("recent attempt row %q, the job: %+v", row, j)
	}
}

// newSecretInUI clicks the secrets' create/rotate button on the open tenant
// page, reads the new secret from its dialog, closes it and requires that no
// secret is left in the page; it returns the secret's id.
func newSecretInUI(t *testing.T, b *browser, tab context.Context) string {
	t.Helper()
	b.run(tab, "new secret", chromedp.Click(chromedp.CSS(`#secret-rotate`)), chromedp.WaitVisible(chromedp.CSS(`#secret-dialog[open] #secret-value`)))
	b.waitJS(tab, "secret shown", `document.querySelector('#secret-value').textContent.startsWith('whsec_')`)
	value := evalJS[string](b, tab, "secret", `document.querySelector('#secret-value').textContent`)
	id := strings.TrimPrefix(evalJS[string](b, tab, "secret id", `document.querySelector('#secret-id').textContent`), "id ")
	b.run(tab, "close the dialog", chromedp.Click(chromedp.CSS(`#secret-close`)))
	b.waitJS(tab, "dialog closed and emptied", `!document.querySelector('#secret-dialog').open && document.querySelector('#secret-value').textContent === ''`)
	page := evalJS[string](b, tab, "page", `document.documentElement.outerHTML`)
	if id == "" || strings.Contains(page, value) || strings.Contains(page, "whsec_") {
		t.Fatalf("after the dialog closed: id %q, the page still holds the secret: %v", id, strings.Contains(page, value))
	}
	return id
}

// apiSecret is an item of GET /v1/tenants/{t}/secrets.
type apiSecret struct {
	ID        string  `json:"id"`
	CreatedAt string  `json:"created_at"`
	ExpiresAt *string `json:"expires_at"`
}

// apiSecrets lists tenant's live secrets by API, oldest first.
func apiSecrets(t *testing.T, c *cluster, p *proc, tenant string) []apiSecret {
	t.Helper()
	var out []apiSecret
	if st := c.call(p, http.MethodGet, "/v1/tenants/"+tenant+"/secrets", nil, &out); st != http.StatusOK {
		t.Fatalf("GET secrets of %s: %d", tenant, st)
	}
	return out
}

// pollCost logs and returns the throttler's CPU share (% of one core)
// while 20 pages poll as the console's do, one request a second each — 10
// overviews (GET /v1/summary), 10 tenant pages (GET /v1/tenants/alpha/live)
// — for d: a figure for docs/console.md, not a timed assertion.
func pollCost(t *testing.T, c *cluster, p *proc, d time.Duration) float64 {
	t.Helper()
	cpu0, ok := procstat.ProcessCPU(p.cmd.Process.Pid)
	if !ok {
		t.Fatal("cannot read the throttler's CPU time")
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 20 {
		path := "/v1/summary"
		if i%2 == 1 {
			path = "/v1/tenants/alpha/live"
		}
		wg.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for end := start.Add(d); time.Now().Before(end); <-tick.C {
				if st := c.call(p, http.MethodGet, path, nil, nil); st != http.StatusOK {
					t.Errorf("GET %s: %d", path, st)
				}
			}
		})
	}
	wg.Wait()
	cpu1, _ := procstat.ProcessCPU(p.cmd.Process.Pid)
	pct := 100 * (cpu1 - cpu0) / time.Since(start).Seconds()
	t.Logf("20 pages polling for %s: the throttler used %.2f CPU s, %.1f%% of one core", d, cpu1-cpu0, pct)
	return pct
}

// signIn opens the console in tab, signs in with key and waits for the
// overview.
func signIn(b *browser, ctx context.Context, p *proc, key string) {
	b.run(ctx, "sign in", chromedp.Navigate(p.url()+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`#signin-key`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-key`), key), chromedp.Click(chromedp.CSS(`#signin-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#totals`)))
}

// editPolicy opens tenant's page, opens the policy editor, replaces from by
// to in its text and saves.
func editPolicy(b *browser, ctx context.Context, p *proc, tenant, from, to string) {
	b.run(ctx, "edit policy", chromedp.Navigate(p.url()+"/ui/#/tenant/"+tenant), chromedp.WaitVisible(chromedp.CSS(`#policy-edit`)),
		chromedp.Click(chromedp.CSS(`#policy-edit`)), chromedp.WaitVisible(chromedp.CSS(`#policy-body`)))
	setPolicyText(b, ctx, from, to)
	b.run(ctx, "save", chromedp.Click(chromedp.CSS(`#policy-save`)))
}

// setPolicyText replaces from by to in the open policy editor.
func setPolicyText(b *browser, ctx context.Context, from, to string) {
	text := runIn(b, ctx, "read editor", chromedp.Value(chromedp.CSS(`#policy-body`)))
	if !strings.Contains(text, from) {
		b.t.Fatalf("the policy editor holds no %s: %s", from, text)
	}
	b.run(ctx, "write editor", chromedp.SetValue(chromedp.CSS(`#policy-body`), strings.Replace(text, from, to, 1)))
}

// requirePolicy checks tenant's policy version and rate in the API.
func requirePolicy(t *testing.T, c *cluster, p *proc, tenant string, version int64, rate string) {
	t.Helper()
	var v struct {
		Version int64 `json:"version"`
		Policy  struct {
			Rate any `json:"rate"`
		} `json:"policy"`
	}
	c.call(p, http.MethodGet, "/v1/tenants/"+tenant, nil, &v)
	if v.Version != version || fmt.Sprint(v.Policy.Rate) != rate {
		t.Fatalf("%s: version %d, rate %v; want %d, %s", tenant, v.Version, v.Policy.Rate, version, rate)
	}
}

// press clicks the element sel (waiting until it is visible) inside the
// page, in one step: the pages re-render every poll, and chromedp.Click's
// query-then-click can meet a node replaced in between ("Could not find
// node with given id").
func press(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, sel)),
	)
}

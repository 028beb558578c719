package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// listAll walks GET /v1/tenants with query q page by page, failing on a
// repeat; it returns the views in page order.
func (f *fixture) listAll(t *testing.T, token, q string) []map[string]any {
	t.Helper()
	var all []map[string]any
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		path := "/v1/tenants?limit=137&" + q
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := f.get(t, path, token)
		if r.status != http.StatusOK || pages > 100 {
			t.Fatalf("GET %s: %d %v", path, r.status, r.body)
		}
		items, _ := r.body["tenants"].([]any)
		if len(items) > 137 {
			t.Fatalf("a page of %d, limit 137", len(items))
		}
		for _, it := range items {
			v := it.(map[string]any)
			tn := v["tenant"].(string)
			if seen[tn] {
				t.Fatalf("%s: tenant %s listed twice", q, tn)
			}
			seen[tn] = true
			all = append(all, v)
		}
		next, _ := r.body["cursor"].(string)
		if next == "" {
			return all
		}
		cursor = next
	}
}

// 1 000 tenants made at run time are listed page by page, each once, in
// each sort's order; a key sees only the tenants its globs allow; the state
// filter selects; bad parameters are 400s.
func TestListTenants(t *testing.T) {
	t.Parallel()
	// A page reads every tenant: 1 000 of them under -race, beside the whole
	// suite on 2 cores, can take longer than the default 1s Redis budget.
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) { o.RequestTimeout = 10 * time.Second })
	ctx := context.Background()
	st := f.srv.opts.Store
	const n = 1000
	for i := range n {
		tn := fmt.Sprintf("acme-%04d", i)
		if i%10 == 0 {
			if err := st.Pause(ctx, tn, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		items := make([]store.Item, 1+i%5)
		for k := range items {
			items[k] = store.Item{Type: "webhook", Body: []byte(`{}`)}
		}
		if _, err := st.Enqueue(ctx, tn, items); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Enqueue(ctx, "globex", []store.Item{{Type: "webhook", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}

	byName := f.listAll(t, adminToken, "sort=name")
	if len(byName) != n+1 {
		t.Fatalf("%d tenants listed, want %d", len(byName), n+1)
	}
	for i, v := range byName[:n] {
		if want := fmt.Sprintf("acme-%04d", i); v["tenant"] != want || v["backlog"] != float64(1+i%5) {
			t.Fatalf("item %d: %v %v, want %s with backlog %d", i, v["tenant"], v["backlog"], want, 1+i%5)
		}
		if _, ok := v["drain_eta_s"]; !ok || v["oldest_job_age_s"] == nil {
			t.Fatalf("item %d has no forecast: %v", i, v)
		}
	}
	byBacklog := f.listAll(t, adminToken, "sort=backlog")
	for i := 1; i < len(byBacklog); i++ {
		if byBacklog[i]["backlog"].(float64) > byBacklog[i-1]["backlog"].(float64) {
			t.Fatalf("sort=backlog: item %d has a larger backlog than item %d", i, i-1)
		}
	}
	if len(byBacklog) != n+1 {
		t.Fatalf("sort=backlog listed %d", len(byBacklog))
	}
	// The tenants got their first jobs in name order, globex last: oldest
	// first is name order.
	byOldest := f.listAll(t, adminToken, "sort=oldest")
	if len(byOldest) != n+1 {
		t.Fatalf("sort=oldest listed %d", len(byOldest))
	}
	for i, v := range byOldest {
		if v["tenant"] != byName[i]["tenant"] {
			t.Fatalf("sort=oldest: item %d is %v, want %v", i, v["tenant"], byName[i]["tenant"])
		}
	}
	if got := f.listAll(t, producerToken, "sort=name"); len(got) != n || got[n-1]["tenant"] != "acme-0999" {
		t.Fatalf("the producer key (acme-*) sees %d tenants", len(got))
	}
	paused := f.listAll(t, adminToken, "state=paused")
	if len(paused) != n/10 {
		t.Fatalf("state=paused: %d, want %d", len(paused), n/10)
	}
	for _, v := range paused {
		if v["admin_paused"] != true || v["drain_eta_s"] != nil || v["draining"] != false {
			t.Fatalf("state=paused lists %v", v)
		}
	}
	if got := f.listAll(t, adminToken, "state=active"); len(got) != n+1-n/10 {
		t.Fatalf("state=active: %d", len(got))
	}
	prefixCursor := f.checkPrefix(t, n)
	first := f.get(t, "/v1/tenants?sort=name&limit=2", adminToken)
	nameCursor, _ := first.body["cursor"].(string)
	for _, q := range []string{"limit=0", "limit=501", "limit=x", "sort=size", "state=gone",
		"cursor=%25%25", "sort=backlog&cursor=" + url.QueryEscape(nameCursor),
		"prefix=a:b", "prefix=acme-*", "prefix=" + strings.Repeat("a", 129),
		"prefix=acme-02&cursor=" + url.QueryEscape(prefixCursor), "cursor=" + url.QueryEscape(prefixCursor)} {
		r := f.get(t, "/v1/tenants?"+q, adminToken)
		if e, _ := r.body["error"].(map[string]any); r.status != http.StatusBadRequest || e["code"] != CodeMalformed {
			t.Errorf("GET /v1/tenants?%s: %d %v, want 400 malformed", q, r.status, r.body)
		}
	}
	if r := f.get(t, "/v1/tenants", plainToken); r.status != http.StatusOK || len(r.body["tenants"].([]any)) != 0 {
		t.Errorf("a key with no tenant globs: %d %v, want an empty page", r.status, r.body)
	}
}

// checkPrefix checks prefix= on TestListTenants' n tenants acme-0000…:
// acme-01 selects the 100 tenants acme-0100 … acme-0199, paged 30 at a time
// by name, each once, in order; with a state filter and the other sorts
// too; a key sees only what its globs allow. It returns a cursor of the
// prefix acme-01.
func (f *fixture) checkPrefix(t *testing.T, n int) (cursor string) {
	t.Helper()
	var got []string
	for pages := 1; ; pages++ {
		path := "/v1/tenants?prefix=acme-01&limit=30"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := f.get(t, path, adminToken)
		items, _ := r.body["tenants"].([]any)
		if r.status != http.StatusOK || len(items) > 30 || pages > 4 {
			t.Fatalf("GET %s (page %d): %d, %d items", path, pages, r.status, len(items))
		}
		for _, it := range items {
			got = append(got, it.(map[string]any)["tenant"].(string))
		}
		next, _ := r.body["cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	var want []string
	for i := 100; i < 200 && i < n; i++ {
		want = append(want, fmt.Sprintf("acme-%04d", i))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("prefix=acme-01: %d tenants %v, want the %d of acme-0100 … acme-0199 in order", len(got), got, len(want))
	}
	for q, wantN := range map[string]int{
		"prefix=acme-01&state=paused": 10, "prefix=acme-01&sort=backlog": 100, "prefix=acme-01&sort=oldest": 100,
		"prefix=acme-0999": 1, "prefix=globex": 1, "prefix=acme-1": 0, "prefix=ACME": 0,
	} {
		items := f.listAll(t, adminToken, q)
		for _, v := range items {
			if p := strings.TrimPrefix(strings.Split(q, "&")[0], "prefix="); !strings.HasPrefix(v["tenant"].(string), p) {
				t.Fatalf("%s lists %v", q, v["tenant"])
			}
		}
		if len(items) != wantN {
			t.Fatalf("%s: %d tenants, want %d", q, len(items), wantN)
		}
	}
	if got := f.listAll(t, producerToken, "prefix=globex"); len(got) != 0 {
		t.Fatalf("the producer key (acme-*) sees %d globex tenants", len(got))
	}
	return cursor
}

// dead:replay is admin-only, refuses bad input with a 400 that replays
// nothing, and replays every letter once along its cursor.
func TestReplayDeadRoute(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	f.setPolicy(t, "acme-dead", store.Overrides{MaxAttempts: p64(1)})
	ids := f.deadJobs(t, "acme-dead", 5)
	path := "/v1/tenants/acme-dead/dead:replay"
	if r := f.post(t, path, producerToken, ``); r.status != http.StatusForbidden {
		t.Fatalf("producer key: %d", r.status)
	}
	for _, body := range []string{`{"limit":0}`, `{"limit":1001}`, `{"reason":"Bad!"}`, `{"before":"yesterday"}`,
		`{"cursor":"nope"}`} {
		if r := f.post(t, path, adminToken, body); r.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %v, want 400", body, r.status, r.body)
		}
	}
	if r := f.post(t, path, adminToken, `{"limit":"2"}`); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("a mistyped field: %d %v, want 422 as every body's", r.status, r.body)
	}
	if v := f.tenant(t, "acme-dead"); v["dead_letters"] != 5.0 || v["backlog"] != 0.0 {
		t.Fatalf("bad input changed the tenant: %v", v)
	}
	replayed, cursor := 0.0, ""
	for calls := 1; ; calls++ {
		body := `{"limit":2}`
		if cursor != "" {
			body = fmt.Sprintf(`{"limit":2,"cursor":%q}`, cursor)
		}
		r := f.post(t, path, adminToken, body)
		if r.status != http.StatusOK || r.body["replayed"].(float64) > 2 || calls > 3 {
			t.Fatalf("call %d: %d %v", calls, r.status, r.body)
		}
		replayed += r.body["replayed"].(float64)
		next, _ := r.body["cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if v := f.tenant(t, "acme-dead"); replayed != 5 || v["dead_letters"] != 0.0 || v["backlog"] != 5.0 {
		t.Fatalf("replayed %v; tenant %v", replayed, v)
	}
	for _, id := range ids {
		if r := f.get(t, "/v1/jobs/"+id, adminToken); r.body["state"] != "queued" {
			t.Fatalf("job %s: %v", id, r.body["state"])
		}
	}
	if r := f.post(t, path, adminToken, ``); r.status != http.StatusOK || r.body["replayed"] != 0.0 || r.body["cursor"] != nil {
		t.Fatalf("repeated: %d %v", r.status, r.body)
	}
}

// deadJobs makes n dead letters of tenant, one job at a time (killJob).
func (f *fixture) deadJobs(t *testing.T, tenant string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		requireAccepted(t, f.post(t, "/v1/tenants/"+tenant+"/jobs", adminToken, webhookJob), tenant, "queued")
		ids = append(ids, killJob(t, f.srv.opts.Store, store.ShardOf(tenant, f.srv.opts.Store.Shards())))
	}
	return ids
}

// Tenants written before the tenant index existed are not listed until the
// backfill adds them; then each is listed once, in every sort; a second
// backfill changes nothing.
func TestListTenantsAfterBackfill(t *testing.T) {
	t.Parallel()
	var rdb redis.UniversalClient
	var prefix string
	f := newStoreFixture(t, func(_ *Options, r redis.UniversalClient, p string) { rdb, prefix = r, p })
	ctx := context.Background()
	st := f.srv.opts.Store
	const n = 40
	for i := range n {
		if _, err := st.Enqueue(ctx, fmt.Sprintf("acme-%02d", i), []store.Item{{Type: "webhook", Body: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	for shard := range st.Shards() { // the keys of a release before the index
		base := fmt.Sprintf("%s:{s%d}:", prefix, shard)
		if err := rdb.Del(ctx, base+"tenants", base+"tenant_names", base+"tenants_backfilled").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.listAll(t, adminToken, "sort=name"); len(got) != 0 {
		t.Fatalf("%d tenants listed before the backfill", len(got))
	}
	for run, want := range []int{n, 0} {
		if added, err := st.BackfillTenantIndex(ctx); err != nil || added != want {
			t.Fatalf("backfill %d: added %d, %v; want %d", run, added, err, want)
		}
		for _, q := range []string{"sort=name", "sort=backlog", "sort=oldest", "state=active"} {
			got := f.listAll(t, adminToken, q)
			if len(got) != n {
				t.Fatalf("backfill %d, %s: %d tenants listed, want %d", run, q, len(got), n)
			}
			if q == "sort=name" && (got[0]["tenant"] != "acme-00" || got[n-1]["tenant"] != fmt.Sprintf("acme-%02d", n-1)) {
				t.Fatalf("backfill %d: %v … %v", run, got[0]["tenant"], got[n-1]["tenant"])
			}
		}
	}
}

// A drained tenant stays listed (issue #31's measurement: import a secret,
// deliver one webhook, list): a tenant with only secrets by API, and one
// whose only job was delivered and whose hash expired, are both listed
// until the delivered job's retention passes; then only the first is.
func TestListTenantsKeepsDrained(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)}
	var rdb redis.UniversalClient
	f := newStoreFixture(t, func(o *Options, r redis.UniversalClient, prefix string) {
		st, err := store.NewStore(r, store.Config{Prefix: prefix, Shards: 4, Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		o.Store, o.FileSigned, o.Secrets, rdb = st, nil, testKeyring(t, "k1"), r
	})
	st := f.srv.opts.Store
	f.createSecret(t, "acme-signed", `{}`)
	id := enqueueN(t, st, "acme-drained", 1)[0]
	deliverOne(t, st, clock, id, wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200})
	hash := strings.TrimSuffix(st.BacklogKey("acme-drained"), ":q")
	if err := rdb.Del(context.Background(), hash).Err(); err != nil { // as its expiry would
		t.Fatal(err)
	}
	names := func() (out []string) {
		for _, v := range f.listAll(t, adminToken, "sort=name") {
			out = append(out, v["tenant"].(string))
		}
		return out
	}
	if got := names(); fmt.Sprint(got) != "[acme-drained acme-signed]" {
		t.Fatalf("listed %q, want the drained and the signed tenant", got)
	}
	if v := f.tenant(t, "acme-drained"); v["backlog"] != 0.0 {
		t.Fatalf("drained tenant's view: %v", v)
	}
	clock.Advance(store.SucceededRetentionDefault + time.Second)
	shard, _ := store.ShardOfJobID(id)
	if _, err := st.Pass(context.Background(), shard, store.PassConfig{Lead: time.Second, MinLead: -1, Capacity: 0}); err != nil {
		t.Fatal(err)
	}
	if got := names(); fmt.Sprint(got) != "[acme-signed]" {
		t.Fatalf("after the retention: listed %q, want the signed tenant only", got)
	}
}

package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

func enqueueN(t *testing.T, st *store.Store, tenant string, n int) []string {
	t.Helper()
	items := make([]store.Item, n)
	for i := range items {
		items[i] = store.Item{Type: "webhook", Body: []byte(`{}`)}
	}
	rs, err := st.Enqueue(context.Background(), tenant, items)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, r := range rs {
		if r.Outcome != store.Accepted {
			t.Fatalf("enqueue %s: %+v", tenant, r)
		}
		ids[i] = r.ID
	}
	return ids
}

// The summary adds up the tenants a key may see, groups shards by owner,
// lists the tenants needing attention (paused, disabled, not draining),
// oldest job first, and serves one read to a key's polls until it expires.
func TestSummary(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, _ redis.UniversalClient, _ string) {
		o.SummaryCache = time.Hour
		o.ShardOwners = func(context.Context) ([]string, error) { return []string{"aa", "", "bb", "aa"}, nil }
	})
	ctx := context.Background()
	st := f.srv.opts.Store
	f.setPolicy(t, "acme-slow", store.Overrides{RateUS: p64(3_600_000_000)}) // 1/h: inflow outruns it
	enqueueN(t, st, "acme-slow", 3)
	enqueueN(t, st, "acme-fine", 2) // draining: not listed
	enqueueN(t, st, "acme-paused", 1)
	if err := st.Pause(ctx, "acme-paused", time.Time{}); err != nil {
		t.Fatal(err)
	}
	enqueueN(t, st, "globex", 4)

	r := f.get(t, "/v1/summary", producerToken)
	if r.status != http.StatusOK {
		t.Fatalf("summary: %d %v", r.status, r.body)
	}
	b := r.body
	if b["tenants"] != 3.0 || b["backlog"] != 6.0 || b["paused"] != 1.0 || b["disabled"] != 0.0 {
		t.Fatalf("producer's totals (acme-* only): %v", b)
	}
	var names []string
	for _, v := range b["attention"].([]any) {
		names = append(names, v.(map[string]any)["tenant"].(string))
	}
	if fmt.Sprint(names) != "[acme-slow acme-paused]" {
		t.Fatalf("attention %v, want [acme-slow acme-paused] (oldest job first)", names)
	}
	var busiest []string
	for _, v := range b["busiest"].([]any) {
		busiest = append(busiest, v.(map[string]any)["tenant"].(string))
	}
	if fmt.Sprint(busiest) != "[acme-slow acme-fine acme-paused]" {
		t.Fatalf("busiest %v, want the largest backlogs first", busiest)
	}
	if k := b["key"].(map[string]any); k["name"] != "producer" || k["admin"] != false || fmt.Sprint(k["tenants"]) != "[acme-*]" {
		t.Fatalf("key %v", k)
	}
	if got := fmt.Sprint(b["throttlers"], b["unowned_shards"]); got != "[map[id:aa shards:[0 3]] map[id:bb shards:[2]]] [1]" {
		t.Fatalf("throttlers, unowned: %s", got)
	}
	a := f.get(t, "/v1/summary", adminToken).body // a "*" key: from the shards' aggregates
	if a["tenants"] != 4.0 || a["backlog"] != 10.0 || a["paused"] != 1.0 || a["key"].(map[string]any)["admin"] != true {
		t.Fatalf("admin's totals (every tenant): %v", a)
	}
	names, busiest = nil, nil
	for _, v := range a["attention"].([]any) {
		names = append(names, v.(map[string]any)["tenant"].(string))
	}
	for _, v := range a["busiest"].([]any) {
		busiest = append(busiest, v.(map[string]any)["tenant"].(string))
	}
	if fmt.Sprint(names, busiest) != "[acme-slow acme-paused] [globex acme-slow acme-fine acme-paused]" {
		t.Fatalf("admin's attention %v, busiest %v", names, busiest)
	}

	enqueueN(t, st, "acme-fine", 5)
	again := f.get(t, "/v1/summary", producerToken).body
	if again["backlog"] != 6.0 || again["at"] != b["at"] {
		t.Fatalf("a poll within the cache time read again: %v", again)
	}
	if r := f.get(t, "/v1/summary", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("no key: %d", r.status)
	}
}

// The summary's deliveries per second are the jobs of every tenant that
// ended by an attempt (delivered or dead) over the 10 whole seconds before
// the read, whichever process finished them: here through two stores on
// one Redis, as two throttlers would; a retry is not one.
func TestSummaryDeliveries(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Date(2026, 11, 30, 12, 0, 10, 0, time.UTC)}
	var other *store.Store
	f := newStoreFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		var err error
		o.Store, err = store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4, Clock: clock.Now})
		if err == nil {
			other, err = store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4, Clock: clock.Now})
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	st := f.srv.opts.Store
	deliveries := func() any {
		t.Helper()
		f.srv.forgetSummaries() // every read computes: the caches run on the wall clock
		r := f.get(t, "/v1/summary", producerToken)
		if r.status != http.StatusOK {
			t.Fatalf("summary: %d %v", r.status, r.body)
		}
		return r.body["deliveries_per_s"]
	}
	if got := deliveries(); got != 0.0 {
		t.Fatalf("before any delivery: %v, want 0", got)
	}
	tenants := []string{"acme-1", "globex"} // globex: outside the producer key's globs, counted all the same
	ids := map[string][]string{}
	for _, tn := range tenants {
		f.setPolicy(t, tn, store.Overrides{RateUS: p64(1000), MaxAttempts: p64(3)})
		ids[tn] = enqueueN(t, st, tn, 4)
	}
	// Second 10: 5 jobs end (3 delivered, 1 dead, 1 delivered via the other
	// store); a retry does not end its job.
	for i, o := range []wire.AttemptOutcome{{Kind: wire.FinishSuccess, Status: 200}, {Kind: wire.FinishPermanent, Status: 400},
		{Kind: wire.FinishRetry, Status: 503}, {Kind: wire.FinishSuccess, Status: 204}} {
		deliverOne(t, st, clock, ids["acme-1"][i], o)
	}
	deliverOne(t, st, clock, ids["globex"][0], wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200})
	deliverOne(t, other, clock, ids["globex"][1], wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 200})
	if now := clock.Now(); now.Second() != 10 {
		t.Fatalf("the deliveries ran until %s, past second 10", now)
	}
	if got := deliveries(); got != 0.0 {
		t.Fatalf("during second 10: %v, want 0 (the current second is not counted)", got)
	}
	clock.Advance(time.Second)
	if got := deliveries(); got != 0.5 {
		t.Fatalf("at second 11: %v, want 0.5 (5 jobs in the last 10 s)", got)
	}
	clock.Advance(10 * time.Second) // second 21: second 10 left the window
	if got := deliveries(); got != 0.0 {
		t.Fatalf("at second 21: %v, want 0", got)
	}
}

// forgetSummaries drops the summary's base and every key's summary: the
// next GET /v1/summary reads anew.
func (s *Server) forgetSummaries() {
	s.summaries.mu.Lock()
	s.summaries.entries = nil
	s.summaries.mu.Unlock()
	s.bases.mu.Lock()
	s.bases.cur = nil
	s.bases.mu.Unlock()
}

// With warming on, nothing is read at Start: the first GET /v1/summary
// waits for a read. A base no longer fresh but younger than twice the warm
// period is served while the next is read in the background; an older one
// is not served: the request waits for a read. Stop is idempotent.
func TestSummaryWarm(t *testing.T) {
	t.Parallel()
	redisNow := &testClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	wall := &testClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	f := newStoreFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4, Clock: redisNow.Now})
		if err != nil {
			t.Fatal(err)
		}
		o.Store, o.SummaryCache, o.SummaryWarm = st, time.Second, time.Hour
	})
	f.srv.bases.now = wall.Now
	st := f.srv.opts.Store
	enqueueN(t, st, "acme-1", 2)
	if err := f.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer f.srv.Stop()
	f.srv.bases.mu.Lock()
	due, _ := f.srv.bases.warmDue()
	f.srv.bases.mu.Unlock()
	if due {
		t.Fatal("the warmer would read before any request")
	}
	summary := func() (backlog any, at any) {
		t.Helper()
		r := f.get(t, "/v1/summary", producerToken)
		if r.status != http.StatusOK {
			t.Fatalf("summary: %d %v", r.status, r.body)
		}
		return r.body["backlog"], r.body["at"]
	}
	warmAt := *timeString(redisNow.Now())
	if backlog, at := summary(); backlog != 2.0 || at != warmAt {
		t.Fatalf("first request: backlog %v at %v, want a read's 2 at %s", backlog, at, warmAt)
	}
	redisNow.Advance(time.Minute)
	enqueueN(t, st, "acme-1", 3)
	if backlog, at := summary(); backlog != 2.0 || at != warmAt {
		t.Fatalf("a fresh base: backlog %v at %v, want it served (2 at %s)", backlog, at, warmAt)
	}

	wall.Advance(2 * time.Second) // past fresh, within twice the warm period
	if backlog, at := summary(); backlog != 2.0 || at != warmAt {
		t.Fatalf("a base past fresh: backlog %v at %v, want it served (2 at %s) while the next is read", backlog, at, warmAt)
	}
	redistest.Poll(t, 10*time.Second, "the background read's backlog of 5", func() bool { backlog, _ := summary(); return backlog == 5.0 })

	wall.Advance(3 * time.Hour) // past twice the warm period: not served
	redisNow.Advance(time.Minute)
	enqueueN(t, st, "acme-1", 1)
	if backlog, at := summary(); backlog != 6.0 || at != *timeString(redisNow.Now()) {
		t.Fatalf("a base too old: backlog %v at %v, want a new read's 6 at %s", backlog, at, redisNow.Now())
	}
	f.srv.Stop()
	f.srv.Stop()
}

// A read of the summary's base that outlasts a request's Redis wait (a
// walk of 100 000 tenants does) is not cut there: the request is answered
// 503 unavailable, Retry-After 1, and the read goes on — the next poll
// finds its base. Cut at the request's timeout, as it was, every read
// failed and was started again, and the overview never loaded.
func TestSummaryReadOutlastsARequest(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		o.RequestTimeout = 200 * time.Millisecond
	})
	enqueueN(t, f.srv.opts.Store, "acme-1", 2)
	gate := make(chan struct{})
	var reads atomic.Int32
	read := f.srv.bases.read
	f.srv.bases.read = func(ctx context.Context) (*summaryBase, error) {
		reads.Add(1)
		<-gate // a walk longer than the request's 200 ms: the test opens it after the 503
		return read(ctx)
	}
	r := f.get(t, "/v1/summary", producerToken)
	errBody, _ := r.body["error"].(map[string]any)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || errBody["code"] != CodeUnavailable ||
		!strings.Contains(fmt.Sprint(errBody["message"]), "being read") {
		t.Fatalf("a request outlasted by the read: %d %v (Retry-After %q), want 503 unavailable, being read, Retry-After 1",
			r.status, r.body, r.header.Get("Retry-After"))
	}
	close(gate)
	redistest.Poll(t, 10*time.Second, "the read's base", func() bool {
		r = f.get(t, "/v1/summary", producerToken)
		return r.status == http.StatusOK
	})
	if r.body["backlog"] != 2.0 || reads.Load() != 1 {
		t.Fatalf("backlog %v after %d reads, want 2 from the one read the first request started", r.body["backlog"], reads.Load())
	}
}

// The warmer reads only while the summary was asked for within
// SummaryWarmIdle, each time the latest base turns the warm period old:
// nothing before the first request, and with every page closed it stops
// walking the tenants; a request starts it again.
func TestSummaryWarmOnlyWhileAsked(t *testing.T) {
	t.Parallel()
	wall := &testClock{t: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}
	reads := 0
	sb := &summaryBases{warm: time.Minute, fresh: time.Second, timeout: time.Minute, now: wall.Now,
		read: func(context.Context) (*summaryBase, error) { reads++; return &summaryBase{}, nil }}
	due := func(wantDue bool, wantWait time.Duration, what string) {
		t.Helper()
		sb.mu.Lock()
		d, wait := sb.warmDue()
		sb.mu.Unlock()
		if d != wantDue || wait != wantWait {
			t.Fatalf("%s: warmDue %v, %v; want %v, %v", what, d, wait, wantDue, wantWait)
		}
	}
	due(false, time.Minute, "no base, no request yet (Start)")
	sb.cur = &summaryBase{readAt: wall.Now()}
	due(false, time.Minute, "a base nobody asked for")
	wall.Advance(time.Hour)
	due(false, time.Minute, "an hour later, still nobody asked")

	if _, err := sb.get(context.Background()); err != nil { // a page: the base is too old, read anew
		t.Fatal(err)
	}
	if reads != 1 {
		t.Fatalf("the request read %d bases, want 1", reads)
	}
	due(false, time.Minute, "a new base, just asked for")
	wall.Advance(time.Minute)
	due(true, 0, "the base a warm period old, asked a minute ago")
	sb.cur.readAt = wall.Now() // the warmer's read
	wall.Advance(SummaryWarmIdle - time.Minute)
	due(true, 0, "asked SummaryWarmIdle ago")
	sb.cur.readAt = wall.Now()
	wall.Advance(time.Minute + time.Second)
	due(false, time.Minute, "asked longer than SummaryWarmIdle ago")
}

// A tenant's live series gains a point per read: the jobs that left the
// backlog per second between two reads (Redis time), with the rates; the
// tenant's recent attempts come with it.
func TestTenantLive(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Date(2026, 11, 30, 12, 0, 10, 0, time.UTC)}
	f := newStoreFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 4, Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		o.Store, o.LiveStep = st, time.Nanosecond
	})
	st := f.srv.opts.Store
	f.setPolicy(t, "acme-1", store.Overrides{RateUS: p64(250_000)}) // 4/s
	enqueueN(t, st, "acme-1", 1)
	first := f.get(t, "/v1/tenants/acme-1/live", producerToken)
	if first.status != http.StatusOK || len(first.body["points"].([]any)) != 0 {
		t.Fatalf("first read: %d %v, want no point yet", first.status, first.body)
	}
	clock.Advance(2 * time.Second)
	ids := enqueueN(t, st, "acme-1", 5)
	for _, id := range ids[:2] {
		if _, _, err := st.Cancel(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	r := f.get(t, "/v1/tenants/acme-1/live", producerToken)
	pts := r.body["points"].([]any)
	if len(pts) != 1 {
		t.Fatalf("second read: %v, want one point", r.body)
	}
	p := pts[0].(map[string]any)
	wantT := float64(clock.Now().UnixMilli())
	if p["t"] != wantT || p["delivered_per_s"] != 1.0 || p["backlog"] != 4.0 || p["rate"] != 4.0 || p["effective_rate"] != 4.0 {
		t.Fatalf("point %v, want t %v, 2 jobs left in 2s, backlog 4, rate 4/s", p, wantT)
	}
	if tv := r.body["tenant"].(map[string]any); tv["tenant"] != "acme-1" || tv["backlog"] != 4.0 {
		t.Fatalf("tenant view %v", tv)
	}
	since := fmt.Sprintf("/v1/tenants/acme-1/live?since=%d", int64(wantT))
	if r := f.get(t, since, producerToken); len(r.body["points"].([]any)) != 0 {
		t.Fatalf("since the last point: %v, want none", r.body)
	}
	if r := f.get(t, "/v1/tenants/globex/live", producerToken); r.status != http.StatusForbidden {
		t.Fatalf("a tenant outside the key's globs: %d", r.status)
	}
	if r := f.get(t, "/v1/tenants/acme-1/live?since=x", producerToken); r.status != http.StatusBadRequest {
		t.Fatalf("bad since: %d", r.status)
	}
	if ra, ok := r.body["recent_attempts"].([]any); !ok || len(ra) != 0 {
		t.Fatalf("recent attempts before any: %v, want []", r.body["recent_attempts"])
	}
	id, delivered := deliverOne(t, st, clock, ids[2], wire.AttemptOutcome{Kind: wire.FinishSuccess, Status: 204, Latency: 1500 * time.Microsecond})
	clock.Advance(time.Second)
	r = f.get(t, "/v1/tenants/acme-1/live", producerToken)
	ra := r.body["recent_attempts"].([]any)
	want := map[string]any{"job_id": id, "outcome": "success", "status": 204.0, "latency_ms": 1.5, "at": float64(delivered.UnixMilli())}
	if len(ra) != 1 || fmt.Sprint(ra[0]) != fmt.Sprint(want) {
		t.Fatalf("recent attempts %v, want [%v]", ra, want)
	}
}

// deliverOne releases, claims and finishes the first job due on the shard of
// job onShard with o, as a worker would, and returns its id and the finish's time.
func deliverOne(t *testing.T, st *store.Store, clock *testClock, onShard string, o wire.AttemptOutcome) (string, time.Time) {
	t.Helper()
	ctx := context.Background()
	shard, err := store.ShardOfJobID(onShard)
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Pass(ctx, shard, store.PassConfig{Lead: time.Second, MinLead: -1, Grace: time.Second, Capacity: 1})
	if err != nil || len(res.Released) != 1 {
		t.Fatalf("pass: %+v, %v; want a job released", res, err)
	}
	id := res.Released[0].ID
	if d := res.Released[0].Slot.Sub(clock.Now()); d > 0 {
		clock.Advance(d)
	}
	c, err := st.Claim(ctx, id, res.Released[0].Gen, 2*time.Millisecond)
	if err != nil || c.Outcome != store.ClaimOK {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if _, err := st.Finish(ctx, id, res.Released[0].Gen, o, store.FinishConfig{}); err != nil {
		t.Fatal(err)
	}
	return id, clock.Now()
}

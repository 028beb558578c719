// Command benchpacing measures pacing by quota headers (issue #32) side by
// side with pacing off, in one run: three stand-in upstreams on loopback
// that enforce a quota and report it in headers, answering 429 past it —
// X-RateLimit-* requests (100 per 10 s, answers taking 200 ms, Sluice at
// 50/s), OpenAI-shaped tokens (10 000 per minute, jobs of 50–500 tokens
// whose real cost the answer reports in a cost_header), GitHub-shaped
// (5 000 per hour, 300 left with 20 minutes to the reset) — each sent the
// same jobs at the same time three ways, each on its own stand-in: paced
// per tenant (the jobs' shared upstream with pause_scope tenant, the
// tenant's pacing: headers), paced per upstream (pause_scope upstream,
// the upstream's pacing: headers) and not paced (pacing: off on both). The
// store, dispatcher and worker run in this process on the Redis of -redis
// (use a private one). It prints one table: 429s, what was delivered as a
// share of the quota's capacity.
//
// -window-factor scales every quota window and count (and the jobs) by the
// same factor, so the quota's rate, the tenant's rate and the latency stay
// as in the issue; -github-factor does the same for the GitHub shape.
// Run it through scripts/bench-pacing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// scenario is one quota shape.
type scenario struct {
	name    string
	shape   string        // upstream.shape
	limit   int64         // per window
	window  time.Duration // the quota's window
	resetIn time.Duration // at the start: time to the first reset (0: a whole window)
	left    int64         // at the start: what is left of the first window (0: all)
	latency time.Duration
	rate    int64 // tenant rate, tokens per second
	burst   int64
	jobs    int
	tokens  [2]int64      // a job's token range (0: requests)
	until   time.Duration // stop measuring this long after the start (0: when all delivered)
}

// result is one run's figures.
type result struct {
	refused       int
	okUnits       int64
	capacityShare float64 // delivered in whole windows ÷ their capacity (NaN: none)
	firstHalf     float64 // GitHub: share of the delivered in the first half of the period
	elapsed       time.Duration
	done          int // requests answered 2xx
}

func main() {
	redisURL := flag.String("redis", "", "Redis URL (a private instance; never shared)")
	wf := flag.Float64("window-factor", 1, "scale of the request and token quotas' windows, counts and jobs")
	gf := flag.Float64("github-factor", 1, "scale of the GitHub shape's window, counts and reset")
	parts := flag.String("parts", "requests,tokens,github", "scenarios to run")
	flag.Parse()
	if *redisURL == "" {
		fmt.Fprintln(os.Stderr, "-redis is required")
		os.Exit(2)
	}
	opt, err := redis.ParseURL(*redisURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	scale := func(d time.Duration, f float64) time.Duration {
		return time.Duration(float64(d) * f).Round(time.Second)
	}
	count := func(n int64, f float64) int64 { return max(1, int64(math.Round(float64(n)*f))) }
	all := []scenario{
		{name: "requests 100/10s", shape: "x-ratelimit", limit: count(100, *wf), window: scale(10*time.Second, *wf),
			latency: 200 * time.Millisecond, rate: 50, burst: 1, jobs: int(count(2000, *wf))},
		{name: "tokens 10000/min", shape: "openai-tokens", limit: count(10_000, *wf), window: scale(time.Minute, *wf),
			latency: 200 * time.Millisecond, rate: 2000, burst: 500, jobs: int(count(150, *wf)), tokens: [2]int64{50, 500}},
		{name: "github 5000/h, 300 left, 20 min", shape: "github", limit: count(5000, *gf), window: scale(time.Hour, *gf),
			resetIn: scale(20*time.Minute, *gf), left: count(300, *gf), latency: 100 * time.Millisecond, rate: 10, burst: 1,
			jobs: int(count(450, *gf)), until: scale(20*time.Minute, *gf)},
	}
	fmt.Printf("window factor %g, github factor %g\n\n", *wf, *gf)
	fmt.Println("| quota | pacing | jobs | 429s | delivered (units) | of the quota's capacity | time |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|")
	for _, sc := range all {
		if !strings.Contains(","+*parts+",", ","+strings.Fields(sc.name)[0]+",") {
			continue
		}
		var wg sync.WaitGroup
		res := make([]result, len(modes))
		for i, m := range modes {
			wg.Go(func() { res[i] = run(rdb, sc, m) })
		}
		wg.Wait()
		for i, m := range modes {
			mode, r := m.name, res[i]
			share := "n/a"
			if !math.IsNaN(r.capacityShare) {
				share = fmt.Sprintf("%.1f %%", 100*r.capacityShare)
			}
			if sc.shape == "github" {
				share = fmt.Sprintf("%.1f %% of the %d left (%.0f %% of it in the first half)", 100*float64(r.okUnits)/float64(sc.left), sc.left, 100*r.firstHalf)
			}
			fmt.Printf("| %s | %s | %d | %d | %d | %s | %s |\n", sc.name, mode, sc.jobs, r.refused, r.okUnits, share, r.elapsed.Round(100*time.Millisecond))
		}
	}
}

// mode is one way of sending a scenario's jobs: who paces.
type mode struct {
	name   string
	tenant int64  // the tenant's pacing: 1 headers, 0 off
	scope  string // the upstream's pause_scope
	pacing string // the upstream's pacing
}

// modes are the three ways every scenario runs, side by side.
var modes = []mode{
	{name: "headers, per tenant", tenant: 1, scope: upstream.ScopeTenant, pacing: upstream.PacingHeaders},
	{name: "headers, per upstream", tenant: 1, scope: upstream.ScopeUpstream, pacing: upstream.PacingHeaders},
	{name: "off", tenant: 0, scope: upstream.ScopeUpstream, pacing: upstream.PacingOff},
}

// costHeader is the header the tokens stand-in reports a call's tokens in,
// the jobs' upstream's cost_header.
const costHeader = "X-Tokens-Used"

// run sends sc's jobs through a fresh Sluice (its own key prefix) to a
// fresh upstream, every job naming one shared upstream "api" configured as
// m says (its rate and burst the tenant's, cost_header costHeader), the
// tenant's pacing m.tenant.
func run(rdb *redis.Client, sc scenario, m mode) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefix := fmt.Sprintf("bp%d-%d", time.Now().UnixNano(), rand.Int64())
	now := time.Now()
	start := now.Truncate(sc.window)
	var used int64
	if sc.resetIn > 0 {
		start = now.Add(sc.resetIn).Truncate(time.Second).Add(-sc.window)
		used = sc.limit - sc.left
	}
	up := newUpstream(sc.shape, sc.limit, sc.window, sc.latency, start, used)
	defer up.srv.Close()

	st := configure(ctx, rdb, prefix, sc, m)
	enqueue(ctx, st, up.srv.URL, sc)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := dispatch.New(dispatch.Config{Store: st, Asynq: asynq.NewClientFromRedisClient(rdb), Redis: rdb, Prefix: prefix,
		Registerer: prometheus.NewRegistry(), Logger: logger})
	check(err)
	check(d.Start(ctx))
	defer d.Stop()
	client := webhook.NewClient(webhook.ClientConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	ups := worker.NewUpstreamCache(st)
	costs, err := worker.NewCostReader(ups, nil, logger)
	check(err)
	w, err := worker.New(worker.Config{Store: st, Redis: rdb, Executor: &worker.WebhookExecutor{Client: client, Costs: costs},
		Prefix: prefix, Concurrency: 50, Registerer: prometheus.NewRegistry(), Logger: logger,
		Upstreams: st, UpstreamRates: st, UpstreamCache: ups})
	check(err)
	check(w.Start(ctx))
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 50, TaskCheckInterval: worker.TaskCheckIntervalDefault,
		Queues: w.Queues(), ShutdownTimeout: 2 * time.Second, LogLevel: asynq.FatalLevel})
	check(srv.Start(w))
	defer func() {
		srv.Shutdown()
		w.Stop()
	}()

	began := time.Now()
	deadline := began.Add(30 * time.Minute)
	if sc.until > 0 {
		deadline = start.Add(sc.window) // the reset
	}
	for time.Now().Before(deadline) {
		if ok := countOK(up.snapshot()); ok >= sc.jobs {
			break
		}
		time.Sleep(100 * time.Millisecond) // the bench polls its upstream's count
	}
	return measure(up.snapshot(), sc, start, began, deadline)
}

// configure makes a store under prefix with the tenant "acme" and the
// upstream "api" as sc and m say.
func configure(ctx context.Context, rdb *redis.Client, prefix string, sc scenario, m mode) *store.Store {
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 1})
	check(err)
	_, err = st.PutTenantPolicy(ctx, "acme", store.Overrides{RateUS: ptr(1_000_000 / sc.rate), Burst: ptr(sc.burst),
		Concurrency: ptr(20), AdmitUS: ptr(1), AdmitBurst: ptr(1_000_000), Unsigned: ptr(1), Pacing: ptr(m.tenant)}, 0)
	check(err)
	_, err = st.PutUpstream(ctx, "api", upstream.Config{Rate: bucket.Rate{Tokens: sc.rate, Per: time.Second}, Burst: sc.burst,
		PauseScope: m.scope, Pacing: m.pacing, CostHeader: costHeader}, quota.SourceAPI, "")
	check(err)
	return st
}

// measure turns the upstream's arrivals into a result.
func measure(got []arrival, sc scenario, start, began, deadline time.Time) result {
	r := result{capacityShare: math.NaN()}
	var first, last time.Time
	for _, a := range got {
		if sc.until > 0 && !a.at.Before(deadline) {
			continue
		}
		if !a.ok {
			r.refused++
			continue
		}
		r.done++
		r.okUnits += a.units
		if first.IsZero() || a.at.Before(first) {
			first = a.at
		}
		if a.at.After(last) {
			last = a.at
		}
	}
	r.elapsed = last.Sub(began)
	if sc.until > 0 {
		half := began.Add(deadline.Sub(began) / 2)
		var early int64
		for _, a := range got {
			if a.ok && a.at.Before(half) {
				early += a.units
			}
		}
		if r.okUnits > 0 {
			r.firstHalf = float64(early) / float64(r.okUnits)
		}
		return r
	}
	// Whole windows strictly between the first and the last delivery.
	k0 := int64(math.Ceil(float64(first.Sub(start)) / float64(sc.window)))
	k1 := int64(math.Floor(float64(last.Sub(start)) / float64(sc.window)))
	if k1 > k0 {
		from, to := start.Add(time.Duration(k0)*sc.window), start.Add(time.Duration(k1)*sc.window)
		var in int64
		for _, a := range got {
			if a.ok && !a.at.Before(from) && a.at.Before(to) {
				in += a.units
			}
		}
		r.capacityShare = float64(in) / float64(sc.limit*(k1-k0))
	}
	return r
}

func countOK(got []arrival) int {
	n := 0
	for _, a := range got {
		if a.ok {
			n++
		}
	}
	return n
}

// enqueue adds sc's jobs for tenant acme, posting to url, each naming the
// upstream "api"; a tokens job carries its tokens in its data, and
// reserves them rounded up to the next 100 (an upper estimate, as a
// max_tokens is): the answer's cost_header corrects it to the tokens.
func enqueue(ctx context.Context, st *store.Store, url string, sc scenario) {
	rng := rand.New(rand.NewPCG(32, 1))
	items := make([]store.Item, 0, 250)
	flush := func() {
		rs, err := st.Enqueue(ctx, "acme", items)
		check(err)
		for _, r := range rs {
			if r.Outcome != store.Accepted {
				check(fmt.Errorf("enqueue: %+v", r))
			}
		}
		items = items[:0]
	}
	for range sc.jobs {
		tokens := int64(1)
		if sc.tokens[1] > 0 {
			tokens = sc.tokens[0] + rng.Int64N(sc.tokens[1]-sc.tokens[0]+1)
		}
		data, _ := json.Marshal(map[string]int64{"tokens": tokens})
		spec := job.Spec{Type: wire.TypeWebhook, URL: url + "/v1/call", Event: "bench.call", Payload: data}
		reserve := tokens
		if sc.tokens[1] > 0 {
			reserve = (tokens + 99) / 100 * 100
		}
		items = append(items, store.Item{Type: wire.TypeWebhook, Body: spec.Canonical(), Cost: reserve, Upstreams: []string{"api"}})
		if len(items) == cap(items) {
			flush()
		}
	}
	if len(items) > 0 {
		flush()
	}
}

func ptr(v int64) *int64 { return &v }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchpacing:", err)
		os.Exit(1)
	}
}

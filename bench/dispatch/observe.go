package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Issue 33's bounds on what observing a deployment costs Redis, whatever
// its tenant count: a Prometheus scrape every 15 s, the console's overview
// open and GET /v1/summary each second, together.
const (
	observeCmdTarget = 1000 // Redis commands per second
	observeCPUTarget = 0.05 // of one Redis core
)

// observeFirstWait bounds the wait for the first summary after the jobs
// are stored (a release that walks every tenant answers 503 meanwhile).
const observeFirstWait = 5 * time.Minute

// observeRun is one observation measurement: Redis's commands and CPU
// over a window with the throttler alone (idle), then over one as long
// with the observers polling.
type observeRun struct {
	tenants         int
	idle, observed  redisStats
	window          time.Duration
	scrapes, polls  int
	failed          []string
	cpu             cpuShares
	seedTook, first time.Duration // storing the jobs; the first summary after them
}

// perSecond is the observers' own Redis commands per second and Redis
// CPU in cores: the observed window less the idle one.
func (r observeRun) perSecond() (cmds, cores float64) {
	s := r.window.Seconds()
	return float64(r.observed.calls-r.idle.calls) / s, (r.observed.cpu - r.idle.cpu) / s
}

// observe is the observe part: -observe-tenants tenants with one job each
// in their backlog (stored through the Store, delayed a day), a throttler
// and no worker, Redis counted over a window of the throttler alone; then
// the first summary (retried after a 503, as the console does: a release
// that walks every tenant answers so until its walk ends) and Redis
// counted over as long a window while
// observers poll as an operator's tools do — /metrics every
// -observe-scrape, and GET /v1/summary every -observe-poll twice (the
// console's overview and an API client, one admin key: the second is
// answered from the first's read, as two pages are). The observers' cost
// is the difference, against issue 33's bounds.
func observe(ctx context.Context, e *env, t *table) error {
	const part = "observe"
	r, err := observeOne(ctx, e)
	t.row(part, fmt.Sprintf("%d tenants × 1 job (delayed 1 day); /metrics every %s, GET /v1/summary every %s × 2 (overview + client), a %s window",
		e.o.obsTenants, e.o.obsScrape, e.o.obsPoll, e.o.obsWindow), "Sluice", "", "", "", "")
	if err != nil {
		t.gap()
		return err
	}
	cmds, cores := r.perSecond()
	t.row(part, "observers' Redis commands/s (observed − idle window)", fmt.Sprintf("%.0f", cmds), "", "",
		fmt.Sprintf("≤ %d", observeCmdTarget), yes(cmds <= observeCmdTarget && len(r.failed) == 0))
	t.row(part, "observers' Redis CPU, % of one core", fmt.Sprintf("%.2f", 100*cores), "", "",
		fmt.Sprintf("≤ %.0f", 100*observeCPUTarget), yes(cores <= observeCPUTarget && len(r.failed) == 0))
	s := r.window.Seconds()
	t.row(part, "Redis commands/s, throttler alone; with the observers", fmt.Sprintf("%.0f; %.0f",
		float64(r.idle.calls)/s, float64(r.observed.calls)/s), "", "", "", "")
	t.row(part, "scrapes; summary polls answered 200 in the window", fmt.Sprintf("%d; %d", r.scrapes, r.polls), "", "", "", "")
	t.row(part, "CPU, % of one core, observed window", r.cpu.format(cpuNames...), "", "", "", "")
	t.row(part, "jobs stored in; the first summary after them", fmt.Sprintf("%s; %s", r.seedTook.Round(time.Millisecond),
		r.first.Round(time.Millisecond)), "", "", "", "")
	t.gap()
	d := r.observed.sub(r.idle)
	t.note("observe: the observers' Redis commands/s by command:%s", d.perSecond(8, r.window))
	t.note("observe: the throttler alone, Redis commands/s by command:%s", r.idle.perSecond(8, r.window))
	if len(r.failed) > 0 {
		t.note("observe: failed polls: %s", strings.Join(r.failed[:min(len(r.failed), 5)], "; "))
	}
	return nil
}

func observeOne(ctx context.Context, e *env) (observeRun, error) {
	r := observeRun{tenants: e.o.obsTenants, window: e.o.obsWindow}
	sl, err := e.startSluice(ctx, setup{name: "observe", defaultRate: "1/s", defaultConc: 1, workerConc: 1})
	if err != nil {
		return r, err
	}
	defer sl.stop()
	items, err := e.storeItems("observe", 1)
	if err != nil {
		return r, err
	}
	// Delayed a day: in every backlog, never due in the run, so the
	// throttler stays idle (a due backlog without workers keeps the
	// dispatcher reading its budget, thousands of commands a second, which
	// would drown the observers' few hundred).
	items[0].Delay = 24 * time.Hour
	names := make([]string, e.o.obsTenants)
	for i := range names {
		names[i] = fmt.Sprintf("o%07d", i)
	}
	start := time.Now()
	if err := e.enqueueStore(ctx, names, items, 32); err != nil {
		return r, err
	}
	r.seedTook = time.Since(start)
	before, err := e.redisStats(ctx)
	if err != nil {
		return r, err
	}
	if err := sleepCtx(ctx, r.window); err != nil {
		return r, err
	}
	mid, err := e.redisStats(ctx)
	if err != nil {
		return r, err
	}
	r.idle = mid.sub(before)
	if r.first, err = firstSummary(ctx, sl); err != nil {
		return r, err
	}
	if mid, err = e.redisStats(ctx); err != nil {
		return r, err
	}
	meter := e.cpuMeter(ctx, sl)
	r.scrapes, r.polls, r.failed = pollObservers(ctx, e, sl)
	end, err := e.redisStats(ctx)
	r.cpu = meter.stop()
	if err != nil {
		return r, err
	}
	r.observed = end.sub(mid)
	return r, nil
}

// firstSummary waits for the first 200 of GET /v1/summary, as the
// console's overview does (again a second after a 503), and returns how
// long it took.
func firstSummary(ctx context.Context, sl *sluice) (time.Duration, error) {
	start := time.Now()
	for {
		code, body, err := sl.call(ctx, http.MethodGet, "/v1/summary", nil)
		if err == nil && code == http.StatusOK {
			return time.Since(start), nil
		}
		if code != http.StatusServiceUnavailable || time.Since(start) > observeFirstWait {
			return 0, fmt.Errorf("first summary after %s: %d %s %v", time.Since(start).Round(time.Second), code, snippet(body), err)
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return 0, err
		}
	}
}

// pollObservers runs the observers for the window: a /metrics scrape every
// obsScrape (the first at once), two GET /v1/summary every obsPoll. It
// returns the scrapes and the summaries answered 200, and what failed.
func pollObservers(ctx context.Context, e *env, sl *sluice) (scrapes, polls int, failed []string) {
	ctx, cancel := context.WithTimeout(ctx, e.o.obsWindow)
	defer cancel()
	var mu sync.Mutex
	fail := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		failed = append(failed, s)
	}
	var wg sync.WaitGroup
	every := func(d time.Duration, f func()) {
		wg.Go(func() {
			tick := time.NewTicker(d)
			defer tick.Stop()
			for {
				f()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	every(e.o.obsScrape, func() {
		if l := sl.scrape(ctx, sl.api+"/metrics", []string{"sluice_tenant_backlog_jobs{"}); len(l) > 0 && ctx.Err() == nil {
			mu.Lock()
			scrapes++
			mu.Unlock()
		} else if ctx.Err() == nil {
			fail("a /metrics scrape had no tenant series")
		}
	})
	for range 2 {
		every(e.o.obsPoll, func() {
			code, body, err := sl.call(ctx, http.MethodGet, "/v1/summary", nil)
			switch {
			case ctx.Err() != nil:
			case err != nil || code != http.StatusOK:
				fail(fmt.Sprintf("summary: %d %s %v", code, snippet(body), err))
			default:
				mu.Lock()
				polls++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return scrapes, polls, failed
}

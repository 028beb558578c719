package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// counters are a few of the throttler's and the worker's Prometheus
// counters, by series ("sluice_worker_claims_total{outcome=\"ok\"}"), read
// at one instant.
type counters struct {
	at time.Time
	v  map[string]float64
}

// counters reads the dispatcher's passes, their durations and releases and
// the worker's claim outcomes and latencies.
func (sl *sluice) counters(ctx context.Context) counters {
	c := counters{at: time.Now(), v: map[string]float64{}}
	names := []string{"sluice_dispatch_passes_total", "sluice_dispatch_released_total", "sluice_worker_claims_total",
		"sluice_worker_send_lateness_seconds_sum", "sluice_worker_send_lateness_seconds_count",
		"sluice_worker_send_delay_seconds_bucket", "sluice_worker_send_delay_seconds_count",
		"sluice_worker_delivery_seconds_sum", "sluice_worker_delivery_seconds_count",
		"sluice_dispatch_pass_seconds_sum", "sluice_dispatch_pass_seconds_count",
		"sluice_worker_finish_seconds_sum", "sluice_worker_finish_seconds_count", handoffMetric}
	for _, base := range []string{sl.api, sl.metrics} {
		if base == "" {
			continue
		}
		for _, l := range sl.scrape(ctx, base+"/metrics", names) {
			i := strings.LastIndexByte(l, ' ')
			if i < 0 {
				continue
			}
			if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
				c.v[l[:i]] = v
			}
		}
	}
	return c
}

// awaitTenantSeries scrapes the throttler's /metrics until it has tenant
// series: its first read of the tenants has ended.
func (sl *sluice) awaitTenantSeries(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		for _, l := range sl.scrape(ctx, sl.api+"/metrics", []string{"sluice_tenant_backlog_jobs{"}) {
			if strings.HasPrefix(l, "sluice_tenant_backlog_jobs{") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the throttler's /metrics had no tenant series within %s (%w)", bound, errTimeout)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// delta is series k's growth from b to c.
func (c counters) delta(b counters, k string) float64 { return c.v[k] - b.v[k] }

// since describes what happened between b and c: dispatcher passes per
// second, and the worker's claim outcomes.
func (c counters) since(b counters) string {
	d := c.at.Sub(b.at).Seconds()
	delta := func(k string) float64 { return c.delta(b, k) }
	var parts []string
	if d > 0 {
		parts = append(parts, fmt.Sprintf("%.0f passes/s", delta("sluice_dispatch_passes_total")/d))
	}
	parts = append(parts, fmt.Sprintf("released %.0f", delta(`sluice_dispatch_released_total{type="webhook"}`)))
	var claims []string
	for _, o := range []string{"ok", "early", "reslotted", "returned", "stale", "canceled", "error", "other"} {
		if n := delta(`sluice_worker_claims_total{outcome="` + o + `"}`); n > 0 {
			claims = append(claims, fmt.Sprintf("%s %.0f", o, n))
		}
	}
	if len(claims) > 0 {
		parts = append(parts, "claims "+strings.Join(claims, ", "))
	}
	// Where a job's time goes: from its slot to the send (mostly the wait
	// in asynq for a fetcher when the workers are the bottleneck), and the
	// request itself.
	mean := func(name, labels string) (float64, bool) {
		n := delta(name + "_count" + labels)
		return delta(name+"_sum"+labels) / n * 1000, n > 0
	}
	if ms, ok := mean("sluice_worker_send_lateness_seconds", ""); ok {
		parts = append(parts, fmt.Sprintf("slot → send mean %.1f ms", ms))
	}
	if ms, ok := mean("sluice_worker_delivery_seconds", `{kind="success"}`); ok {
		parts = append(parts, fmt.Sprintf("request mean %.2f ms", ms))
	}
	// A job's lease lasts through its pass (the script and the hand-off of
	// its batch) and its finish: Redis's latency, which grows as it gets busy.
	if ms, ok := mean("sluice_dispatch_pass_seconds", ""); ok {
		parts = append(parts, fmt.Sprintf("pass mean %.1f ms", ms))
	}
	if ms, ok := mean("sluice_worker_finish_seconds", ""); ok {
		parts = append(parts, fmt.Sprintf("finish mean %.1f ms", ms))
	}
	return strings.Join(parts, "; ")
}

// lateSends describes the worker's own lateness between b and c (send −
// the send time the dispatcher set, the schedule's carried lateness
// included): how many sends it made more than 1, 2 and 5 ms after it (the
// histogram's buckets). Only for runs whose jobs are released ahead of
// their slots (precision): a job due at once is "late" by its queueing.
func (c counters) lateSends(b counters) string {
	n := c.delta(b, "sluice_worker_send_delay_seconds_count")
	if n <= 0 {
		return ""
	}
	var over []string
	for _, le := range []string{"0.001", "0.002", "0.005"} {
		over = append(over, fmt.Sprintf("%.0f", n-c.delta(b, `sluice_worker_send_delay_seconds_bucket{le="`+le+`"}`)))
	}
	return fmt.Sprintf("worker late by > 1 / 2 / 5 ms: %s of %.0f sends", strings.Join(over, " / "), n)
}

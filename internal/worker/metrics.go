package worker

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// metrics are the worker's Prometheus series; every label set is bounded.
type metrics struct {
	claims       *prometheus.CounterVec   // by outcome
	attempts     *prometheus.CounterVec   // by finish kind
	delivery     *prometheus.HistogramVec // request latency by finish kind
	dead         prometheus.Counter
	lateness     prometheus.Histogram
	sendDelay    prometheus.Histogram
	waiting      prometheus.Gauge
	finishErrors prometheus.Counter
	finish       prometheus.Histogram // a finish's duration (Worker.finish)
	rtt          prometheus.Gauge
	batchJobs    prometheus.Histogram // jobs per batch task
	// upstreamLeases counts the jobs that needed an upstream's concurrency
	// lease, by outcome (upstreamrun.go).
	upstreamLeases *prometheus.CounterVec

	// The series every delivered job touches, looked up once (a lookup by
	// label value hashes it each time): claims' "preclaimed", and attempts'
	// and delivery's child by kind (index kindIndex), delivery's made at
	// its kind's first attempt as WithLabelValues made it.
	preclaimed prometheus.Counter
	byKind     [len(attemptKinds)]atomic.Pointer[kindSeries]
}

// kindSeries are the series of one finish kind.
type kindSeries struct {
	attempts prometheus.Counter
	delivery prometheus.Observer
}

// attempt counts an attempt of outcome kind k and its latency.
func (m *metrics) attempt(k wire.FinishKind, latency time.Duration) {
	i := kindIndex(k)
	ks := m.byKind[i].Load()
	if ks == nil {
		ks = &kindSeries{attempts: m.attempts.WithLabelValues(attemptKinds[i]), delivery: m.delivery.WithLabelValues(attemptKinds[i])}
		m.byKind[i].Store(ks) // a racing first attempt stores the same children
	}
	ks.attempts.Inc()
	ks.delivery.Observe(latency.Seconds())
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_worker_claims_total",
			Help: "Claim replies by outcome: ok, early, stale, canceled, returned, error; and lapsed: a release not claimed, its send time + grace passed (the sweep returns it); preclaimed: a job the pass claimed, sent without a claim; unconfirmed: a job the pass claimed, dropped unsent while this worker's calls to Redis failed and Store.Confirm did not find it running at its gen.",
		}, []string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_worker_attempts_total",
			Help: "Attempts executed, by finish kind: success, retry, throttled, permanent, gone; deferred: not sent, the destination's circuit is open.",
		}, []string{"kind"}),
		delivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_worker_delivery_seconds",
			Help:    "Delivery latency (request sent → response read or failure), by finish kind.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"kind"}),
		dead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_worker_dead_letters_total",
			Help: "Jobs this worker's finishes moved to a dead set (permanent failure or retries exhausted).",
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_worker_send_lateness_seconds",
			Help: "Send time minus slot, on the worker's estimate of Redis's clock (negative: early, within the claim tolerance).",
			Buckets: []float64{-.002, -.001, -.0005, -.0002, 0, .0002, .0005, .001, .002, .005, .01, .025, .05, .1, .5,
				1},
		}),
		sendDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_worker_send_delay_seconds",
			Help: "Send time minus the send time the dispatcher set (the slot plus the lateness the tenant's " +
				"send schedule carried at the release): how late the worker itself was.",
			Buckets: []float64{-.002, -.001, -.0005, -.0002, 0, .0002, .0005, .001, .002, .005, .01, .025, .05, .1, .5,
				1},
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_worker_waiting",
			Help: "Released jobs waiting for their slot in worker goroutines (each holds one unit of concurrency).",
		}),
		finishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_worker_finish_errors_total",
			Help: "Finishes that failed, after trying again for up to 5s (the sweep sends those jobs again).",
		}),
		finish: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_worker_finish_seconds",
			Help: "Duration of a finish, from the attempt's end to Redis's answer: the wait for its shard's coalesced call " +
				"and that call, tries again included. A job's lease lasts through it: when Redis is busy it grows first.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}),
		rtt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_worker_redis_rtt_seconds",
			Help: "Median Redis round-trip time of the last clock measurement.",
		}),
		batchJobs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_worker_batch_jobs",
			Help:    "Jobs per batch task received.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
		}),
		upstreamLeases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_worker_upstream_leases_total",
			Help: "Jobs that needed upstream concurrency leases, by outcome: held (at once), waited (held after waiting), given_back (back to their lane unsent).",
		}, []string{"outcome"}),
	}
	for _, o := range []string{leaseHeld, leaseWaited, leaseGivenBack} {
		m.upstreamLeases.WithLabelValues(o)
	}
	// Every bounded label value exists from the start at 0, so a rate over
	// it (a dashboard panel, an alert) has series before the first event.
	for _, o := range claimOutcomes {
		m.claims.WithLabelValues(o)
	}
	for _, k := range attemptKinds {
		m.attempts.WithLabelValues(k)
	}
	m.preclaimed = m.claims.WithLabelValues("preclaimed")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.claims, m.attempts, m.delivery, m.dead, m.lateness, m.sendDelay, m.waiting, m.finishErrors, m.finish, m.rtt,
		m.batchJobs, m.upstreamLeases} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register worker metrics: %w", err)
		}
	}
	return m, nil
}

// The label values of sluice_worker_claims_total and
// sluice_worker_attempts_total: what outcomeLabel and kindLabel return, the
// claims' "error" and "lapsed".
var (
	claimOutcomes = []string{"ok", "early", "stale", "canceled", "returned", "error", "lapsed", "preclaimed", "unconfirmed", "other"}
	// attemptKinds are in wire.FinishKind's order, from FinishSuccess to
	// FinishDeferred (kindIndex), then "other".
	attemptKinds = [...]string{"success", "retry", "throttled", "permanent", "gone", "deferred", "other"}
)

func outcomeLabel(o store.ClaimOutcome) string {
	switch o {
	case store.ClaimOK:
		return "ok"
	case store.ClaimEarly:
		return "early"
	case store.ClaimStale:
		return "stale"
	case store.ClaimCanceled:
		return "canceled"
	case store.ClaimReturned:
		return "returned"
	}
	return "other"
}

// kindIndex is k's label's index in attemptKinds: its place among the
// kinds, "other" (the last) for a kind that is none of them.
func kindIndex(k wire.FinishKind) int {
	if k >= wire.FinishSuccess && k <= wire.FinishDeferred {
		return int(k - wire.FinishSuccess)
	}
	return len(attemptKinds) - 1
}

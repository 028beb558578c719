package dispatch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/wire"
)

// metrics are the dispatcher's Prometheus series. Label sets are bounded:
// the job type is one of webhook, http, task, other.
type metrics struct {
	released      *prometheus.CounterVec // by job type
	passes        prometheus.Counter
	passSeconds   prometheus.Histogram
	enqueueErrors prometheus.Counter
	passErrors    prometheus.Counter
	promoted      prometheus.Counter
	swept         prometheus.Counter
	owned         prometheus.Gauge
	shards        prometheus.Gauge // the deployment's shard count, for "shards unheld"
	unserved      prometheus.Counter
	resubscribed  prometheus.Counter
	// By queue: the hand-off queues (wire.HandoffQueueNames), and "task"
	// for task jobs (one task each, on the producers' queues).
	handoffJobs     *prometheus.CounterVec
	handoffBatches  *prometheus.CounterVec
	archivedTrimmed prometheus.Counter
	fairShare       prometheus.Gauge // λ of the last pass (fairshare.go)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_dispatch_released_total",
			Help: "Jobs released by dispatcher passes and handed to asynq, by job type.",
		}, []string{"type"}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dispatch_passes_total",
			Help: "Dispatcher passes run (one script call on one shard each).",
		}),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_dispatch_pass_seconds",
			Help:    "Duration of one pass: the script plus the hand-off of its releases to asynq.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		enqueueErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dispatch_enqueue_errors_total",
			Help: "Hand-offs that failed: a batch or task job asynq did not take (the sweep returns its jobs after their grace), or a hand-off announcement.",
		}),
		passErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dispatch_pass_errors_total",
			Help: "Passes, lease or capacity look-ups that failed (Redis unavailable, script error).",
		}),
		promoted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dispatch_promoted_total",
			Help: "Delayed jobs (scheduled or retrying) promoted to a backlog by passes.",
		}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dispatch_swept_total",
			Help: "Expired leases handled by passes.",
		}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_dispatch_shards_owned",
			Help: "Shards whose lease this dispatcher holds.",
		}),
		shards: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_dispatch_shards",
			Help: "The deployment's shard count (redis.shards): sum(sluice_dispatch_shards_owned) below it means shards nobody dispatches.",
		}),
		unserved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dispatch_unserved_task_releases_total",
			Help: "Released task jobs not handed to asynq because no live middleware serves their queue " +
				"(the sweep returns them after their grace; nothing piles up in the queue).",
		}),
		resubscribed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dispatch_wake_resubscriptions_total",
			Help: "Times the wake-up subscription was restored after a lost connection (every shard is then passed at once).",
		}),
		handoffJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_dispatch_handoff_jobs_total",
			Help: "Released jobs asynq took, by hand-off queue (\"task\": task jobs, on their producers' queues).",
		}, []string{"queue"}),
		handoffBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_dispatch_handoff_batches_total",
			Help: "asynq tasks the hand-off enqueued, by hand-off queue (\"task\": task jobs, one task each).",
		}, []string{"queue"}),
		archivedTrimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_dispatch_archived_tasks_trimmed_total",
			Help: "Archived hand-off tasks (a batch that outlived its timeout or its worker) deleted after the dead-letter retention.",
		}),
		fairShare: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_dispatch_fair_share",
			Help: "Worker slots per unit of tenant weight the last pass was given while the pool was contended (a tenant holds at most max(1, ⌊weight × this⌋)); 0: not contended, no fair-share cap.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.released, m.passes, m.passSeconds, m.enqueueErrors, m.passErrors, m.promoted, m.swept, m.owned, m.shards, m.unserved, m.resubscribed, m.handoffJobs, m.handoffBatches,
		m.archivedTrimmed, m.fairShare} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register dispatcher metrics: %w", err)
		}
	}
	return m, nil
}

// typeLabel bounds the released counter's label to known job types.
func typeLabel(t string) string {
	switch t {
	case wire.TypeWebhook, wire.TypeHTTP, wire.TypeTask:
		return t
	}
	return "other"
}

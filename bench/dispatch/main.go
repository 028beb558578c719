// Command benchdispatch measures Sluice's dispatch path (docs/design.md §1, §2.2,
// §2.3, §5) end to end, at a receiver, side by side with asynq in one run,
// and prints one table:
//
//   - precision: one tenant at r = 50/s, b = 1, a backlog of N webhook jobs
//     enqueued at once through POST /v1/tenants/{t}/jobs:batch; inter-arrival
//     error, long-run rate error and the most deliveries in any 1 s window at
//     the receiver. Peer: plain asynq with the rate-limit pattern of asynq's
//     wiki (an x/time/rate limiter in the handler, RateLimitError, IsFailure
//     false, RetryDelayFunc), the same N tasks enqueued at once, bounded in
//     time. A control beside Sluice in the same window: a bare pacer (one
//     thread POSTing to the receiver at exact instants, no Redis) whose
//     inter-arrival error is what the machine allowed then;
//   - throughput: jobs/s end to end over many tenants with high rates against
//     bare asynq (tasks enqueued directly, a handler that POSTs to the
//     receiver) with the same worker concurrency;
//   - isolation: a quiet tenant's p99 dispatch latency (receiver arrival −
//     the job's slot from its record) alone and next to a noisy tenant with a
//     large backlog;
//   - scale: Redis commands and Redis CPU per dispatched job over a fixed
//     window of deliveries with 10, 1 000 and 100 000 backlogged tenants;
//   - idle: one throttler and one worker with no jobs, Redis commands per
//     second over a window, beside one idle bare asynq server of the same
//     TaskCheckInterval and concurrency; then jobs enqueued one at a time
//     from idle, due at once and delayed 1 s: slot → receiver arrival and
//     due time → arrival;
//   - noisy (only when named in -parts): 10 000 tenants enqueueing through
//     POST /v1/tenants/{t}/jobs, a sample of them measured (slot → receiver
//     arrival), alone and next to one tenant sending at 100 × its admit rate;
//     that tenant's 429s and Retry-After checked, Redis memory and CPU;
//   - scale-out (only when named in -parts; needs -cluster, a private
//     Redis Cluster): the throughput run on the single node and on the
//     Cluster side by side (Redis commands and CPU per job, the ratio),
//     the Cluster masters' CPU and the busiest one's share, then 3
//     throttlers and 2 workers on the Cluster with many tenants, each
//     tenant's arrivals checked against its rate bound;
//   - soak (only when named in -parts; scripts/soak): a steady rate for a
//     bounded time with short retentions; goroutines, heap and Redis memory
//     read periodically, then the keyspace checked for keys without a TTL;
//   - upstream (only when named in -parts): 100 tenants, each allowed ten
//     times its even share, sending every job through one shared upstream at
//     r/s (held paused while they are enqueued), beside one tenant at r/s
//     alone: the combined stream's gap and rate error at the receiver while
//     the upstream is the bottleneck, the most in any 1 s against the bound,
//     and how evenly the tenants shared the upstream;
//   - slow (only when named in -parts): a pool of 100 workers, ten tenants
//     whose endpoint takes 30 s, one tenant at 50/s whose endpoint answers
//     at once: that tenant's delivered rate and slot → arrival lateness
//     (after one unmeasured job: warmUp) against the same tenant alone
//     (fair shares of the pool, issue #32).
//   - circuit (only when named in -parts): one tenant whose jobs alternate
//     between a destination that never answers and a healthy one, with the
//     circuits off and on: the healthy destination's delivered rate, the
//     requests the dead one got while its circuit was open (target 0).
//   - million (only when named in -parts): T tenants × 2 webhook jobs with
//     1 KiB payloads beside 1 000 tenants (Redis's hash-max-listpack-value
//     set per run): Redis memory per queued job, commands and CPU per
//     delivered job, and what each idle tenant leaves once a short
//     retention has passed.
//   - observe (only when named in -parts): 100 000 tenants with a job each
//     (delayed a day: the throttler stays idle) and a throttler; Redis commands/s and CPU while /metrics is
//     scraped every 15 s and GET /v1/summary polled every second (the
//     console's overview and a client), less the throttler's own, against
//     issue 33's bounds (≤ 1 000 commands/s, ≤ 5 % of a core).
//
// Every Sluice measurement runs the cmd/throttler and cmd/worker binaries
// against the given Redis (or Cluster), which the program flushes before
// each run: use a private redis-server. Run it through
// scripts/bench-dispatch.
//
// Each part has its own files: precision.go (its control in pacer.go),
// throughput.go, isolation.go, scale.go, idle.go, noisy.go and
// noisyhttp.go, soak.go and keyspace.go, scaleout.go and fleet.go,
// upstream.go, slow.go, circuit.go, million.go, observe.go; the asynq peers
// are in peer.go. The rest is shared: flags.go (every part's flags), env.go
// (Redis, the store, the receiver), sluice.go
// (the Sluice processes), api.go (enqueues), load.go (paced producers),
// receiver.go, stats.go (pacing), counters.go, cpu.go, profile.go (Redis's
// time per script), slots.go (Cluster hash slots) and table.go.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	redisURL  string   // a private Redis: flushed before every run
	cluster   []string // seed addresses of a private Redis Cluster (scale-out): flushed before every run
	throttler string   // cmd/throttler binary
	worker    string   // cmd/worker binary
	dir       string   // configs and logs
	parts     []string
	quick     bool
	planner   string // dispatch.planner of Sluice's throttlers ("": the default)

	// precision
	precJobs    int
	precRate    int
	peerTime    time.Duration
	peerForward time.Duration // asynq DelayedTaskCheckInterval of the peer; 0 = asynq's default (5 s)
	peerRetry   string        // "wiki" (rand 0–9 s) or "limiter" (the limiter's own delay)
	peerConc    int

	// throughput
	tputJobs      int
	tputTenants   int
	concurrency   int  // worker concurrency of both Sluice and bare asynq
	tputExtra     int  // a further Sluice row at this worker concurrency; 0 = none
	scriptProfile bool // log every command of the Sluice runs (SLOWLOG) and print the time per script
	redisPerf     bool // sample Redis with perf during the Sluice runs and print its time by component

	// isolation
	isoNoisy     int
	isoNoisyRate int
	isoQuiet     int
	isoQuietRate int
	isoConc      int

	// scale
	scaleTenants []int
	scaleWindow  int
	scaleWarmup  int
	scaleConc    int

	// noisy
	noisyTenants    int
	noisySample     int
	noisySampleRate float64
	noisyRestRate   float64
	noisyProducers  int
	noisyAdmit      float64
	noisyFactor     float64
	noisyDuration   time.Duration
	noisyConc       int

	// idle
	idleSettle  time.Duration // from start to the window
	idleWindow  time.Duration // Redis commands counted over it
	idleWakeups int           // jobs due at once, and as many delayed ones
	idleGap     time.Duration // idle before each wake-up job

	// soak
	soakDuration  time.Duration
	soakRate      int
	soakTenants   int
	soakProducers int
	soakConc      int
	soakEvery     time.Duration
	soakWarmup    time.Duration
	soakRetention time.Duration

	// scale-out
	soTenants    int
	soJobs       int // per tenant
	soRate       int // per tenant, per second (burst 1)
	soThrottlers int
	soWorkers    int

	// upstream
	upRate    int
	upJobs    int
	upTenants int

	// slow
	slowFastJobs int
	// circuit
	cbRate       int
	cbDuration   time.Duration
	cbTimeout    time.Duration
	cbFailures   int
	cbBackoff    time.Duration
	cbMaxBackoff time.Duration
	// million
	millionTenants        int
	millionBase           int
	millionBaseRuns       int // runs of the base at the large run's listpack value; the ratios take their median
	millionJobs           int // per tenant
	millionPayload        int // bytes of a job's payload
	millionConc           int
	millionListpack       []int // Redis hash-max-listpack-value of each base run; the large run uses the last
	millionProducers      int
	millionRetention      time.Duration
	millionLargeRetention time.Duration
	millionResidueWait    time.Duration
	// observe
	obsTenants                    int
	obsWindow, obsScrape, obsPoll time.Duration

	tci      time.Duration // worker.task_check_interval, and the asynq peers' TaskCheckInterval
	fetchers int           // worker.fetchers of Sluice's workers (0: the default)
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchdispatch:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "benchdispatch:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	e, err := newEnv(ctx, o)
	if err != nil {
		return err
	}
	defer e.close()
	var t table
	for _, p := range o.parts {
		start := time.Now()
		var err error
		switch p {
		case "precision":
			err = precision(ctx, e, &t)
		case "throughput":
			err = throughput(ctx, e, &t)
		case "isolation":
			err = isolation(ctx, e, &t)
		case "scale":
			err = scale(ctx, e, &t)
		case "idle":
			err = idle(ctx, e, &t)
		case "noisy":
			err = noisy(ctx, e, &t)
		case "soak":
			err = soak(ctx, e, &t)
		case "scale-out":
			err = scaleOut(ctx, e, &t)
		case "upstream":
			err = upstream(ctx, e, &t)
		case "slow":
			err = slowDest(ctx, e, &t)
		case "circuit":
			err = circuit(ctx, e, &t)
		case "million":
			err = million(ctx, e, &t)
		case "observe":
			err = observe(ctx, e, &t)
		}
		if err != nil {
			t.note("%s: FAILED: %v", p, err)
		}
		fmt.Fprintf(os.Stderr, "benchdispatch: %s done in %s\n", p, time.Since(start).Round(time.Second))
		if ctx.Err() != nil {
			break
		}
	}
	t.print(os.Stdout)
	return ctx.Err()
}

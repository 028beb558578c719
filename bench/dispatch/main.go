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
//     r/s, beside one tenant at r/s alone: the combined stream's gap and
//     rate error at the receiver, the most in any 1 s against the bound, and
//     how evenly the tenants shared the upstream.
//
// Every Sluice measurement runs the cmd/throttler and cmd/worker binaries
// against the given Redis (or Cluster), which the program flushes before
// each run: use a private redis-server. Run it through
// scripts/bench-dispatch.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
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

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("benchdispatch", flag.ContinueOnError)
	fs.StringVar(&o.redisURL, "redis", "", "a private Redis (flushed before every run)")
	clusterAddrs := fs.String("cluster", "", "scale-out: seed addresses of a private Redis Cluster, comma-separated (flushed before every run)")
	fs.StringVar(&o.throttler, "throttler", "", "the cmd/throttler binary")
	fs.StringVar(&o.worker, "worker", "", "the cmd/worker binary")
	fs.StringVar(&o.dir, "dir", "", "directory for configs and logs")
	parts := fs.String("parts", "precision,throughput,isolation,scale,idle", "parts to run, comma-separated")
	fs.BoolVar(&o.quick, "quick", false, "a short run: 500 precision jobs, 30s peer, 5000 throughput jobs, "+
		"20000 noisy jobs, scale window 5000 and 10,1000,20000 tenants, 3 idle wake-ups of each kind, "+
		"10000 scale-out tenants (flags given explicitly win)")

	fs.IntVar(&o.precJobs, "precision-jobs", 2000, "precision: jobs for the one tenant (and tasks for the peer)")
	fs.IntVar(&o.precRate, "precision-rate", 50, "precision: the tenant's rate per second (burst 1)")
	fs.DurationVar(&o.peerTime, "peer-time", 60*time.Second, "precision: how long the asynq wiki peer may run")
	fs.DurationVar(&o.peerForward, "peer-forwarder", 100*time.Millisecond,
		"precision: the peer's asynq DelayedTaskCheckInterval (0: asynq's default, 5s)")
	fs.StringVar(&o.peerRetry, "peer-retry", "wiki", `precision: the peer's RetryIn: "wiki" (rand 0–9 s, as the wiki) or "limiter" (the limiter's delay)`)
	fs.IntVar(&o.peerConc, "peer-concurrency", 10, "precision: the peer's asynq Concurrency (the wiki's 10)")

	fs.IntVar(&o.tputJobs, "throughput-jobs", 20000, "throughput: jobs for each system")
	fs.IntVar(&o.tputTenants, "throughput-tenants", 1000, "throughput: Sluice tenants the jobs are spread over")
	fs.IntVar(&o.concurrency, "concurrency", 100, "throughput: worker concurrency of Sluice and of bare asynq")
	fs.IntVar(&o.tputExtra, "throughput-extra-concurrency", 400, "throughput: one more Sluice row at this worker concurrency (0: none)")
	fs.BoolVar(&o.scriptProfile, "script-profile", false, "throughput: log every Redis command during the Sluice runs (SLOWLOG) and print "+
		"the time per job of each script and command (slows Redis: the table's cost rows of such a run are not the figures)")

	fs.IntVar(&o.isoNoisy, "isolation-noisy-jobs", 100000, "isolation: the noisy tenant's backlog")
	fs.IntVar(&o.isoNoisyRate, "isolation-noisy-rate", 500,
		"isolation: the noisy tenant's rate per second (keep it within what the machine delivers: 2000/s overloads 2 cores)")
	fs.IntVar(&o.isoQuiet, "isolation-quiet-jobs", 100, "isolation: the quiet tenant's jobs")
	fs.IntVar(&o.isoQuietRate, "isolation-quiet-rate", 10, "isolation: the quiet tenant's rate per second")
	fs.IntVar(&o.isoConc, "isolation-concurrency", 600, "isolation: worker concurrency (capacity must suffice: > noisy rate × D)")

	scale := fs.String("scale-tenants", "10,1000,100000", "scale: tenant counts, comma-separated (the first is the base)")
	fs.IntVar(&o.scaleWindow, "scale-window", 20000, "scale: deliveries measured per tenant count")
	fs.IntVar(&o.scaleWarmup, "scale-warmup", 2000, "scale: deliveries before the window opens")
	fs.IntVar(&o.scaleConc, "scale-concurrency", 100, "scale: worker concurrency")

	fs.IntVar(&o.noisyTenants, "noisy-tenants", 10000, "noisy: tenants, the noisy one included")
	fs.IntVar(&o.noisySample, "noisy-sample", 100, "noisy: quiet tenants measured (slot → arrival)")
	fs.Float64Var(&o.noisySampleRate, "noisy-sample-rate", 1, "noisy: jobs/s of each measured tenant")
	fs.Float64Var(&o.noisyRestRate, "noisy-rest-rate", 200, "noisy: jobs/s of the other quiet tenants together, round robin")
	fs.IntVar(&o.noisyProducers, "noisy-producers", 64, "noisy: quiet producer goroutines (the noisy tenant has 48 more)")
	fs.Float64Var(&o.noisyAdmit, "noisy-admit-rate", 4, "noisy: the noisy tenant's admit rate per second (burst: twice that)")
	fs.Float64Var(&o.noisyFactor, "noisy-factor", 100, "noisy: the noisy tenant sends this many times its admit rate")
	fs.DurationVar(&o.noisyDuration, "noisy-duration", 60*time.Second, "noisy: how long each run's producers (and the noisy tenant) run")
	fs.IntVar(&o.noisyConc, "noisy-concurrency", 200, "noisy: worker concurrency")

	fs.DurationVar(&o.idleSettle, "idle-settle", 2*time.Second, "idle: time from the start to the window")
	fs.DurationVar(&o.idleWindow, "idle-window", 10*time.Second, "idle: the window Redis commands are counted over")
	fs.IntVar(&o.idleWakeups, "idle-wakeups", 5, "idle: jobs due at once enqueued from idle, and as many delayed 1s")
	fs.DurationVar(&o.idleGap, "idle-gap", time.Second, "idle: idle time before each wake-up job")

	fs.IntVar(&o.upRate, "upstream-rate", 100, "upstream: the shared upstream's rate per second (burst 1), and the lone tenant's")
	fs.IntVar(&o.upJobs, "upstream-jobs", 2000, "upstream: jobs of each stream")
	fs.IntVar(&o.upTenants, "upstream-tenants", 100, "upstream: tenants sharing the upstream")
	fs.DurationVar(&o.soakDuration, "soak-duration", 30*time.Minute, "soak: how long the producers run")
	fs.IntVar(&o.soakRate, "soak-rate", 500, "soak: jobs per second through POST /v1/tenants/{t}/jobs")
	fs.IntVar(&o.soakTenants, "soak-tenants", 300, "soak: tenants the jobs go to, round robin")
	fs.IntVar(&o.soakProducers, "soak-producers", 32, "soak: producer goroutines")
	fs.IntVar(&o.soakConc, "soak-concurrency", 100, "soak: worker concurrency")
	fs.DurationVar(&o.soakEvery, "soak-every", 30*time.Second, "soak: time between readings")
	fs.DurationVar(&o.soakWarmup, "soak-warmup", 5*time.Minute, "soak: readings before this are the warm-up")
	fs.DurationVar(&o.soakRetention, "soak-retention", 30*time.Second, "soak: retention.succeeded, canceled, dead and idempotency")

	fs.IntVar(&o.soTenants, "scaleout-tenants", 100000, "scale-out: tenants of the many-tenant run on the Cluster")
	fs.IntVar(&o.soJobs, "scaleout-jobs", 3, "scale-out: jobs per tenant (≥ 3: with burst 1 two arrivals never exceed b + r·Δ + 1)")
	fs.IntVar(&o.soRate, "scaleout-rate", 10, "scale-out: each tenant's rate per second (burst 1)")
	fs.IntVar(&o.soThrottlers, "scaleout-throttlers", 3, "scale-out: throttlers of the many-tenant run")
	fs.IntVar(&o.soWorkers, "scaleout-workers", 2, "scale-out: workers of the many-tenant run (each of -concurrency)")

	fs.DurationVar(&o.tci, "task-check-interval", 20*time.Millisecond, "worker.task_check_interval, also the asynq peers'")
	fs.IntVar(&o.fetchers, "fetchers", 0, "worker.fetchers of Sluice's workers (0: Sluice's default)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		quick := map[string]func(){
			"precision-jobs":       func() { o.precJobs = 500 },
			"peer-time":            func() { o.peerTime = 30 * time.Second },
			"throughput-jobs":      func() { o.tputJobs = 5000 },
			"isolation-noisy-jobs": func() { o.isoNoisy = 20000 },
			"scale-window":         func() { o.scaleWindow = 5000 },
			"scale-warmup":         func() { o.scaleWarmup = 1000 },
			"scale-tenants":        func() { *scale = "10,1000,20000" },
			"noisy-duration":       func() { o.noisyDuration = 15 * time.Second },
			"noisy-tenants":        func() { o.noisyTenants = 2000 },
			"idle-wakeups":         func() { o.idleWakeups = 3 },
			"scaleout-tenants":     func() { o.soTenants = 10000 },
		}
		for name, f := range quick {
			if !set[name] {
				f()
			}
		}
	}
	o.parts = strings.Split(*parts, ",")
	for _, p := range o.parts {
		if !slices.Contains([]string{"precision", "throughput", "isolation", "scale", "idle", "noisy", "soak", "scale-out", "upstream"}, p) {
			return o, fmt.Errorf("unknown part %q", p)
		}
	}
	for _, s := range strings.Split(*scale, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return o, fmt.Errorf("scale-tenants: bad count %q", s)
		}
		o.scaleTenants = append(o.scaleTenants, n)
	}
	if *clusterAddrs != "" {
		o.cluster = strings.Split(*clusterAddrs, ",")
	}
	switch {
	case slices.Contains(o.parts, "scale-out") && len(o.cluster) == 0:
		return o, fmt.Errorf("-parts scale-out needs -cluster (scripts/bench-dispatch starts one)")
	case o.soTenants < 1 || o.soJobs < 1 || o.soRate < 1 || o.soThrottlers < 1 || o.soWorkers < 1:
		return o, fmt.Errorf("bad scale-out flags")
	case o.redisURL == "" || o.throttler == "" || o.worker == "" || o.dir == "":
		return o, fmt.Errorf("-redis, -throttler, -worker and -dir are required")
	case o.precJobs < 2 || o.precRate < 1 || o.tputJobs < 2 || o.tputTenants < 1 || o.concurrency < 1:
		return o, fmt.Errorf("bad precision or throughput flags")
	case o.isoNoisy < 1 || o.isoQuiet < 2 || o.isoNoisyRate < 1 || o.isoQuietRate < 1 || o.isoConc < 1:
		return o, fmt.Errorf("bad isolation flags")
	case o.scaleWindow < 1 || o.scaleWarmup < 0 || o.scaleConc < 1:
		return o, fmt.Errorf("bad scale flags")
	case o.noisyTenants < 2 || o.noisySample < 1 || o.noisySample > o.noisyTenants-1 || o.noisySampleRate <= 0 || o.noisyRestRate < 0 ||
		o.noisyProducers < 1 || o.noisyAdmit <= 0 || o.noisyFactor <= 0 || o.noisyDuration <= 0 || o.noisyConc < 1:
		return o, fmt.Errorf("bad noisy flags")
	case o.soakDuration <= 0 || o.soakRate < 1 || o.soakTenants < 1 || o.soakProducers < 1 || o.soakConc < 1 ||
		o.soakEvery <= 0 || o.soakWarmup < 0 || o.soakRetention < time.Second:
		return o, fmt.Errorf("bad soak flags")
	case o.idleSettle < 0 || o.idleWindow <= 0 || o.idleWakeups < 1 || o.idleGap < time.Second:
		return o, fmt.Errorf("bad idle flags (-idle-gap at least 1s: each wake-up starts from idle)")
	case o.peerRetry != "wiki" && o.peerRetry != "limiter":
		return o, fmt.Errorf("-peer-retry: want wiki or limiter")
	}
	return o, nil
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

package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// allParts are the names -parts accepts, in the order run reports them.
var allParts = []string{"precision", "throughput", "isolation", "scale", "idle", "noisy", "soak", "scale-out", "upstream", "slow", "circuit", "million", "observe"}

// parseFlags reads the command line: the common flags, then each part's
// (flagsXxx below), -quick's smaller sizes where a flag was not given, and
// checks every value.
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
	flagsPrecision(fs, &o)
	flagsThroughput(fs, &o)
	flagsIsolation(fs, &o)
	scale := fs.String("scale-tenants", "10,1000,100000", "scale: tenant counts, comma-separated (the first is the base)")
	flagsScale(fs, &o)
	flagsNoisy(fs, &o)
	flagsIdle(fs, &o)
	flagsUpstream(fs, &o)
	flagsCircuit(fs, &o)
	flagsSoak(fs, &o)
	flagsScaleOut(fs, &o)
	fs.IntVar(&o.slowFastJobs, "slow-fast-jobs", 1500, "slow: the fast tenant's jobs (at 50/s; the issue's shape gets 2/5 of them at 20/s)")
	flagsMillion(fs, &o)
	flagsObserve(fs, &o)
	fs.DurationVar(&o.tci, "task-check-interval", 20*time.Millisecond, "worker.task_check_interval, also the asynq peers'")
	fs.IntVar(&o.fetchers, "fetchers", 0, "worker.fetchers of Sluice's workers (0: Sluice's default)")
	fs.StringVar(&o.planner, "planner", "", "dispatch.planner of Sluice's throttlers: lua or go (empty: Sluice's default)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.quick {
		o.applyQuick(fs, scale)
	}
	if err := o.setLists(*parts, *scale, *clusterAddrs); err != nil {
		return o, err
	}
	return o, o.check()
}

// applyQuick sets -quick's sizes on every flag of them not given.
func (o *options) applyQuick(fs *flag.FlagSet, scale *string) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
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
		"slow-fast-jobs":       func() { o.slowFastJobs = 500 },
		"observe-tenants":      func() { o.obsTenants = 20000 },
		"observe-window":       func() { o.obsWindow = 20 * time.Second },
	}
	for name, f := range quick {
		if !set[name] {
			f()
		}
	}
}

// setLists reads the comma-separated flags: -parts, -scale-tenants and
// -cluster.
func (o *options) setLists(parts, scale, clusterAddrs string) error {
	o.parts = strings.Split(parts, ",")
	for _, p := range o.parts {
		if !slices.Contains(allParts, p) {
			return fmt.Errorf("unknown part %q", p)
		}
	}
	for _, s := range strings.Split(scale, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("scale-tenants: bad count %q", s)
		}
		o.scaleTenants = append(o.scaleTenants, n)
	}
	if clusterAddrs != "" {
		o.cluster = strings.Split(clusterAddrs, ",")
	}
	return nil
}

// check reports the first flag value out of its bounds.
func (o *options) check() error {
	switch {
	case slices.Contains(o.parts, "scale-out") && len(o.cluster) == 0:
		return fmt.Errorf("-parts scale-out needs -cluster (scripts/bench-dispatch starts one)")
	case o.soTenants < 1 || o.soJobs < 1 || o.soRate < 1 || o.soThrottlers < 1 || o.soWorkers < 1:
		return fmt.Errorf("bad scale-out flags")
	case o.redisURL == "" || o.throttler == "" || o.worker == "" || o.dir == "":
		return fmt.Errorf("-redis, -throttler, -worker and -dir are required")
	case o.precJobs < 2 || o.precRate < 1 || o.tputJobs < 2 || o.tputTenants < 1 || o.concurrency < 1:
		return fmt.Errorf("bad precision or throughput flags")
	case o.isoNoisy < 1 || o.isoQuiet < 2 || o.isoNoisyRate < 1 || o.isoQuietRate < 1 || o.isoConc < 1:
		return fmt.Errorf("bad isolation flags")
	case o.scaleWindow < 1 || o.scaleWarmup < 0 || o.scaleConc < 1:
		return fmt.Errorf("bad scale flags")
	case o.noisyTenants < 2 || o.noisySample < 1 || o.noisySample > o.noisyTenants-1 || o.noisySampleRate <= 0 || o.noisyRestRate < 0 ||
		o.noisyProducers < 1 || o.noisyAdmit <= 0 || o.noisyFactor <= 0 || o.noisyDuration <= 0 || o.noisyConc < 1:
		return fmt.Errorf("bad noisy flags")
	case o.soakDuration <= 0 || o.soakRate < 1 || o.soakTenants < 1 || o.soakProducers < 1 || o.soakConc < 1 ||
		o.soakEvery <= 0 || o.soakWarmup < 0 || o.soakRetention < time.Second:
		return fmt.Errorf("bad soak flags")
	case o.idleSettle < 0 || o.idleWindow <= 0 || o.idleWakeups < 1 || o.idleGap < time.Second:
		return fmt.Errorf("bad idle flags (-idle-gap at least 1s: each wake-up starts from idle)")
	case o.slowFastJobs < 10:
		return fmt.Errorf("-slow-fast-jobs: want at least 10")
	case o.cbRate < 2 || o.cbDuration < time.Second || o.cbTimeout <= 0 || o.cbFailures < 1 || o.cbBackoff <= 0 || o.cbMaxBackoff < o.cbBackoff:
		return fmt.Errorf("bad circuit flags")
	case o.millionTenants < 1 || o.millionBase < 1 || o.millionBaseRuns < 1 || o.millionJobs < 1 || o.millionPayload < 10 || o.millionConc < 1 ||
		o.millionProducers < 1 || o.millionRetention < time.Second || o.millionLargeRetention < time.Second || o.millionResidueWait < 0:
		return fmt.Errorf("bad million flags")
	case o.obsTenants < 1 || o.obsWindow <= 0 || o.obsScrape <= 0 || o.obsPoll <= 0:
		return fmt.Errorf("bad observe flags")
	case o.peerRetry != "wiki" && o.peerRetry != "limiter":
		return fmt.Errorf("-peer-retry: want wiki or limiter")
	}
	return nil
}

func flagsPrecision(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.precJobs, "precision-jobs", 2000, "precision: jobs for the one tenant (and tasks for the peer)")
	fs.IntVar(&o.precRate, "precision-rate", 50, "precision: the tenant's rate per second (burst 1)")
	fs.DurationVar(&o.peerTime, "peer-time", 60*time.Second, "precision: how long the asynq wiki peer may run")
	fs.DurationVar(&o.peerForward, "peer-forwarder", 100*time.Millisecond,
		"precision: the peer's asynq DelayedTaskCheckInterval (0: asynq's default, 5s)")
	fs.StringVar(&o.peerRetry, "peer-retry", "wiki", `precision: the peer's RetryIn: "wiki" (rand 0–9 s, as the wiki) or "limiter" (the limiter's delay)`)
	fs.IntVar(&o.peerConc, "peer-concurrency", 10, "precision: the peer's asynq Concurrency (the wiki's 10)")
}

func flagsThroughput(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.tputJobs, "throughput-jobs", 20000, "throughput: jobs for each system")
	fs.IntVar(&o.tputTenants, "throughput-tenants", 1000, "throughput: Sluice tenants the jobs are spread over")
	fs.IntVar(&o.concurrency, "concurrency", 100, "throughput: worker concurrency of Sluice and of bare asynq")
	fs.IntVar(&o.tputExtra, "throughput-extra-concurrency", 400, "throughput: one more Sluice row at this worker concurrency (0: none)")
	fs.BoolVar(&o.scriptProfile, "script-profile", false, "throughput: log every Redis command during the Sluice runs (SLOWLOG) and print "+
		"the time per job of each script and command (slows Redis: the table's cost rows of such a run are not the figures)")
	fs.BoolVar(&o.redisPerf, "redis-perf", false, "throughput: sample the Redis server with perf record (cpu-clock) during the "+
		"Sluice runs and print its time by component: Lua's VM, Redis's C, kernel, libc, allocator (needs perf; one Redis server, not -cluster)")
}

func flagsIsolation(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.isoNoisy, "isolation-noisy-jobs", 100000, "isolation: the noisy tenant's backlog")
	fs.IntVar(&o.isoNoisyRate, "isolation-noisy-rate", 500,
		"isolation: the noisy tenant's rate per second (keep it within what the machine delivers: 2000/s overloads 2 cores)")
	fs.IntVar(&o.isoQuiet, "isolation-quiet-jobs", 100, "isolation: the quiet tenant's jobs")
	fs.IntVar(&o.isoQuietRate, "isolation-quiet-rate", 10, "isolation: the quiet tenant's rate per second")
	fs.IntVar(&o.isoConc, "isolation-concurrency", 600, "isolation: worker concurrency (capacity must suffice: > noisy rate × D)")
}

// flagsScale: -scale-tenants, a list, is parseFlags's.
func flagsScale(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.scaleWindow, "scale-window", 20000, "scale: deliveries measured per tenant count")
	fs.IntVar(&o.scaleWarmup, "scale-warmup", 2000, "scale: deliveries before the window opens")
	fs.IntVar(&o.scaleConc, "scale-concurrency", 100, "scale: worker concurrency")
}

func flagsNoisy(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.noisyTenants, "noisy-tenants", 10000, "noisy: tenants, the noisy one included")
	fs.IntVar(&o.noisySample, "noisy-sample", 100, "noisy: quiet tenants measured (slot → arrival)")
	fs.Float64Var(&o.noisySampleRate, "noisy-sample-rate", 1, "noisy: jobs/s of each measured tenant")
	fs.Float64Var(&o.noisyRestRate, "noisy-rest-rate", 200, "noisy: jobs/s of the other quiet tenants together, round robin")
	fs.IntVar(&o.noisyProducers, "noisy-producers", 64, "noisy: quiet producer goroutines (the noisy tenant has 48 more)")
	fs.Float64Var(&o.noisyAdmit, "noisy-admit-rate", 4, "noisy: the noisy tenant's admit rate per second (burst: twice that)")
	fs.Float64Var(&o.noisyFactor, "noisy-factor", 100, "noisy: the noisy tenant sends this many times its admit rate")
	fs.DurationVar(&o.noisyDuration, "noisy-duration", 60*time.Second, "noisy: how long each run's producers (and the noisy tenant) run")
	fs.IntVar(&o.noisyConc, "noisy-concurrency", 200, "noisy: worker concurrency")
}

func flagsIdle(fs *flag.FlagSet, o *options) {
	fs.DurationVar(&o.idleSettle, "idle-settle", 2*time.Second, "idle: time from the start to the window")
	fs.DurationVar(&o.idleWindow, "idle-window", 10*time.Second, "idle: the window Redis commands are counted over")
	fs.IntVar(&o.idleWakeups, "idle-wakeups", 5, "idle: jobs due at once enqueued from idle, and as many delayed 1s")
	fs.DurationVar(&o.idleGap, "idle-gap", time.Second, "idle: idle time before each wake-up job")
}

func flagsObserve(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.obsTenants, "observe-tenants", 100000, "observe: tenants, one queued job each (1000000 supported)")
	fs.DurationVar(&o.obsWindow, "observe-window", time.Minute, "observe: the idle window, and the observed window after it")
	fs.DurationVar(&o.obsScrape, "observe-scrape", 15*time.Second, "observe: time between /metrics scrapes")
	fs.DurationVar(&o.obsPoll, "observe-poll", time.Second, "observe: time between GET /v1/summary polls (two pollers)")
}

func flagsUpstream(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.upRate, "upstream-rate", 100, "upstream: the shared upstream's rate per second (burst 1), and the lone tenant's")
	fs.IntVar(&o.upJobs, "upstream-jobs", 2000, "upstream: jobs of each stream")
	fs.IntVar(&o.upTenants, "upstream-tenants", 100, "upstream: tenants sharing the upstream")
}

func flagsCircuit(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.cbRate, "circuit-rate", 10, "circuit: the tenant's rate per second (burst 1), half of its jobs to each destination")
	fs.DurationVar(&o.cbDuration, "circuit-duration", 40*time.Second, "circuit: how long jobs are enqueued (one per 1/rate)")
	fs.DurationVar(&o.cbTimeout, "circuit-timeout", 2*time.Second, "circuit: the tenant's attempt timeout")
	fs.IntVar(&o.cbFailures, "circuit-failures", 5, "circuit: circuit.failures")
	fs.DurationVar(&o.cbBackoff, "circuit-backoff", 5*time.Second, "circuit: circuit.backoff")
	fs.DurationVar(&o.cbMaxBackoff, "circuit-max-backoff", time.Minute, "circuit: circuit.max_backoff")
}

func flagsSoak(fs *flag.FlagSet, o *options) {
	fs.DurationVar(&o.soakDuration, "soak-duration", 30*time.Minute, "soak: how long the producers run")
	fs.IntVar(&o.soakRate, "soak-rate", 500, "soak: jobs per second through POST /v1/tenants/{t}/jobs")
	fs.IntVar(&o.soakTenants, "soak-tenants", 300, "soak: tenants the jobs go to, round robin")
	fs.IntVar(&o.soakProducers, "soak-producers", 32, "soak: producer goroutines")
	fs.IntVar(&o.soakConc, "soak-concurrency", 100, "soak: worker concurrency")
	fs.DurationVar(&o.soakEvery, "soak-every", 30*time.Second, "soak: time between readings")
	fs.DurationVar(&o.soakWarmup, "soak-warmup", 5*time.Minute, "soak: readings before this are the warm-up")
	fs.DurationVar(&o.soakRetention, "soak-retention", 30*time.Second, "soak: retention.succeeded, canceled, dead and idempotency")
}

func flagsScaleOut(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.soTenants, "scaleout-tenants", 100000, "scale-out: tenants of the many-tenant run on the Cluster")
	fs.IntVar(&o.soJobs, "scaleout-jobs", 3, "scale-out: jobs per tenant (≥ 3: with burst 1 two arrivals never exceed b + r·Δ + 1)")
	fs.IntVar(&o.soRate, "scaleout-rate", 10, "scale-out: each tenant's rate per second (burst 1)")
	fs.IntVar(&o.soThrottlers, "scaleout-throttlers", 3, "scale-out: throttlers of the many-tenant run")
	fs.IntVar(&o.soWorkers, "scaleout-workers", 2, "scale-out: workers of the many-tenant run (each of -concurrency)")
}

func flagsMillion(fs *flag.FlagSet, o *options) {
	fs.IntVar(&o.millionTenants, "million-tenants", 1_000_000, "million: tenants of the large run (2 cores: ~100 000 a minute to enqueue, "+
		"the drain at the machine's jobs/s; 16 GB of Redis at 1 000 000)")
	fs.IntVar(&o.millionBase, "million-base", 1000, "million: tenants of the base run, the comparison's denominator")
	fs.IntVar(&o.millionBaseRuns, "million-base-runs", 9, "million: runs of the base at the large run's hash-max-listpack-value; "+
		"the ratios take the median of their commands and Redis CPU a job (one window is under a second)")
	fs.IntVar(&o.millionJobs, "million-jobs", 2, "million: webhook jobs per tenant")
	fs.IntVar(&o.millionPayload, "million-payload", 1024, "million: bytes of each job's JSON payload")
	fs.IntVar(&o.millionConc, "million-concurrency", 100, "million: worker concurrency")
	fs.IntVar(&o.millionProducers, "million-producers", 16, "million: goroutines calling Store.Enqueue (a tenant's jobs per call)")
	o.millionListpack = []int{64, 2048}
	fs.Var(intList{&o.millionListpack}, "million-listpack", "million: Redis hash-max-listpack-value of each base run, comma-separated "+
		"(CONFIG SET; the large run uses the last; job records and tenant hashes stay compact listpacks below it)")
	fs.DurationVar(&o.millionRetention, "million-retention", 10*time.Second, "million: retention.succeeded, canceled, dead and idempotency")
	fs.DurationVar(&o.millionLargeRetention, "million-large-retention", 12*time.Minute, "million: the same retentions for the large run: "+
		"longer than its drain to the window's end (2 cores: ~4 min at 1 000 000 on an Intel Xeon VM, ~8 on an AMD EPYC one), so that, as in the base windows (under a second), "+
		"no tenant's removal falls in its window; the removal has its own row")
	fs.DurationVar(&o.millionResidueWait, "million-residue-wait", 2*time.Minute,
		"million: how long past the retention to wait for the tenants' keys and index entries to go")
}

// intList is a comma-separated list of positive integers as a flag value.
type intList struct{ to *[]int }

func (l intList) String() string {
	if l.to == nil {
		return ""
	}
	var s []string
	for _, v := range *l.to {
		s = append(s, strconv.Itoa(v))
	}
	return strings.Join(s, ",")
}

func (l intList) Set(v string) error {
	*l.to = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad value %q", f)
		}
		*l.to = append(*l.to, n)
	}
	return nil
}

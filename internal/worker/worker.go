package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/wire"
)

// Store is what a Worker needs of *store.Store.
type Store interface {
	Claim(ctx context.Context, id string, gen int64, tolerance time.Duration) (store.Claim, error)
	Finish(ctx context.Context, id string, gen int64, o wire.AttemptOutcome, cfg store.FinishConfig) (store.State, error)
	// Confirm reports whether the job runs at gen (store.Store.Confirm):
	// the fence before a pre-claimed job's send while the calls above fail.
	Confirm(ctx context.Context, id string, gen int64) (bool, error)
	Heartbeat(ctx context.Context, workerID string, concurrency int, ttl time.Duration) error
}

var _ Store = (*store.Store)(nil)

// Executor runs one attempt of a claimed job and classifies its outcome
// (docs/design.md §4.2). ctx carries the attempt's timeout; Execute must return
// soon after ctx ends. It must be safe for concurrent use.
type Executor interface {
	Execute(ctx context.Context, job store.ClaimedJob) wire.AttemptOutcome
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, job store.ClaimedJob) wire.AttemptOutcome

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, job store.ClaimedJob) wire.AttemptOutcome {
	return f(ctx, job)
}

// Defaults of Config.
const (
	TaskCheckIntervalDefault = tuning.TaskCheckIntervalDefault // TCI (its value: internal/tuning)
	HeartbeatIntervalDefault = 3 * time.Second
	ClockRefreshDefault      = 10 * time.Second
	MetaRefreshDefault       = store.MetaRefreshDefault
	SpinDefault              = time.Millisecond
	TimeoutDefault           = policy.TimeoutDefault
	finishTimeout            = 5 * time.Second // Finish after the attempt, even past the task's ctx
	maxEarlyClaims           = 8               // early replies tolerated per delivery
)

// Config configures a Worker. Store, Redis and Executor are required, and
// Concurrency ≥ 1; every other zero field takes its default.
type Config struct {
	Store    Store
	Redis    redis.UniversalClient // Redis TIME for the Clock
	Executor Executor
	// Prefix is the key prefix; it names the queues (see Queues). Default
	// store.PrefixDefault.
	Prefix string
	// ID names this worker in the heartbeats; default
	// "<hostname>-<pid>-<random>".
	ID string
	// Concurrency is the most jobs ProcessTask delivers at a time (a batch
	// fans out into up to Concurrency of them, waiting and running; a job's
	// finish follows its attempt outside this count, in one of Concurrency
	// places of its own), and
	// what the heartbeat announces. cmd/worker gives the process's asynq
	// servers the same total concurrency: in asynq's count a batch or a
	// single job of an earlier dispatcher is one task.
	Concurrency int
	// MinLead (L, default store.MinLeadDefault) is checked at Start against
	// 1.5 × TaskCheckInterval + 2 RTT. It is fixed in <prefix>:meta: the
	// caller checks or reads it there.
	MinLead time.Duration
	// TaskCheckInterval is the asynq server's TaskCheckInterval (TCI);
	// default TaskCheckIntervalDefault.
	TaskCheckInterval time.Duration
	// Settings are this process's own configuration of the deployment-wide
	// settings: the claim tolerance ε (how early before its slot a claim is
	// accepted) and the retention and throttle every Store.Finish applies.
	// Zero fields take store.DefaultSettings(). The settings stored in
	// <prefix>:meta (written by the throttler) win over these: the Worker
	// reads them at Start and every MetaRefresh, logs once where they
	// differ from these, and applies Redis's (see Worker.Settings).
	Settings wire.Settings
	// MetaRefresh is how often <prefix>:meta is re-read (one HGETALL);
	// default MetaRefreshDefault.
	MetaRefresh time.Duration
	// HeartbeatInterval is how often the concurrency is announced (each
	// announcement lives 3 intervals); default HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// ClockRefresh is how often the Clock is re-measured; ClockSamples the
	// round trips per measurement. Defaults ClockRefreshDefault,
	// ClockSamplesDefault.
	ClockRefresh time.Duration
	ClockSamples int
	// Spin is how long before a slot the Worker's one scheduler leaves its
	// timer (which may wake a millisecond late) for a precise approach
	// (short nanosleeps, then a spin of the last 100 µs) that releases
	// every slot due at once; default SpinDefault.
	Spin time.Duration
	// DefaultTimeout is the attempt timeout of a job that carries none;
	// default TimeoutDefault.
	DefaultTimeout time.Duration
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives errors; nil discards them.
	Logger *slog.Logger
	// UpstreamRates, when set, applies the pause_scope and the adaptive
	// rate of the upstreams a job names (issue #15; upstreams.go): a
	// throttle of a job naming an upstream with pause_scope upstream pauses
	// that upstream instead of the tenant, and an adaptive upstream's rate
	// follows the outcomes. Nil: every throttle pauses the tenant, and no
	// upstream adapts. *store.Store implements it.
	UpstreamRates UpstreamRates
	// UpstreamCache holds the settings of the upstreams jobs name, each read
	// at most once per UpstreamCacheTTL; give the CostReader of the same
	// process the same one (NewCostReader). Default: NewUpstreamCache of
	// UpstreamRates (none without it).
	UpstreamCache *quota.UpstreamCache
	// Announce announces the Worker's concurrency: at Start and every
	// HeartbeatInterval with Concurrency and a life (ttl) of 3 intervals,
	// and when the Worker stops with concurrency 0 and a life of 1 s (the
	// withdrawal). Default: Store.Heartbeat under ID, into <prefix>:workers.
	// The sluicetask middleware sets it to heartbeat its task queues as well.
	Announce func(ctx context.Context, concurrency int, ttl time.Duration) error
	// Upstreams receives the cost corrections of the upstreams a job names
	// (CorrectUpstreams) after each finish whose attempt reported its actual
	// cost; nil corrects only the tenant (in the finish).
	Upstreams UpstreamCharger
}

func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, store.PrefixDefault)
	if c.ID == "" {
		c.ID = defaultID()
	}
	c.MinLead = cmp.Or(c.MinLead, store.MinLeadDefault)
	c.MetaRefresh = cmp.Or(c.MetaRefresh, MetaRefreshDefault)
	c.TaskCheckInterval = cmp.Or(c.TaskCheckInterval, TaskCheckIntervalDefault)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, HeartbeatIntervalDefault)
	c.ClockRefresh = cmp.Or(c.ClockRefresh, ClockRefreshDefault)
	c.ClockSamples = cmp.Or(c.ClockSamples, ClockSamplesDefault)
	c.Spin = cmp.Or(c.Spin, SpinDefault)
	c.DefaultTimeout = cmp.Or(c.DefaultTimeout, TimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.UpstreamCache == nil && c.UpstreamRates != nil {
		c.UpstreamCache = NewUpstreamCache(c.UpstreamRates)
	}
	if c.Announce == nil && c.Store != nil {
		st, id := c.Store, c.ID
		c.Announce = func(ctx context.Context, concurrency int, ttl time.Duration) error {
			return st.Heartbeat(ctx, id, concurrency, ttl)
		}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Store == nil || c.Redis == nil || c.Executor == nil {
		errs = append(errs, errors.New("Store, Redis and Executor are required"))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d: want ≥ 1", c.Concurrency))
	}
	for _, d := range []time.Duration{c.MinLead, c.Settings.Tolerance, c.TaskCheckInterval, c.HeartbeatInterval, c.ClockRefresh,
		c.MetaRefresh, c.Spin, c.DefaultTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("negative duration %s", d))
			break
		}
	}
	return errors.Join(errs...)
}

func defaultID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "worker"), os.Getpid(), hex.EncodeToString(b[:]))
}

// Worker is the asynq handler of Sluice's webhook and http queues plus its
// heartbeat and clock loops. Its methods are safe for concurrent use.
type Worker struct {
	cfg   Config
	clock *Clock
	sched *scheduler    // every wait for a slot
	jobs  chan struct{} // the job slots: Concurrency deliveries of ProcessTask at a time, up to their attempt's end
	// finishing holds the finishes of attempts that had a job slot:
	// finishPlaces × Concurrency at a time, so a Redis that does not
	// answer holds the sends back after at most (1 + finishPlaces) ×
	// Concurrency attempts.
	finishing chan struct{}
	idle      chan batchJob // a batch's next job to a runner waiting for one (processBatch)
	metrics   *metrics
	// failing is set when a claim or a finish failed (not stale), also by
	// a finish's try that is then sent again (finish), and cleared by the
	// next claim that succeeds, a finish that succeeds at its first try,
	// or a confirmation: while it is
	// set a pre-claimed job is sent only once Store.Confirm found it
	// running at its gen (deliver).
	failing atomic.Bool
	// upstreams caches the settings of the upstreams jobs name
	// (Config.UpstreamCache; nil without UpstreamRates).
	upstreams *quota.UpstreamCache
	// runWakes wakes jobs waiting for an upstream's concurrency lease
	// (upstreamrun.go).
	runWakes runWakes
	// current is the settings applied now (Settings); stored the settings
	// last read from <prefix>:meta (nil before the first read), touched only
	// by Start and then the meta loop.
	current atomic.Pointer[wire.Settings]
	stored  *wire.Settings
	logged  map[string]struct{} // differences with Config.Settings logged

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New checks cfg, fills in its defaults and registers the metrics. The
// handler works before Start, but on the local clock and without a
// heartbeat: Start the Worker before the asynq server.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	w := &Worker{cfg: cfg, clock: NewClock(cfg.Redis, cfg.ClockSamples), sched: newScheduler(cfg.Spin),
		jobs: make(chan struct{}, cfg.Concurrency), finishing: make(chan struct{}, finishPlaces*cfg.Concurrency), idle: make(chan batchJob), metrics: m, upstreams: cfg.UpstreamCache,
		logged: map[string]struct{}{}}
	local := w.local()
	w.current.Store(&local)
	return w, nil
}

// Queues are the asynq queues the Worker serves, with equal priorities:
// the hand-off queues of batches (wire.HandoffQueueNames(Prefix)) and the
// queues of single jobs of dispatchers of an earlier version
// (wire.WebhookQueue(Prefix), wire.HTTPQueue(Prefix)).
func (w *Worker) Queues() map[string]int {
	out := map[string]int{wire.WebhookQueue(w.cfg.Prefix): 1, wire.HTTPQueue(w.cfg.Prefix): 1}
	for _, q := range wire.HandoffQueueNames(w.cfg.Prefix) {
		out[q] = 1
	}
	return out
}

// ID is the worker's id in the heartbeats.
func (w *Worker) ID() string { return w.cfg.ID }

// Clock is the Worker's estimate of Redis's clock.
func (w *Worker) Clock() *Clock { return w.clock }

// Start reads the settings of <prefix>:meta (see Config.Settings),
// measures the Redis clock, checks L ≥ 1.5 × TCI + 2 RTT (with the
// median RTT of a clock measurement; up to startMeasurements of them, so a
// transient stall does not refuse the start), announces
// the concurrency once, then keeps all three fresh until Stop or ctx's end.
// It fails when Redis cannot be reached, the meta hash cannot be read, the
// check fails, or it was started before.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != nil {
		return errors.New("start worker: already started")
	}
	if err := w.readMeta(ctx); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	if err := w.checkPickupBudget(ctx); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	w.metrics.rtt.Set(w.clock.RTT().Seconds())
	if err := w.heartbeat(ctx, w.cfg.Concurrency); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	w.cancel, w.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { w.every(runCtx, w.cfg.HeartbeatInterval, w.beat) })
	wg.Go(func() { w.every(runCtx, w.cfg.ClockRefresh, w.sync) })
	wg.Go(func() { w.every(runCtx, w.cfg.MetaRefresh, w.refreshMeta) })
	go func() {
		wg.Wait()
		w.withdraw(ctx)
		close(w.done)
	}()
	w.cfg.Logger.Info("worker started", "id", w.cfg.ID, "concurrency", w.cfg.Concurrency,
		"redis_rtt", w.clock.RTT(), "queues", w.Queues())
	return nil
}

// Stop ends the heartbeat, clock and settings loops and withdraws the heartbeat (the
// dispatcher stops counting this worker's capacity). Stop the asynq server
// first: tasks still running keep their claims, and an unfinished job is
// recovered by the sweep. Stop is idempotent and may be called without
// Start.
func (w *Worker) Stop() {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// startMeasurements bounds the clock measurements Start takes for its check.
const startMeasurements = 3

// checkPickupBudget syncs the clock until CheckPickupBudget passes with its
// RTT, at most startMeasurements times, and returns the last refusal.
func (w *Worker) checkPickupBudget(ctx context.Context) error {
	var err error
	for range startMeasurements {
		if err = w.clock.Sync(ctx); err != nil {
			return err
		}
		if err = CheckPickupBudget(w.cfg.MinLead, w.cfg.TaskCheckInterval, w.clock.RTT()); err == nil {
			return nil
		}
	}
	return err
}

// CheckPickupBudget reports an error unless minLead ≥ 1.5 × tci + 2 × rtt
// (docs/design.md §1: a released job must reach a worker before its slot, and asynq
// picks up a task up to 1.5 × TaskCheckInterval after it was enqueued).
func CheckPickupBudget(minLead, tci, rtt time.Duration) error {
	need := tci*3/2 + 2*rtt
	if minLead < need {
		return fmt.Errorf("dispatch.min_lead %s is below 1.5 × worker.task_check_interval (%s) + 2 × Redis RTT (%s) = %s: raise min_lead (and lead ≥ 2 × min_lead) or lower task_check_interval",
			minLead, tci, rtt, need)
	}
	return nil
}

// heartbeatTTL is how long one announcement lives.
func (w *Worker) heartbeatTTL() time.Duration { return 3 * w.cfg.HeartbeatInterval }

func (w *Worker) heartbeat(ctx context.Context, concurrency int) error {
	if err := w.cfg.Announce(ctx, concurrency, w.heartbeatTTL()); err != nil {
		return fmt.Errorf("heartbeat worker %s: %w", w.cfg.ID, err)
	}
	return nil
}

func (w *Worker) beat(ctx context.Context) {
	if err := w.heartbeat(ctx, w.cfg.Concurrency); err != nil && ctx.Err() == nil {
		w.cfg.Logger.Warn("worker heartbeat failed", "err", err)
	}
}

func (w *Worker) sync(ctx context.Context) {
	if err := w.clock.Sync(ctx); err != nil {
		if ctx.Err() == nil {
			w.cfg.Logger.Warn("redis clock refresh failed; keeping the last estimate", "err", err)
		}
		return
	}
	w.metrics.rtt.Set(w.clock.RTT().Seconds())
}

// withdraw announces concurrency 0 with a short life at the end.
func (w *Worker) withdraw(ctx context.Context) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := w.cfg.Announce(wctx, 0, time.Second); err != nil {
		w.cfg.Logger.Warn("withdraw worker heartbeat", "err", err)
	}
}

// every calls f every interval until ctx ends.
func (w *Worker) every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

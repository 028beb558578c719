package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/tuning"
)

// Store is what the Dispatcher needs of *store.Store.
type Store interface {
	Shards() int
	Pass(ctx context.Context, shard int, cfg store.PassConfig) (store.PassResult, error)
	Capacity(ctx context.Context) (int, error)
	InFlight(ctx context.Context) (int, error)
	FinishRate(ctx context.Context) (float64, error)
	FairWeights(ctx context.Context) (store.FairWeights, error)
	TaskQueueLive(ctx context.Context, queue string) (bool, error)
}

var _ Store = (*store.Store)(nil)

// Enqueuer is what the Dispatcher needs of *asynq.Client.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

var _ Enqueuer = (*asynq.Client)(nil)

// taskLiveCache is how long the hand-off trusts its answer to whether a
// task queue has a live middleware (the API's default too).
const taskLiveCache = time.Second

// Defaults of Config's lease and hand-off tuning.
const (
	LeaseTTLDefault           = 3 * time.Second
	EnqueueParallelismDefault = 8
	BatchMaxDefault           = tuning.BatchMaxDefault // its value and the two below: internal/tuning
	MaxSleepDefault           = tuning.MaxSleepDefault
	// BatchMaxLimit is the most jobs a batch may carry (BatchMax's bound).
	BatchMaxLimit = tuning.BatchMaxLimit
)

// Config configures a Dispatcher. Store, Asynq and Redis are required; every
// other zero field takes its default.
type Config struct {
	// Store runs the pass script; it also gives the number of shards.
	Store Store
	// Asynq receives the released jobs (an *asynq.Client on the same Redis
	// as the workers).
	Asynq Enqueuer
	// Redis carries the shard leases and the wake-up subscription.
	Redis redis.UniversalClient
	// Prefix is the key prefix (the Store's); it names the lease keys, the
	// wake channels and the queues WebhookQueue and HTTPQueue. Default
	// store.PrefixDefault.
	Prefix string
	// Pass bounds each pass (D, L, grace, P, K, and the retention the sweep
	// applies); zero fields take the dispatch package's defaults
	// (PassConfig.WithDefaults). Its Capacity is ignored: the Dispatcher
	// sets it from the free worker capacity. Its Preclaim > 0 lets the
	// passes pre-claim due jobs (docs/design.md §2.2) — with the ε and
	// unless the mode <prefix>:meta's settings give — while every live
	// worker runs pre-claimed jobs (the roster, read with the settings:
	// a worker of an earlier version closes the gate); 0 never does.
	Pass store.PassConfig
	// MetaRefresh is how often the adjustable settings in <prefix>:meta
	// (grace, dead retention and cap, attempt log) are re-read: they
	// override Pass's, so every throttler applies what the last one started
	// wrote. Default store.MetaRefreshDefault.
	MetaRefresh time.Duration
	// MaxSleep bounds a shard loop's sleep between passes: the safety net
	// under the wake-ups, for a change no script published (or a PUBLISH
	// lost other than by a reconnection, which wakes every shard). An idle
	// shard costs one pass per MaxSleep. Default MaxSleepDefault.
	MaxSleep time.Duration
	// CapacityRefresh is the least interval between two readings of the
	// free worker capacity, taken only while passes release jobs or wait
	// for capacity; default Pass.Lead/4.
	CapacityRefresh time.Duration
	// LeaseTTL is a shard lease's lifetime and a membership's; renewed every
	// LeaseTTL/3, taken over by another Dispatcher at most LeaseTTL +
	// LeaseTTL/10 after its owner died. Default LeaseTTLDefault; at least
	// 30ms.
	LeaseTTL time.Duration
	// DisableLeases makes this Dispatcher pass every shard without holding
	// its lease. Safe (the scripts are atomic and fenced) but several such
	// Dispatchers contend for the same shards.
	DisableLeases bool
	// EnqueueParallelism is the most asynq enqueues one pass runs at once;
	// default EnqueueParallelismDefault.
	EnqueueParallelism int
	// BatchMax is the most webhook and http jobs one batch task carries,
	// 1 … BatchMaxLimit; default BatchMaxDefault.
	BatchMax int
	// BatchSpan is the widest span of send times within one batch; default
	// Pass.MinLead (L). A pass's releases span up to D, so it hands off at
	// least D/L batches, which the workers fetch in parallel, and no job of
	// a batch waits in its worker more than L longer than the batch's first.
	BatchSpan time.Duration
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives errors and lease changes; nil discards them.
	Logger *slog.Logger

	clock clock // the shard loops' clock; nil: the real one (tests set a fake)
}

func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, store.PrefixDefault)
	c.Pass = c.Pass.WithDefaults()
	c.MaxSleep = cmp.Or(c.MaxSleep, MaxSleepDefault)
	c.MetaRefresh = cmp.Or(c.MetaRefresh, store.MetaRefreshDefault)
	c.CapacityRefresh = cmp.Or(c.CapacityRefresh, c.Pass.Lead/4)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.EnqueueParallelism = cmp.Or(c.EnqueueParallelism, EnqueueParallelismDefault)
	c.BatchMax = cmp.Or(c.BatchMax, BatchMaxDefault)
	c.BatchSpan = cmp.Or(c.BatchSpan, c.Pass.MinLead)
	if c.clock == nil {
		c.clock = realClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Store == nil || c.Asynq == nil || c.Redis == nil {
		errs = append(errs, errors.New("Store, Asynq and Redis are required"))
	} else if c.Store.Shards() < 1 {
		errs = append(errs, fmt.Errorf("store has %d shards", c.Store.Shards()))
	}
	if c.Pass.Lead <= 0 || c.Pass.MinLead <= 0 || c.Pass.Grace <= 0 || c.Pass.Lead < c.Pass.MinLead {
		errs = append(errs, fmt.Errorf("pass timing: lead %s, min lead %s, grace %s: want all > 0 and lead ≥ min lead",
			c.Pass.Lead, c.Pass.MinLead, c.Pass.Grace))
	}
	if c.MaxSleep <= 0 || c.CapacityRefresh <= 0 || c.LeaseTTL < 30*time.Millisecond || c.EnqueueParallelism < 1 {
		errs = append(errs, fmt.Errorf("max sleep %s, capacity refresh %s, lease TTL %s, enqueue parallelism %d: want > 0, > 0, ≥ 30ms, ≥ 1",
			c.MaxSleep, c.CapacityRefresh, c.LeaseTTL, c.EnqueueParallelism))
	}
	if c.BatchMax < 1 || c.BatchMax > BatchMaxLimit || c.BatchSpan <= 0 {
		errs = append(errs, fmt.Errorf("batch max %d, batch span %s: want 1 … %d and > 0", c.BatchMax, c.BatchSpan, BatchMaxLimit))
	}
	return errors.Join(errs...)
}

// Dispatcher runs one loop per shard (see the package documentation). Its
// methods are safe for concurrent use.
type Dispatcher struct {
	cfg       Config
	shards    int
	metrics   *metrics
	leases    *leases
	budget    *budget
	live      *store.LiveCache                 // task queues served by a live middleware
	inspector *asynq.Inspector                 // deletes archived hand-off tasks (archive.go)
	owned     atomic.Int32                     // shards held (all of them with DisableLeases)
	members   atomic.Int32                     // live dispatchers sharing the leases, this one included
	wakes     []chan int64                     // per shard: the latest published earliest time, µs
	passCfg   atomic.Pointer[store.PassConfig] // Config.Pass under <prefix>:meta's settings (meta.go)
	// preclaimable: every live worker runs pre-claimed jobs (meta.go readGate)
	preclaimable atomic.Bool

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when every goroutine has ended
}

// New checks cfg, fills in its defaults and registers the metrics. The
// Dispatcher does nothing until Start.
func New(cfg Config) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new dispatcher: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new dispatcher: %w", err)
	}
	l, err := newLeases(cfg.Redis, cfg.Prefix, cfg.LeaseTTL.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("new dispatcher: %w", err)
	}
	d := &Dispatcher{
		cfg:     cfg,
		shards:  cfg.Store.Shards(),
		metrics: m,
		leases:  l,
		live:    store.NewLiveCache(cfg.Store.TaskQueueLive, taskLiveCache),
	}
	m.shards.Set(float64(d.shards))
	d.budget = newBudget(cfg.Store, d.handoffWaiting, cfg.CapacityRefresh)
	d.budget.headroomWait = func() time.Duration { return d.passConfig().Grace / 4 }
	// The first workers of a fleet (or the first after all had gone) open
	// the pre-claim gate before their capacity is shared out, not at the
	// gate's next reading up to gateRetry later.
	d.budget.workersCame = func(ctx context.Context) {
		if !d.preclaimable.Load() {
			d.readGate(ctx) // without the pre-claim on it reads nothing
		}
	}
	d.inspector = asynq.NewInspectorFromRedisClient(cfg.Redis)
	d.passCfg.Store(&d.cfg.Pass)
	d.wakes = make([]chan int64, d.shards)
	for i := range d.wakes {
		d.wakes[i] = make(chan int64, 1)
	}
	return d, nil
}

// Start subscribes to the shards' wake channels (waiting for Redis to
// confirm) and starts the shard loops. They run until Stop or until ctx is
// done. Start fails when called twice or when the subscription fails.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return errors.New("start dispatcher: already started")
	}
	channels := make([]string, d.shards)
	for i := range channels {
		channels[i] = wakeChannel(d.cfg.Prefix, i)
	}
	ps := d.cfg.Redis.Subscribe(ctx, channels...)
	if _, err := ps.Receive(ctx); err != nil { // the first confirmation: SUBSCRIBE has run
		_ = ps.Close()
		return fmt.Errorf("start dispatcher: subscribe to wake channels: %w", err)
	}
	d.readGate(ctx)
	d.readMeta(ctx)
	runCtx, cancel := context.WithCancel(ctx)
	d.started, d.cancel, d.done = true, cancel, make(chan struct{})

	var loops, fanout sync.WaitGroup
	fanout.Go(func() { d.fanOut(ps.ChannelWithSubscriptions()) })
	fanout.Go(func() { d.budget.run(runCtx) })
	fanout.Go(func() { d.followMeta(runCtx) })
	fanout.Go(func() { d.followGate(runCtx) })
	fanout.Go(func() { d.trimArchives(runCtx) })
	if !d.cfg.DisableLeases {
		d.beat(ctx) // the fair share is known before the loops take leases
		fanout.Go(func() { d.membership(runCtx) })
	}
	for shard := range d.shards {
		loops.Go(func() { d.loop(runCtx, shard) })
	}
	go func() {
		loops.Wait()
		_ = ps.Close() // ends fanOut
		fanout.Wait()
		close(d.done)
	}()
	d.cfg.Logger.Info("dispatcher started", "shards", d.shards, "leases", !d.cfg.DisableLeases,
		"lead", d.cfg.Pass.Lead, "min_lead", d.cfg.Pass.MinLead, "max_sleep", d.cfg.MaxSleep)
	return nil
}

// Stop ends the shard loops, gives up the leases held and waits for every
// goroutine to end. A pass in progress finishes its hand-off to asynq first
// (bounded by max(D, grace/2)). Stop is idempotent and may be called without Start.
func (d *Dispatcher) Stop() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// fanOut turns wake messages into per-shard wake-ups; a full wake channel
// keeps the earliest time. A subscription confirmation after the first —
// go-redis subscribes again after a reconnection, and messages published
// meanwhile are lost — wakes every shard at once. It ends when the
// subscription is closed.
func (d *Dispatcher) fanOut(msgs <-chan any) {
	byChannel := make(map[string]int, d.shards)
	for i := range d.shards {
		byChannel[wakeChannel(d.cfg.Prefix, i)] = i
	}
	confirmed := 1 // Start received the first confirmation
	for msg := range msgs {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			// One confirmation per channel: the first of each round after
			// Start's (all channels are subscribed by then) wakes.
			if confirmed++; confirmed <= d.shards || (confirmed-1)%d.shards != 0 {
				continue
			}
			d.metrics.resubscribed.Inc()
			for shard := range d.shards {
				d.wake(shard, 0)
			}
		case *redis.Message:
			if shard, ok := byChannel[m.Channel]; ok {
				d.wake(shard, parseMicros(m.Payload)) // 0 (now) when malformed
			}
		}
	}
}

// wake tells shard's loop to pass at at µs (Redis time) − D; 0 is now. A
// pending earlier wake-up is kept.
func (d *Dispatcher) wake(shard int, at int64) {
	ch := d.wakes[shard]
	for {
		select {
		case ch <- at:
			return
		case old := <-ch:
			at = min(at, old)
		}
	}
}

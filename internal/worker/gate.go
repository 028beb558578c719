package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/tuning"
	"github.com/sluicehq/sluice/internal/wire"
)

// Defaults of GateConfig.
const (
	SafetyNetDefault   = tuning.SafetyNetDefault // its value: internal/tuning
	LegacyQuietDefault = 10 * time.Second
)

// GateConfig configures a DequeueGate.
type GateConfig struct {
	// Redis is where the hand-off channel is subscribed to (one connection
	// for the life of the gate). Required.
	Redis redis.UniversalClient
	// Prefix names the channel, wire.HandoffChannel(Prefix); default
	// store.PrefixDefault.
	Prefix string
	// Queues are the announced queues the gate answers for: the hand-off
	// queues, wire.HandoffQueueNames(Prefix).
	Queues []string
	// Legacy are queues nobody announces: the per-job queues of dispatchers
	// of an earlier version (wire.WebhookQueue, wire.HTTPQueue). One is
	// answered for only once no real poll found a task in it for
	// LegacyQuiet (from the start, a legacy queue counts as quiet): an
	// earlier dispatcher handing off keeps its queue polled on every poll,
	// as without the gate, and an idle one costs a poll per SafetyNet — so
	// during a rolling upgrade the first task of an earlier dispatcher after
	// a quiet spell waits up to SafetyNet (its claim then re-slots it). The
	// dequeues of any queue in neither list pass untouched.
	Legacy []string
	// SafetyNet is the longest a queue goes without a real poll while it is
	// believed empty: a batch whose announcement was lost (or that asynq
	// itself put back, from a server shut down mid-batch), or the first
	// task on a quiet legacy queue, is picked up within it. Default
	// SafetyNetDefault.
	SafetyNet time.Duration
	// LegacyQuiet is how long a legacy queue must have been found empty
	// before the gate answers for it; default LegacyQuietDefault.
	LegacyQuiet time.Duration
	// Hold is the longest a dequeue is held when every gated queue is
	// known empty: it waits for an announcement (or the next safety-net
	// poll) instead of answering at once and leaving the server to sleep
	// its task-check interval, so an announced batch is fetched within a
	// pub/sub delivery. Default SafetyNet (a hold never outlasts the next
	// safety-net poll anyway), so that asynq's server
	// rarely finishes a round and sleeps its TaskCheckInterval, during
	// which an announcement would wait; negative: never hold. A hold also
	// delays the server's shutdown by at most that long.
	Hold time.Duration
	// Logger receives the subscription's errors; nil discards them.
	Logger *slog.Logger
}

// DequeueGate spares Redis the idle polls of an asynq server: it is a
// go-redis hook (redis.Hook) for the client the server polls through — a
// client of its own, so that nothing else is gated — that answers asynq's
// dequeue script locally with redis.Nil ("empty", no round trip) for a queue
// known to be empty. A queue is known empty when its last real poll found
// it empty, no message naming it arrived on wire.HandoffChannel(Prefix)
// since that poll was sent, and that poll is less than SafetyNet old. A
// dispatcher publishes a queue's name after enqueuing a batch on it, so a
// batch is fetched at once: while every gated queue is known empty a
// dequeue is held (up to GateConfig.Hold) until an announcement arrives,
// and a dequeue of a queue known empty is redirected to an announced queue
// when there is one (the same script on that queue's keys: asynq acks a
// task by the queue its message names), so the server neither sleeps its
// TaskCheckInterval nor finishes a round of empty queues before reaching
// the announced one.
//
// Until the subscription is confirmed, and whenever it breaks, nothing is
// known empty: every dequeue goes to Redis; on each (re)subscription every
// queue is marked dirty. Legacy queues, which nobody announces, are
// answered for only once they have been quiet for a while (see
// GateConfig.Legacy). Every other command (asynq's heartbeats,
// forwarder, recoverer, …; dequeues of other queues) passes untouched.
//
// The zero DequeueGate is not usable; NewDequeueGate returns one. Its
// methods are safe for concurrent use.
type DequeueGate struct {
	cfg     GateConfig
	byKey   map[string]*gateQueue // by the queue's asynq pending key
	byName  map[string]*gateQueue
	local   atomic.Int64 // dequeues answered locally
	real    atomic.Int64 // dequeues of gated queues sent to Redis
	mu      sync.Mutex
	hearing bool          // the subscription is confirmed and unbroken
	wake    chan struct{} // closed (and replaced) at every hearing change: wakes every held dequeue
	nudge   chan struct{} // a token per announcement: wakes one held dequeue
	cancel  context.CancelFunc
	done    chan struct{}
}

// gateQueue is one queue's state, guarded by the gate's mu.
type gateQueue struct {
	name      string    // the asynq queue
	announced bool      // a hand-off queue (else a legacy one)
	empty     bool      // the last real poll, sent at polled, found it empty
	polled    time.Time // when that poll was sent
	found     time.Time // legacy: the last real poll that found a task (zero: none yet)
	version   uint64    // bumped by every announcement
}

// knownEmpty reports whether a dequeue of q at at may be answered locally;
// hearing is whether announcements are heard.
func (q *gateQueue) knownEmpty(at time.Time, hearing bool, cfg *GateConfig) bool {
	if !q.empty || at.Sub(q.polled) >= cfg.SafetyNet {
		return false
	}
	if q.announced {
		return hearing
	}
	return q.quiet(at, cfg)
}

// quiet reports whether legacy queue q has had no task found for
// cfg.LegacyQuiet at at.
func (q *gateQueue) quiet(at time.Time, cfg *GateConfig) bool {
	return at.Sub(q.found) >= cfg.LegacyQuiet
}

var _ redis.Hook = (*DequeueGate)(nil)

// NewDequeueGate checks cfg and fills in its defaults. Add the gate to the
// asynq server's client (AddHook) and Start it; before Start (and after
// Stop) it passes every dequeue to Redis.
func NewDequeueGate(cfg GateConfig) (*DequeueGate, error) {
	if cfg.Redis == nil {
		return nil, errors.New("new dequeue gate: Redis is required")
	}
	if cfg.SafetyNet < 0 || cfg.LegacyQuiet < 0 {
		return nil, fmt.Errorf("new dequeue gate: negative safety net %s or legacy quiet %s", cfg.SafetyNet, cfg.LegacyQuiet)
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, store.PrefixDefault)
	cfg.SafetyNet = cmp.Or(cfg.SafetyNet, SafetyNetDefault)
	cfg.LegacyQuiet = cmp.Or(cfg.LegacyQuiet, LegacyQuietDefault)
	cfg.Hold = cmp.Or(cfg.Hold, cfg.SafetyNet)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &DequeueGate{cfg: cfg, byKey: map[string]*gateQueue{}, byName: map[string]*gateQueue{}, wake: make(chan struct{}),
		nudge: make(chan struct{}, nudgeTokens)}
	for _, q := range cfg.Queues {
		s := &gateQueue{name: q, announced: true}
		g.byKey[asynqPendingKey(q)], g.byName[q] = s, s
	}
	for _, q := range cfg.Legacy {
		s := &gateQueue{name: q}
		g.byKey[asynqPendingKey(q)] = s
	}
	return g, nil
}

// Gate returns the DequeueGate for w's queues (the hand-off queues
// announced on wire.HandoffChannel(Prefix), the legacy ones not),
// subscribing on rdb, with safetyNet (0: SafetyNetDefault) and w's
// logger; its counts are registered with w's Registerer as
// sluice_worker_dequeues_total{answered="gate"|"redis"}. Add it to the
// asynq server's own client and Start it. Call it once per Worker.
func (w *Worker) Gate(rdb redis.UniversalClient, safetyNet time.Duration) (*DequeueGate, error) {
	g, err := NewDequeueGate(GateConfig{Redis: rdb, Prefix: w.cfg.Prefix, Queues: wire.HandoffQueueNames(w.cfg.Prefix),
		Legacy: []string{wire.WebhookQueue(w.cfg.Prefix), wire.HTTPQueue(w.cfg.Prefix)}, SafetyNet: safetyNet,
		Logger: w.cfg.Logger})
	if err != nil || w.cfg.Registerer == nil {
		return g, err
	}
	for answered, n := range map[string]*atomic.Int64{"gate": &g.local, "redis": &g.real} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_worker_dequeues_total",
			Help:        "asynq dequeues of the served queues, by who answered: the dequeue gate (queue known empty) or Redis.",
			ConstLabels: prometheus.Labels{"answered": answered}}, func() float64 { return float64(n.Load()) })
		if err := w.cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("register dequeue gate metrics: %w", err)
		}
	}
	return g, nil
}

// StartGate adds w's Gate to client, the asynq server's own Redis client,
// and starts it, subscribing on rdb; stop ends it (close client after).
func (w *Worker) StartGate(ctx context.Context, rdb, client redis.UniversalClient, safetyNet time.Duration) (stop func(), err error) {
	gate, err := w.Gate(rdb, safetyNet)
	if err != nil {
		return nil, err
	}
	client.AddHook(gate)
	if err := gate.Start(ctx); err != nil {
		return nil, err
	}
	return gate.Stop, nil
}

// asynqPendingKey is asynq's list of a queue's pending tasks
// (wire.AsynqQueueKey), the dequeue script's KEYS[1]; its KEYS[2…4] are the
// queue's paused, active and lease keys.
func asynqPendingKey(q string) string { return wire.AsynqQueueKey(q, "pending") }

// Counts returns how many dequeues of the gated queues were answered
// locally and how many went to Redis.
func (g *DequeueGate) Counts() (local, real int64) { return g.local.Load(), g.real.Load() }

// DialHook passes through.
func (g *DequeueGate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook passes through (asynq dequeues outside pipelines).
func (g *DequeueGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook answers the dequeues of queues known empty with redis.Nil
// and records the outcome of the others.
func (g *DequeueGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		q := g.dequeued(cmd.Args())
		if q == nil {
			return next(ctx, cmd)
		}
		// A dequeue that was held (asynq is idle) and then found its queue
		// empty at a real poll — the safety net's, or a stale
		// announcement's — goes back to holding rather than answering: an
		// empty answer makes asynq sleep its TaskCheckInterval, blind to
		// announcements (a batch announced then waited up to that long:
		// about one due-at-once job in 20 sent from idle, with the 500 ms
		// safety net and a 20 ms interval). Bounded by maxHeld, by ctx, and
		// by the announcements being heard (Stop, or a lost subscription,
		// ends it at once). So does one that finds every queue known empty
		// after its hold because another server's dequeue has just sent
		// the safety-net poll it was held for — until it has been with the
		// gate for Hold, as a dequeue held without a poll would be. A
		// dequeue never held answers as Redis did.
		start, wasHeld := time.Now(), false
		for {
			var real, held bool
			var err error
			q, real, held, err = g.gated(ctx, cmd, q, next)
			wasHeld = wasHeld || held
			if !wasHeld || !errors.Is(err, redis.Nil) || !g.holding(ctx, start) ||
				(!real && time.Since(start) >= g.cfg.Hold) {
				return err
			}
			cmd.SetErr(nil)
		}
	}
}

// maxHeld bounds, in safety nets, how long one dequeue stays with the gate
// (holds and the real polls between them) before an empty answer goes
// back to asynq.
const maxHeld = 20

// holding reports whether a dequeue taken at start may be held again.
func (g *DequeueGate) holding(ctx context.Context, start time.Time) bool {
	if g.cfg.Hold <= 0 || ctx.Err() != nil || time.Since(start) >= maxHeld*g.cfg.SafetyNet {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hearing
}

// gated answers the gated dequeue cmd of queue q once: locally, when q (or,
// redirected, every announced queue) is known empty after any hold, else
// by Redis through next — then real is true; held is whether it was held.
// It returns the queue cmd names now (another one once redirected).
func (g *DequeueGate) gated(ctx context.Context, cmd redis.Cmder, q *gateQueue, next redis.ProcessHook) (_ *gateQueue, real, held bool, err error) {
	at := time.Now()
	g.mu.Lock()
	known := q.knownEmpty(at, g.hearing, &g.cfg)
	if known {
		if hold := g.holdFor(at); hold > 0 {
			wake := g.wake
			g.mu.Unlock()
			g.hold(ctx, wake, hold)
			held = true
			at = time.Now()
			g.mu.Lock()
			known = q.knownEmpty(at, g.hearing, &g.cfg)
		}
	}
	if known {
		if d := g.dirty(at); d != nil {
			redirect(cmd.Args(), d.name)
			q, known = d, false
		}
	}
	version := q.version
	if !known && q.empty {
		// The safety net's poll of a queue believed empty: the dequeues
		// of the other servers wait for its answer rather than repeat it.
		q.polled = at
	}
	g.mu.Unlock()
	if known {
		g.local.Add(1)
		cmd.SetErr(redis.Nil)
		return q, false, held, redis.Nil
	}
	g.real.Add(1)
	err = next(ctx, cmd)
	g.mu.Lock()
	if q.version == version { // no announcement since the poll was sent
		q.empty, q.polled = errors.Is(err, redis.Nil), at
	}
	if err == nil {
		q.found = at
	}
	g.mu.Unlock()
	return q, true, held, err
}

// holdFor is how long a dequeue of a queue known empty at at is held: 0
// unless every gated queue is known empty, else up to Hold and no later
// than the first safety-net poll due. Called with mu held.
func (g *DequeueGate) holdFor(at time.Time) time.Duration {
	if g.cfg.Hold <= 0 {
		return 0
	}
	hold := g.cfg.Hold
	for _, q := range g.byKey {
		if !q.knownEmpty(at, g.hearing, &g.cfg) {
			return 0
		}
		hold = min(hold, q.polled.Add(g.cfg.SafetyNet).Sub(at))
	}
	return hold
}

// hold waits for wake, an announcement's token, d or ctx's end.
func (g *DequeueGate) hold(ctx context.Context, wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
	case <-g.nudge:
	case <-t.C:
	case <-ctx.Done():
	}
}

// dirty is the queue a dequeue of a queue known empty at at polls instead,
// or nil: an announced queue not known empty (it may hold a batch), else a
// quiet legacy queue (no task found for LegacyQuiet) whose safety-net poll
// is due — polled by this dequeue rather than answering it empty, which
// would let asynq finish its round and sleep its TaskCheckInterval, deaf to
// announcements (a held dequeue answered so: one job in ~20 sent from idle
// waited up to that long). A legacy queue in use is left to asynq's own
// dequeue of it, as without the gate. Called with mu held.
func (g *DequeueGate) dirty(at time.Time) *gateQueue {
	for _, q := range g.byName {
		if !q.knownEmpty(at, g.hearing, &g.cfg) {
			return q
		}
	}
	for _, q := range g.byKey {
		if !q.announced && q.quiet(at, &g.cfg) && !q.knownEmpty(at, g.hearing, &g.cfg) {
			return q
		}
	}
	return nil
}

// redirect points the dequeue args (see dequeued) at queue q: its four
// keys and its task key prefix (asynq internal/base: TaskKeyPrefix).
func redirect(args []any, q string) {
	pending := asynqPendingKey(q)
	prefix := strings.TrimSuffix(pending, "pending")
	args[3], args[4], args[5], args[6] = pending, prefix+"paused", prefix+"active", prefix+"lease"
	if len(args) > 8 {
		args[8] = prefix + "t:"
	}
}

// dequeued is the gated queue whose dequeue args is, or nil: EVALSHA or
// EVAL with the 4 keys pending, paused, active, lease of one queue.
func (g *DequeueGate) dequeued(args []any) *gateQueue {
	if len(args) < 7 {
		return nil
	}
	name, _ := args[0].(string)
	if !strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval") {
		return nil
	}
	key, _ := args[3].(string)
	q := g.byKey[key]
	if q == nil {
		return nil
	}
	prefix := strings.TrimSuffix(key, "pending")
	for i, suffix := range []string{"paused", "active", "lease"} {
		if k, _ := args[4+i].(string); k != prefix+suffix {
			return nil
		}
	}
	if n := fmt.Sprint(args[2]); n != "4" {
		return nil
	}
	return q
}

// announced marks queue dirty — its next dequeue goes to Redis — and
// wakes one held dequeue to fetch the batch announced: one poll per batch,
// where waking every held dequeue (one per asynq server) sent them all to
// the queue and all but one came back empty. A dequeue not held, or held
// later, polls a dirty queue anyway; a token that finds no dequeue held
// waits for the next hold (which then looks once and holds again), and
// tokens beyond nudgeTokens are dropped.
func (g *DequeueGate) announced(queue string) {
	q := g.byName[queue]
	if q == nil {
		return
	}
	g.mu.Lock()
	q.version++
	q.empty = false
	g.mu.Unlock()
	select {
	case g.nudge <- struct{}{}:
	default:
	}
}

// nudgeTokens bounds the announcements waiting for a held dequeue.
const nudgeTokens = 64

// wakeAll releases the held dequeues. Called with mu held.
func (g *DequeueGate) wakeAll() {
	close(g.wake)
	g.wake = make(chan struct{})
}

// hear sets whether announcements are being heard; either way every queue
// becomes dirty (what was announced while deaf is unknown).
func (g *DequeueGate) hear(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hearing = on
	for _, q := range g.byName {
		q.version++
		q.empty = false
	}
	g.wakeAll()
}

// Start subscribes to the hand-off channel and follows it until Stop or
// ctx's end, resubscribing (after a short pause) when the connection
// breaks. It returns once the first subscription is confirmed, or fails
// when it cannot be or the gate was started before.
func (g *DequeueGate) Start(ctx context.Context) error {
	g.mu.Lock()
	if g.done != nil {
		g.mu.Unlock()
		return errors.New("start dequeue gate: already started")
	}
	runCtx, cancel := context.WithCancel(ctx)
	g.cancel, g.done = cancel, make(chan struct{})
	g.mu.Unlock()
	ps := g.cfg.Redis.Subscribe(runCtx, wire.HandoffChannel(g.cfg.Prefix))
	if err := g.receive(runCtx, ps); err != nil {
		cancel()
		_ = ps.Close()
		close(g.done)
		return fmt.Errorf("start dequeue gate: subscribe %s: %w", wire.HandoffChannel(g.cfg.Prefix), err)
	}
	stopped := context.AfterFunc(runCtx, func() { _ = ps.Close() }) // ends a blocked Receive
	go func() {
		defer close(g.done)
		defer stopped()
		g.follow(runCtx, ps)
		// Deaf from here on, whatever the last receive returned: a dequeue
		// held on after ctx's end (the worker's signal) would hold asynq's
		// shutdown, which waits for the fetch in progress.
		g.hear(false)
	}()
	return nil
}

// Stop ends the subscription, as the end of Start's ctx does; from then on
// every dequeue goes to Redis. It is idempotent and may be called without
// Start.
func (g *DequeueGate) Stop() {
	g.mu.Lock()
	cancel, done := g.cancel, g.done
	g.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// receive handles one message of the subscription.
func (g *DequeueGate) receive(ctx context.Context, ps *redis.PubSub) error {
	msg, err := ps.Receive(ctx)
	if err != nil {
		g.hear(false)
		return err
	}
	switch m := msg.(type) {
	case *redis.Subscription:
		g.hear(m.Kind == "subscribe")
	case *redis.Message:
		g.announced(m.Payload)
	}
	return nil
}

// resubscribePause is the wait after a broken subscription before the next
// attempt.
const resubscribePause = 100 * time.Millisecond

// follow receives until ctx ends; go-redis resubscribes on the next Receive
// after a broken connection.
func (g *DequeueGate) follow(ctx context.Context, ps *redis.PubSub) {
	pause := time.NewTimer(0)
	<-pause.C
	for ctx.Err() == nil {
		err := g.receive(ctx, ps)
		if err == nil || ctx.Err() != nil {
			continue
		}
		g.cfg.Logger.Warn("hand-off subscription broken; polling every queue until it is back", "err", err)
		pause.Reset(resubscribePause)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
	}
}

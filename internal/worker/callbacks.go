package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/jobview"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/version"
	"github.com/sluicehq/sluice/internal/webhook"
)

// CallbackStore is what Callbacks needs of *store.Store.
type CallbackStore interface {
	Shards() int
	TakeCallbacks(ctx context.Context, shard, n int, lease time.Duration) ([]string, time.Duration, error)
	CallbackDone(ctx context.Context, id string, ended time.Time, o store.CallbackOutcome) (store.CallbackReport, error)
	GetJob(ctx context.Context, id string) (store.Job, error)
}

var _ CallbackStore = (*store.Store)(nil)

// Defaults of CallbacksConfig.
const (
	CallbackPollDefault        = 2 * time.Second
	CallbackTimeoutDefault     = 10 * time.Second
	CallbackConcurrencyDefault = 16
)

// CallbacksConfig configures Callbacks. Store, Client and Signing are
// required; every other zero field takes its default.
type CallbacksConfig struct {
	Store CallbackStore
	// Client sends every callback: the SSRF-safe webhook.NewClient of the
	// job deliveries (the egress guard refuses private addresses at dial
	// time).
	Client *http.Client
	// Signing gives the tenant's signing keys (Standard Webhooks), as for
	// webhook jobs: a tenant without a key whose policy is not unsigned is
	// retried, never sent unsigned.
	Signing *SigningKeys
	// Redis, when set, carries the subscription to every shard's callback
	// channel (store.CallbackChannel under Prefix): a callback queued due
	// now is taken as soon as its announcement arrives. Without it (or
	// while the subscription is down) only the due times and Poll wake the
	// sender.
	Redis  redis.UniversalClient
	Prefix string
	// Poll is the safety net: a shard's callback set is read at least this
	// often even when no announcement or due time asks for it (another
	// worker's lapsed lease, a lost announcement); default
	// CallbackPollDefault. Otherwise a shard is read when an announcement
	// arrives or when the earliest due time the last read reported comes.
	Poll time.Duration
	// Timeout bounds one send; default CallbackTimeoutDefault.
	Timeout time.Duration
	// Lease is how long a taken callback is kept from other senders: past
	// it, a callback whose sender died is sent again (at least once).
	// Longer than Timeout; default Timeout + 5 s.
	Lease time.Duration
	// Concurrency is the most callbacks sent at once; default
	// CallbackConcurrencyDefault.
	Concurrency int
	// UserAgent is "Sluice/<version>"; default version.UserAgent().
	UserAgent string
	// Registerer receives the metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger receives errors; nil discards them.
	Logger *slog.Logger
}

func (c CallbacksConfig) withDefaults() CallbacksConfig {
	c.Poll = cmp.Or(c.Poll, CallbackPollDefault)
	c.Timeout = cmp.Or(c.Timeout, CallbackTimeoutDefault)
	c.Lease = cmp.Or(c.Lease, c.Timeout+5*time.Second)
	c.Concurrency = cmp.Or(c.Concurrency, CallbackConcurrencyDefault)
	c.UserAgent = cmp.Or(c.UserAgent, version.UserAgent())
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c CallbacksConfig) validate() error {
	var errs []error
	if c.Store == nil || c.Client == nil || c.Signing == nil {
		errs = append(errs, errors.New("Store, Client and Signing are required"))
	}
	if c.Poll < 0 || c.Timeout < 0 || c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("poll %s, timeout %s, concurrency %d: want none negative", c.Poll, c.Timeout, c.Concurrency))
	}
	if c.Lease <= c.Timeout {
		errs = append(errs, fmt.Errorf("lease %s: want longer than the timeout %s", c.Lease, c.Timeout))
	}
	return errors.Join(errs...)
}

// Callbacks sends the callbacks of terminal jobs (store.TakeCallbacks):
// POST {"type": "job.<state>", "timestamp": <ended>, "data": <the job as
// GET /v1/jobs/{id} shows it>} to the job's callback URL, signed with the
// tenant's keys (Standard Webhooks, webhook-id "cb_<job id>_<ended µs>",
// the same on every try), through the egress-guarded client. A 2xx is
// delivered; an egress refusal or a callback of a job the store no longer
// knows is dropped; anything else is retried on the tenant's retry curve
// and dropped after retry.max_attempts failures (store.CallbackDone).
// Callbacks never pass through a tenant's rate or concurrency: they are
// sent as soon as their announcement arrives. Every worker process runs one; the
// store's lease keeps two from sending one callback at once, and a killed
// sender's callbacks are sent again when their lease ends.
type Callbacks struct {
	cfg     CallbacksConfig
	slots   chan struct{}
	freed   chan struct{} // a send slot freed (capacity 1)
	sent    *prometheus.CounterVec
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	inbound sync.WaitGroup
}

// NewCallbacks checks cfg, fills in its defaults and registers the metric
// sluice_worker_callbacks_total{outcome}.
func NewCallbacks(cfg CallbacksConfig) (*Callbacks, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new callbacks: %w", err)
	}
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_worker_callbacks_total",
		Help: "Callback sends by outcome: delivered, retry, dropped (after max attempts or refused by the egress guard), stale, error.",
	}, []string{"outcome"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(sent); err != nil {
			return nil, fmt.Errorf("new callbacks: %w", err)
		}
	}
	return &Callbacks{cfg: cfg, slots: make(chan struct{}, cfg.Concurrency), freed: make(chan struct{}, 1), sent: sent}, nil
}

// Start runs the sender until Stop or ctx's end: it reads a shard's
// callback set when the shard's channel announces a callback, when the
// earliest due time its last read reported comes, and at least every Poll.
// It fails when started twice.
func (c *Callbacks) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return errors.New("start callbacks: already started")
	}
	runCtx, cancel := context.WithCancel(ctx)
	c.cancel, c.done = cancel, make(chan struct{})
	announced := make(chan int, 64)
	var sub *redis.PubSub
	if c.cfg.Redis != nil {
		chans := make([]string, c.cfg.Store.Shards())
		for shard := range chans {
			chans[shard] = store.CallbackChannel(c.cfg.Prefix, shard)
		}
		sub = c.cfg.Redis.Subscribe(runCtx, chans...)
		go c.listen(sub, chans, announced)
	}
	go func() {
		defer close(c.done)
		if sub != nil {
			defer sub.Close()
		}
		c.run(runCtx, announced)
		c.inbound.Wait()
	}()
	return nil
}

// listen forwards each announcement as its shard until sub closes.
func (c *Callbacks) listen(sub *redis.PubSub, chans []string, announced chan<- int) {
	shardOf := make(map[string]int, len(chans))
	for shard, ch := range chans {
		shardOf[ch] = shard
	}
	for msg := range sub.Channel() {
		select {
		case announced <- shardOf[msg.Channel]:
		default: // full: the run loop reads every shard soon anyway
		}
	}
}

// run is the sender's loop: due[shard] is the local time its set is read
// next (zero: now).
func (c *Callbacks) run(ctx context.Context, announced <-chan int) {
	due := make([]time.Time, c.cfg.Store.Shards())
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		next := now.Add(c.cfg.Poll)
		for shard := range due {
			if !due[shard].After(now) {
				due[shard] = c.take(ctx, shard, now)
			}
			if due[shard].Before(next) {
				next = due[shard]
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case shard := <-announced:
			due[shard] = time.Time{}
		case <-c.freed:
			clear(due) // a send slot freed while callbacks were left waiting for one
		case <-timer.C:
		}
	}
}

// take takes as many of shard's due callbacks as there are free send
// slots, sends each in its own goroutine, and returns when to read the
// shard next: when its earliest remaining callback is due, at most Poll
// from now.
func (c *Callbacks) take(ctx context.Context, shard int, now time.Time) time.Time {
	free := cap(c.slots) - len(c.slots)
	if free == 0 || ctx.Err() != nil {
		return now.Add(c.cfg.Poll) // a freed slot (c.freed) brings it forward
	}
	ids, next, err := c.cfg.Store.TakeCallbacks(ctx, shard, free, c.cfg.Lease)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("take callbacks failed", "shard", shard, "err", err)
		}
		return now.Add(c.cfg.Poll)
	}
	for _, id := range ids {
		c.slots <- struct{}{}
		c.inbound.Go(func() {
			defer c.release()
			c.send(ctx, id)
		})
	}
	if len(ids) == free || next < 0 || next > c.cfg.Poll {
		next = c.cfg.Poll
	}
	if len(ids) == free {
		next = 0 // more may be due: read again as soon as a slot frees
	}
	return now.Add(next)
}

// release frees a send slot and tells the loop, which may have left
// callbacks due for want of one.
func (c *Callbacks) release() {
	<-c.slots
	select {
	case c.freed <- struct{}{}:
	default:
	}
}

// Stop ends the sender and waits for the sends under way. Idempotent; a
// Callbacks never started stops at once.
func (c *Callbacks) Stop() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// send sends job id's callback once and records the outcome.
func (c *Callbacks) send(ctx context.Context, id string) {
	j, err := c.cfg.Store.GetJob(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		c.record(ctx, id, time.Time{}, store.CallbackDrop) // the store drops an entry whose record is gone
		return
	}
	if err != nil {
		c.sent.WithLabelValues("error").Inc()
		c.cfg.Logger.Warn("read job for its callback; it is sent when its lease ends", "job", id, "err", err)
		return
	}
	if !j.State.Terminal() || j.Callback == "" {
		c.record(ctx, id, j.Ended, store.CallbackDrop) // stale: replayed since
		return
	}
	o := c.post(ctx, j)
	if ctx.Err() != nil && o != store.CallbackDelivered {
		return // stopping: not the receiver's failure; sent again when the lease ends
	}
	c.record(ctx, id, j.Ended, o)
}

// post POSTs j's callback event and judges the answer.
func (c *Callbacks) post(ctx context.Context, j store.Job) store.CallbackOutcome {
	keys, err := c.cfg.Signing.Keys(ctx, j.Tenant)
	if err != nil {
		c.cfg.Logger.Warn("no signing key for a callback; retried later", "job", j.ID, "tenant", j.Tenant, "err", err)
		return store.CallbackRetry
	}
	body, err := CallbackEvent(j)
	if err != nil {
		c.cfg.Logger.Error("encode callback", "job", j.ID, "err", err)
		return store.CallbackDrop
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, j.Callback, bytes.NewReader(body))
	if err != nil {
		c.cfg.Logger.Warn("callback URL refused", "job", j.ID, "err", err)
		return store.CallbackDrop
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	webhook.Headers(req.Header, keys, CallbackID(j), time.Now(), body)
	resp, err := c.cfg.Client.Do(req)
	switch {
	case errors.Is(err, webhook.ErrEgressDenied):
		c.cfg.Logger.Warn("callback refused by the egress guard; dropped", "job", j.ID, "err", err)
		return store.CallbackDrop
	case err != nil:
		return store.CallbackRetry
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return store.CallbackDelivered
	}
	return store.CallbackRetry
}

// record reports a send to the store and counts it.
func (c *Callbacks) record(ctx context.Context, id string, ended time.Time, o store.CallbackOutcome) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	r, err := c.cfg.Store.CallbackDone(dctx, id, ended, o)
	if err != nil {
		c.sent.WithLabelValues("error").Inc()
		c.cfg.Logger.Warn("record callback; it is sent again when its lease ends", "job", id, "err", err)
		return
	}
	label := map[store.CallbackStatus]string{store.CallbackDone: "delivered", store.CallbackRetried: "retry",
		store.CallbackDropped: "dropped", store.CallbackStale: "stale"}[r.Status]
	c.sent.WithLabelValues(cmp.Or(label, "error")).Inc()
	if r.Status == store.CallbackDropped {
		c.cfg.Logger.Warn("callback dropped", "job", id, "failures", r.Failures, "outcome", string(o))
	}
}

// CallbackID is the webhook-id of j's callback: "cb_<job id>_<ended µs>",
// the same on every try of one terminal state.
func CallbackID(j store.Job) string {
	return "cb_" + j.ID + "_" + strconv.FormatInt(j.Ended.UnixMicro(), 10)
}

// CallbackEvent is the body of j's callback: {"type": "job.succeeded" |
// "job.dead" | "job.canceled", "timestamp": j's end (RFC 3339, ms),
// "data": jobview.Of(j)}.
func CallbackEvent(j store.Job) ([]byte, error) {
	b, err := json.Marshal(struct {
		Type      string       `json:"type"`
		Timestamp *string      `json:"timestamp"`
		Data      jobview.View `json:"data"`
	}{"job." + string(j.State), jobview.TimeString(j.Ended), jobview.Of(j)})
	if err != nil {
		return nil, fmt.Errorf("encode callback of job %s: %w", j.ID, err)
	}
	return b, nil
}

package sluicetask

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
	"github.com/sluicehq/sluice/internal/worker"
)

// ErrNotStarted is wrapped by the error the wrapped handler returns for a
// Sluice job that arrives before Start: start the Middleware before the
// asynq server. (The job is not lost: its lease expires and Sluice's sweep
// returns it to the tenant's backlog.)
var ErrNotStarted = errors.New("sluicetask middleware not started")

// Middleware runs Sluice task jobs in an asynq server (see the package
// documentation). Its methods are safe for concurrent use.
type Middleware struct {
	cfg Config

	worker atomic.Pointer[worker.Worker] // set by Start

	mu      sync.Mutex
	started bool
	// built is the Worker of a Start that failed after building it, for
	// the next Start to reuse (its metrics are registered), with the
	// deployment it was built for.
	built    *worker.Worker
	builtFor deployment
}

// New checks cfg and fills in its defaults. It does no I/O: Start reads
// Sluice's deployment parameters and announces the instance.
func New(cfg Config) (*Middleware, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, errorf("new middleware: %w", err)
	}
	return &Middleware{cfg: cfg}, nil
}

// ID is the instance's id in the heartbeats.
func (m *Middleware) ID() string { return m.cfg.ID }

// Start reads <prefix>:meta (shards, dispatch.min_lead and the adjustable
// settings: dispatch.tolerance, retention, throttle), measures Redis's
// clock, checks dispatch.min_lead ≥ 1.5 × TaskCheckInterval + 2 × Redis
// RTT, announces the instance (the queues' heartbeats and the concurrency),
// then keeps the heartbeats, the clock and the settings fresh (one read of
// <prefix>:meta every few seconds) until Stop or ctx's end. Before any
// Sluice process has written <prefix>:meta, Sluice's defaults apply (and a
// warning is logged); the settings are followed once a throttler writes
// them, shards and dispatch.min_lead from the next Start. It fails when
// Redis cannot be reached, <prefix>:meta cannot be read, the check fails,
// the metrics cannot be registered, or it was called before.
func (m *Middleware) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errorf("start: already started")
	}
	dep, err := readDeployment(ctx, m.cfg.Redis, m.cfg.Prefix, m.cfg.Logger)
	if err != nil {
		return errorf("start: %w", err)
	}
	w := m.built
	if w == nil || m.builtFor != dep {
		if w, err = m.newWorker(dep); err != nil {
			return errorf("start: %w", err)
		}
		m.built, m.builtFor = w, dep
	}
	if err := w.Start(ctx); err != nil {
		return errorf("start: %w", err)
	}
	m.started, m.built = true, nil
	m.worker.Store(w)
	m.cfg.Logger.Info("sluicetask middleware started", "id", m.cfg.ID, "queues", m.cfg.Queues,
		"concurrency", m.cfg.Concurrency, "task_check_interval", m.cfg.TaskCheckInterval, "shards", dep.shards, "min_lead", dep.minLead)
	return nil
}

// newWorker builds the Worker that runs the protocol for dep.
func (m *Middleware) newWorker(dep deployment) (*worker.Worker, error) {
	st, err := store.NewStore(m.cfg.Redis, store.Config{Prefix: m.cfg.Prefix, Shards: dep.shards})
	if err != nil {
		return nil, err
	}
	return worker.New(worker.Config{
		Store:             store.NewCoalescer(st, 0), // claims and finishes of one shard that meet share a call
		Redis:             m.cfg.Redis,
		Executor:          executor{},
		Prefix:            m.cfg.Prefix,
		ID:                m.cfg.ID,
		Concurrency:       m.cfg.Concurrency,
		MinLead:           dep.minLead,
		TaskCheckInterval: m.cfg.TaskCheckInterval,
		HeartbeatInterval: m.cfg.HeartbeatInterval,
		Registerer:        m.cfg.Registerer,
		Logger:            m.cfg.Logger.With("component", "sluicetask"),
		Announce:          m.announcer(st),
		Upstreams:         st, // SetCost's corrections of the job's upstreams
		UpstreamRates:     st, // pause_scope and adaptive rate of the job's upstreams
	})
}

// Stop ends the heartbeat and clock loops and withdraws the heartbeats at
// once: Sluice's API refuses new task jobs for a queue no other instance
// serves, and the dispatcher stops counting this capacity. Shut the asynq
// server down first; the wrapped handler keeps working after Stop, so tasks
// still running settle normally. Stop is idempotent and may be called
// without Start.
func (m *Middleware) Stop() {
	if w := m.worker.Load(); w != nil {
		w.Stop()
	}
}

// workerID is the instance's field in <prefix>:workers.
func (m *Middleware) workerID() string { return "mw:" + m.cfg.ID }

// announcer is the Worker's Announce: the concurrency into <prefix>:workers
// (once per instance, whatever the number of queues: they share the asynq
// server's goroutines), then every queue's <prefix>:mw:<queue> entry. A
// concurrency of 0 is the withdrawal: the queue entries go first (enqueues
// stop), then the capacity.
func (m *Middleware) announcer(st *store.Store) func(context.Context, int, time.Duration) error {
	return func(ctx context.Context, concurrency int, ttl time.Duration) error {
		if concurrency == 0 {
			var errs []error
			for _, q := range m.cfg.Queues {
				errs = append(errs, st.TaskWithdraw(ctx, q, m.cfg.ID))
			}
			return errors.Join(append(errs, st.Heartbeat(ctx, m.workerID(), 0, ttl))...)
		}
		if err := st.Heartbeat(ctx, m.workerID(), concurrency, ttl); err != nil {
			return err
		}
		for _, q := range m.cfg.Queues {
			if err := st.TaskHeartbeat(ctx, q, m.cfg.ID, concurrency, m.cfg.TaskCheckInterval, ttl); err != nil {
				return err
			}
		}
		return nil
	}
}

// Wrap returns next wrapped in the protocol (see the package
// documentation): use it with asynq.ServeMux.Use(m.Wrap), or around the
// server's handler. A task without any sluice header goes to next as it is.
// A Sluice job runs next at most once per delivery, with a task of the
// job's task_type and payload and the delivery's headers, and ctx carrying
// the attempt's deadline and the Job (JobFromContext); the result is nil
// once the job is settled. The task's ResultWriter is nil: Sluice records
// the outcome.
func (m *Middleware) Wrap(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if !hasSluiceHeaders(t) {
			return next.ProcessTask(ctx, t)
		}
		w := m.worker.Load()
		if w == nil {
			return errorf("%s task job %q: %w", t.Type(), t.Headers()[wire.HeaderJob], ErrNotStarted)
		}
		return w.ProcessTaskJob(ctx, t, executor{task: t, next: next})
	})
}

// hasSluiceHeaders reports whether t carries any of the protocol's headers.
func hasSluiceHeaders(t *asynq.Task) bool {
	h := t.Headers()
	_, id := h[wire.HeaderJob]
	_, gen := h[wire.HeaderGen]
	_, slot := h[wire.HeaderSlot]
	return id || gen || slot
}

// executor runs one delivery of a task job: the task asynq handed over and
// the user's handler to run it with (Wrap's next).
type executor struct {
	task *asynq.Task
	next asynq.Handler
}

var _ worker.Executor = executor{}

// Execute builds the user's task from the stored job and runs it; a stored
// job that is not a task job with a task_type is a permanent failure
// ("invalid_job": nothing could ever run it).
func (e executor) Execute(ctx context.Context, cj store.ClaimedJob) wire.AttemptOutcome {
	if e.next == nil { // the Worker's Config.Executor: only Wrap runs task jobs, with its own
		return wire.AttemptOutcome{Kind: wire.FinishRetry, Error: "sluicetask: no handler"}
	}
	spec, err := job.Parse(cj.Body)
	if err != nil || cj.Type != wire.TypeTask || spec.TaskType == "" {
		return wire.AttemptOutcome{Kind: wire.FinishPermanent, Error: "invalid_job"}
	}
	task := asynq.NewTaskWithHeaders(spec.TaskType, spec.Payload, e.task.Headers())
	ctx = context.WithValue(ctx, jobKey{}, Job{ID: cj.ID, Tenant: cj.Tenant, Attempt: int(cj.Attempt), Slot: cj.Slot})
	ctx, cost := withCost(ctx)
	start := time.Now()
	err = e.next.ProcessTask(ctx, task)
	o := outcomeOf(ctx, err, time.Since(start))
	o.ActualCost = cost.n.Load() // SetCost's, 0 = none: the reserved cost stands
	return o
}

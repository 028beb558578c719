package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// ServersConfig configures the asynq servers a worker process runs.
type ServersConfig struct {
	// Concurrency is the process's total (Config.Concurrency: jobs), split
	// over Fetchers servers (near-equal parts, see Split) as the tasks they
	// run at once; Fetchers is 1 … Concurrency.
	Concurrency, Fetchers int
	// TaskCheckInterval is every server's.
	TaskCheckInterval time.Duration
	// ShutdownTimeout is worker.shutdown_timeout; the servers use it raised
	// by ShutdownTimeout with Lead (D) and MaxTimeout, the largest
	// configured attempt timeout.
	ShutdownTimeout, Lead, MaxTimeout time.Duration
	// Logger receives Serve's lines, and asynq's at AsynqLogLevel and
	// above (cmd/worker passes config log.asynq, default warn: asynq's
	// debug lines include "All queues are empty" on every empty poll, about
	// a hundred a second). Logger's handler filters both by its own level.
	Logger        *slog.Logger
	AsynqLogLevel slog.Level
	// LogAttrs are added to the "worker running" line (the metrics address).
	LogAttrs []any
	// StopSlack is how long past the shutdown timeout Serve waits for the
	// servers to stop before it gives up on them (StuckError); 0 means
	// DefaultStopSlack.
	StopSlack time.Duration
}

// DefaultStopSlack is ServersConfig.StopSlack's default: time for asynq's
// servers, after the shutdown timeout, to put back the tasks they gave up
// and stop their own loops.
const DefaultStopSlack = 3 * time.Second

// StuckError is Serve's error when its asynq servers did not stop within
// the shutdown timeout and the stop slack. asynq starts its shutdown
// timer only once each server's fetch loop is free, so a fetch stuck in
// a Redis round trip holds the whole stop; Serve returns instead, and the
// process can exit. The servers still run and use their Redis client:
// closing that client under them makes asynq panic, so a caller leaves it
// open. Nothing is lost: the jobs they hold return when their leases end.
type StuckError struct {
	Waited  time.Duration
	stopped <-chan struct{}
}

func (e *StuckError) Error() string {
	return fmt.Sprintf("asynq's servers did not stop within %s of the signal", e.Waited)
}

// Stopped is closed once the servers have stopped after all.
func (e *StuckError) Stopped() <-chan struct{} { return e.stopped }

// Serve runs cfg.Fetchers asynq servers on rdb serving w's queues with w
// until ctx ends, then stops them fetching and waits for their running
// tasks for up to the shutdown timeout (asynq puts unfinished tasks back;
// Sluice's sweep recovers their jobs); servers not stopped StopSlack after
// that are left running, with a *StuckError. An asynq server dequeues one task —
// a batch of jobs, or a single job of an earlier dispatcher — per Redis
// round trip, and under load each round trip waits behind the dispatch
// scripts (several milliseconds at a few thousand jobs a second), so a
// worker fetches through several servers side by side (config: four). rdb
// should be a client of its own with a DequeueGate (NewAsynqClient), so
// that idle polls stay off Redis: the gate polls a queue believed empty
// once per safety net whatever the servers, and only the first server runs
// asynq's forwarder and janitor (housekeepingRest), so an idle worker
// costs Redis the same with one server or four. ready, when not nil, is
// called once every server fetches. Start w first and stop it after Serve
// returns.
func Serve(ctx context.Context, rdb redis.UniversalClient, w *Worker, cfg ServersConfig, ready func()) error {
	shutdown, raised := ShutdownTimeout(cfg.ShutdownTimeout, cfg.Lead, cfg.MaxTimeout)
	if raised {
		cfg.Logger.Warn("worker.shutdown_timeout raised to 2·dispatch.lead + the largest timeout + 2s",
			"configured", cfg.ShutdownTimeout, "used", shutdown)
	}
	servers := make([]*asynq.Server, 0, cfg.Fetchers)
	shutdownAll := func() {
		var wg sync.WaitGroup
		for _, srv := range servers {
			wg.Go(srv.Shutdown) // they drain at the same time
		}
		wg.Wait()
	}
	for i, n := range Split(cfg.Concurrency, cfg.Fetchers) {
		acfg := asynq.Config{Concurrency: n, TaskCheckInterval: cfg.TaskCheckInterval,
			ShutdownTimeout: shutdown, Queues: w.Queues(), Logger: asynqLogger{cfg.Logger}, LogLevel: asynqLevel(cfg.AsynqLogLevel)}
		if i > 0 {
			// The servers serve the same queues: the first one's forwarder
			// and janitor keep them, the others' would only repeat its polls.
			acfg.DelayedTaskCheckInterval, acfg.JanitorInterval = housekeepingRest, housekeepingRest
		}
		srv := asynq.NewServerFromRedisClient(rdb, acfg)
		if err := srv.Start(w); err != nil {
			shutdownAll()
			return fmt.Errorf("start asynq server: %w", err)
		}
		servers = append(servers, srv)
	}
	cfg.Logger.Info("worker running", append([]any{"id", w.ID(), "concurrency", cfg.Concurrency, "fetchers", len(servers),
		"task_check_interval", cfg.TaskCheckInterval, "shutdown_timeout", shutdown}, cfg.LogAttrs...)...)
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	cfg.Logger.Info("shutting down: draining running jobs", "timeout", shutdown)
	stopped := make(chan struct{})
	go func() {
		shutdownAll()
		close(stopped)
	}()
	waited := shutdown + cmp.Or(cfg.StopSlack, DefaultStopSlack)
	bound := time.NewTimer(waited)
	defer bound.Stop()
	select {
	case <-stopped:
		return nil
	case <-bound.C:
		// Where it is stuck, for whoever reads the log: the goroutines'
		// stacks, identical ones counted once (no job data, no secrets).
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		cfg.Logger.Error("asynq's servers did not stop within the shutdown timeout and its slack; stopping without them "+
			"(the jobs they still hold return when their leases end)", "waited", waited, "stacks", stacks.String())
		return &StuckError{Waited: waited, stopped: stopped}
	}
}

// housekeepingRest is the forwarder's and the janitor's interval in every
// asynq server of a worker but the first.
const housekeepingRest = 10 * time.Minute

// Split divides total into n near-equal positive parts (n ≤ total): the
// concurrency of each of the n asynq servers (worker.fetchers).
func Split(total, n int) []int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = total / n
		if i < total%n {
			parts[i]++
		}
	}
	return parts
}

// ShutdownTimeout is the asynq servers' shutdown timeout: configured
// (worker.shutdown_timeout), raised to 2·lead + maxTimeout + 2 s (docs/design.md
// §2.3: a released job may wait up to 2·D for its slot, then run for its
// attempt timeout) when smaller; raised reports it.
func ShutdownTimeout(configured, lead, maxTimeout time.Duration) (d time.Duration, raised bool) {
	need := 2*lead + maxTimeout + 2*time.Second
	if configured >= need {
		return configured, false
	}
	return need, true
}

// asynqLogger sends asynq's logs to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...), "component", "asynq") }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...), "component", "asynq") }

// Fatal logs and exits, as asynq expects of its logger's Fatal.
func (a asynqLogger) Fatal(args ...any) {
	a.l.Error(fmt.Sprint(args...), "component", "asynq", "fatal", true)
	os.Exit(1)
}

// asynqLevel is level as asynq's log level: each slog level maps to the
// asynq level of the same name, a level between two to the higher one.
func asynqLevel(level slog.Level) asynq.LogLevel {
	switch {
	case level <= slog.LevelDebug:
		return asynq.DebugLevel
	case level <= slog.LevelInfo:
		return asynq.InfoLevel
	case level <= slog.LevelWarn:
		return asynq.WarnLevel
	}
	return asynq.ErrorLevel
}

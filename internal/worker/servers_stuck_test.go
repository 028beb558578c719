package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/worker"
)

// heldDequeues is a go-redis hook that, once armed, holds every asynq
// dequeue (a script call naming a queue's pending list) until release is
// closed; held is closed when it holds the first.
type heldDequeues struct {
	armed   atomic.Bool
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h *heldDequeues) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *heldDequeues) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *heldDequeues) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && dequeueScript(cmd) {
			h.once.Do(func() { close(h.held) })
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func dequeueScript(cmd redis.Cmder) bool {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return false
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasSuffix(s, "}:pending") {
			return true
		}
	}
	return false
}

// TestServeGivesUpOnStuckServers: asynq starts its shutdown timer only
// once a server's fetch loop is free, so a dequeue stuck in its Redis round
// trip would hold the worker's stop forever. Serve gives up on the servers
// the shutdown timeout plus the stop slack after its context ends: a
// *StuckError naming that wait, an error line with the goroutines' stacks
// (the stuck dequeue among them), the servers left running until the
// dequeue comes back, when they stop after all.
func TestServeGivesUpOnStuckServers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	w := h.startedWorker()
	defer w.Stop()
	hook := &heldDequeues{held: make(chan struct{}), release: make(chan struct{})}
	client := redistest.NewClient(t, redistest.Options()) // asynq's own, as cmd/worker gives it
	client.AddHook(hook)
	var log redistest.SyncBuffer
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	fetching := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- worker.Serve(ctx, client, w, worker.ServersConfig{Concurrency: 1, Fetchers: 1,
			TaskCheckInterval: 5 * time.Millisecond, ShutdownTimeout: time.Second, StopSlack: 100 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&log, nil))}, func() { close(fetching) })
	}()
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not within 30s", what)
		}
	}
	wait(fetching, "the server fetches")
	hook.armed.Store(true)
	wait(hook.held, "a dequeue is held")
	cancel()

	var stuck *worker.StuckError
	select {
	case err := <-done:
		if !errors.As(err, &stuck) {
			close(hook.release)
			t.Fatalf("Serve with a dequeue stuck = %v, want a *StuckError", err)
		}
	case <-time.After(60 * time.Second):
		close(hook.release)
		t.Fatal("Serve still running 60s after its context ended, with a dequeue stuck")
	}
	timeout, _ := worker.ShutdownTimeout(time.Second, 0, 0)
	if want := timeout + 100*time.Millisecond; stuck.Waited != want {
		t.Errorf("StuckError.Waited = %s, want the shutdown timeout %s + the stop slack 100ms", stuck.Waited, timeout)
	}
	select {
	case <-stuck.Stopped():
		t.Error("Stopped() closed while the dequeue is still held")
	default:
	}
	out := log.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "did not stop within the shutdown timeout") ||
		!strings.Contains(out, "heldDequeues") || !strings.Contains(out, "hibiken/asynq") {
		t.Errorf("log without the error line and the stuck dequeue's stack (heldDequeues, asynq):\n%s", out)
	}

	close(hook.release)
	wait(stuck.Stopped(), "the servers stop once the dequeue returns")
}

package worker_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/worker"
)

// lineCounter is a slog handler at debug counting asynq's lines by message.
type lineCounter struct {
	mu    sync.Mutex
	asynq map[string]int // message → count, for component=asynq lines
	below int            // asynq lines below warn
}

func (c *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *lineCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *lineCounter) WithGroup(string) slog.Handler            { return c }
func (c *lineCounter) Handle(_ context.Context, r slog.Record) error {
	fromAsynq := false
	r.Attrs(func(a slog.Attr) bool {
		fromAsynq = fromAsynq || (a.Key == "component" && a.Value.String() == "asynq")
		return true
	})
	if !fromAsynq {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asynq[r.Message]++
	if r.Level < slog.LevelWarn {
		c.below++
	}
	return nil
}

func (c *lineCounter) counts() (empty, below int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asynq["All queues are empty"], c.below
}

// TestServeKeepsAsynqDebugOutOfTheLog: on idle queues, a server whose
// AsynqLogLevel is debug logs "All queues are empty" on every poll (the
// flood); one at warn (the config's default) logs no asynq line below warn
// over the same polls, though its logger's handler takes debug.
func TestServeKeepsAsynqDebugOutOfTheLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1)
	serve := func(level slog.Level) (*lineCounter, func()) {
		w := h.startedWorker()
		lines := &lineCounter{asynq: map[string]int{}}
		ctx, cancel := context.WithCancel(h.ctx)
		done := make(chan error, 1)
		go func() {
			done <- worker.Serve(ctx, h.rdb, w, worker.ServersConfig{Concurrency: 2, Fetchers: 2, TaskCheckInterval: 5 * time.Millisecond,
				ShutdownTimeout: time.Second, Logger: slog.New(lines), AsynqLogLevel: level}, nil)
		}()
		return lines, func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
			w.Stop()
		}
	}
	quiet, stopQuiet := serve(slog.LevelWarn)
	loud, stopLoud := serve(slog.LevelDebug)
	redistest.Poll(t, 30*time.Second, "asynq at debug logged \"All queues are empty\" 20 times", func() bool {
		empty, _ := loud.counts()
		return empty >= 20
	})
	stopLoud()
	stopQuiet()
	if empty, below := quiet.counts(); empty != 0 || below != 0 {
		t.Errorf("asynq at warn: %d \"All queues are empty\" lines, %d asynq lines below warn; want none", empty, below)
	}
}

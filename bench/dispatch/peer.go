package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"golang.org/x/time/rate"
)

// The asynq peers: plain asynq, no Sluice code, on the same Redis (flushed
// first), the same receiver, tasks enqueued directly.
const (
	peerQueue    = "default"
	peerTaskType = "bench:webhook"
)

// RateLimitError is the error type of asynq's wiki rate-limit pattern
// (github.com/hibiken/asynq/wiki/Rate-Limiting): the handler returns it when
// its limiter refuses; IsFailure says it is no failure (no retry counted),
// RetryDelayFunc retries it after RetryIn.
type RateLimitError struct {
	RetryIn time.Duration
}

func (e *RateLimitError) Error() string { return fmt.Sprintf("rate limited (retry in %v)", e.RetryIn) }

// IsRateLimitError is the wiki's test.
func IsRateLimitError(err error) bool {
	var rl *RateLimitError
	return errors.As(err, &rl)
}

// wikiRetryDelay is the wiki's RetryDelayFunc.
func wikiRetryDelay(n int, err error, task *asynq.Task) time.Duration {
	var rl *RateLimitError
	if errors.As(err, &rl) {
		return rl.RetryIn
	}
	return asynq.DefaultRetryDelayFunc(n, err, task)
}

// poster POSTs a task to the receiver with its task id as webhook-id,
// through a keep-alive client sized for the concurrency.
type poster struct {
	client *http.Client
	url    string
	body   []byte
}

func newPoster(url string, concurrency int) *poster {
	tr := &http.Transport{MaxIdleConns: concurrency, MaxIdleConnsPerHost: concurrency, IdleConnTimeout: time.Minute}
	return &poster{client: &http.Client{Transport: tr, Timeout: 15 * time.Second}, url: url,
		body: []byte(`{"type":"bench","timestamp":"2026-01-01T00:00:00Z","data":{}}`)}
}

func (p *poster) post(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(p.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return nil
}

// enqueueTasks enqueues n tasks on peerQueue with 8 goroutines (asynq has no
// batch enqueue).
func enqueueTasks(ctx context.Context, client *asynq.Client, n int) error {
	return parallel(ctx, n, 8, func(i int) error {
		task := asynq.NewTask(peerTaskType, []byte(strconv.Itoa(i)))
		_, err := client.EnqueueContext(ctx, task, asynq.Queue(peerQueue))
		return err
	})
}

// quietLogger drops asynq's logs (the wiki pattern logs every refusal).
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// wikiHandler is the wiki's handler: a call the limiter refuses returns a
// RateLimitError (RetryIn per -peer-retry), an allowed one POSTs to the
// receiver; handlers counts the calls.
func wikiHandler(e *env, limiter *rate.Limiter, post *poster, handlers *atomic.Int64) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		handlers.Add(1)
		if !limiter.Allow() {
			retryIn := time.Duration(rand.IntN(10)) * time.Second // the wiki's
			if e.o.peerRetry == "limiter" {
				res := limiter.Reserve()
				retryIn = res.Delay()
				res.Cancel()
			}
			return &RateLimitError{RetryIn: retryIn}
		}
		id, _ := asynq.GetTaskID(ctx)
		return post.post(ctx, id)
	})
}

// precisionPeer runs asynq's wiki rate-limit pattern: an x/time/rate limiter
// rate.NewLimiter(r, 1) in the handler; a refused call returns a
// RateLimitError whose RetryIn is the wiki's rand(0…9) s ("wiki") or the
// limiter's own delay to the next token ("limiter"). All N tasks are
// enqueued at once; the run ends when all arrived or after peerTime.
func precisionPeer(ctx context.Context, e *env) (precisionRun, error) {
	if err := e.flush(ctx); err != nil {
		return precisionRun{}, err
	}
	r, n := e.o.precRate, e.o.precJobs
	const run = "precision-peer"
	rec := e.rcv.start(run)
	client := asynq.NewClientFromRedisClient(e.rdb)
	if err := enqueueTasks(ctx, client, n); err != nil {
		return precisionRun{}, fmt.Errorf("enqueue the peer's tasks: %w", err)
	}
	limiter := rate.NewLimiter(rate.Limit(r), 1)
	post := newPoster(e.rcv.url(run), e.o.peerConc)
	defer post.client.CloseIdleConnections()
	var handlers atomic.Int64
	handler := wikiHandler(e, limiter, post, &handlers)
	srv := asynq.NewServerFromRedisClient(e.rdb, asynq.Config{
		Concurrency:              e.o.peerConc,
		Queues:                   map[string]int{peerQueue: 1},
		TaskCheckInterval:        e.o.tci,
		DelayedTaskCheckInterval: e.o.peerForward,
		IsFailure:                func(err error) bool { return !IsRateLimitError(err) },
		RetryDelayFunc:           wikiRetryDelay,
		ShutdownTimeout:          2 * time.Second,
		Logger:                   quietLogger{},
		LogLevel:                 asynq.FatalLevel,
	})
	rs0, err := e.redisStats(ctx)
	if err != nil {
		return precisionRun{}, err
	}
	meter := e.cpuMeter(ctx, nil)
	start := time.Now()
	if err := srv.Start(handler); err != nil {
		return precisionRun{}, fmt.Errorf("start the peer's asynq server: %w", err)
	}
	done := rec.waitDistinct(ctx, n, start.Add(e.o.peerTime))
	elapsed := time.Since(start)
	cpu := meter.stop()
	rs1, err := e.redisStats(ctx)
	srv.Shutdown()
	if err != nil {
		return precisionRun{}, err
	}
	return precisionRun{p: pace(rec.snapshot(), float64(r)), want: n, elapsed: elapsed, bounded: !done,
		calls: rs1.sub(rs0).calls, handlers: handlers.Load(), cpu: cpu}, nil
}

// bareAsynq runs n tasks (enqueued before the server starts) through a
// plain asynq server of the given concurrency whose handler POSTs each to
// the receiver's run; it returns the receiver's arrivals, the Redis
// counters' change and the CPU over the run, and the spread of the tasks
// over hash slots (one queue: one slot).
func bareAsynq(ctx context.Context, e *env, run string, n, concurrency int) (tputRun, error) {
	if err := e.flush(ctx); err != nil {
		return tputRun{}, err
	}
	rec := e.rcv.start(run)
	if err := enqueueTasks(ctx, asynq.NewClientFromRedisClient(e.rdb), n); err != nil {
		return tputRun{}, fmt.Errorf("enqueue bare asynq tasks: %w", err)
	}
	post := newPoster(e.rcv.url(run), concurrency)
	defer post.client.CloseIdleConnections()
	srv := asynq.NewServerFromRedisClient(e.rdb, peerConfig(e, concurrency))
	rs0, err := e.redisStats(ctx)
	if err != nil {
		return tputRun{}, err
	}
	prof, err := e.startProfiles(ctx, run, false)
	defer prof.end()
	if err != nil {
		return tputRun{}, err
	}
	meter := e.cpuMeter(ctx, nil)
	start := time.Now()
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		return post.post(ctx, id)
	})); err != nil {
		return tputRun{}, fmt.Errorf("start bare asynq server: %w", err)
	}
	done := rec.waitDistinct(ctx, n, start.Add(boundFor(n)))
	cpu := meter.stop()
	if err := prof.logPerf(e, run+": bare asynq's Redis time by component"); err != nil {
		return tputRun{}, err
	}
	rs1, err := e.redisStats(ctx)
	srv.Shutdown()
	if err != nil {
		return tputRun{}, err
	}
	res := tputRun{arr: rec.snapshot(), redis: rs1.sub(rs0), cpu: cpu,
		spread: spreadOf(map[string]float64{peerQueue: float64(n)}, "one queue")}
	if !done {
		_, got := rec.count()
		return res, fmt.Errorf("bare asynq delivered %d of %d: %w", got, n, errTimeout)
	}
	return res, nil
}

// peerConfig is the bare asynq server's configuration: the given
// concurrency, the one peer queue, the bench's TaskCheckInterval, asynq's
// defaults otherwise (DelayedTaskCheckInterval 5 s among them).
func peerConfig(e *env, concurrency int) asynq.Config {
	return asynq.Config{
		Concurrency:       concurrency,
		Queues:            map[string]int{peerQueue: 1},
		TaskCheckInterval: e.o.tci,
		ShutdownTimeout:   2 * time.Second,
		Logger:            quietLogger{},
		LogLevel:          asynq.FatalLevel,
	}
}

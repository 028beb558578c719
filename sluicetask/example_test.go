package sluicetask_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/sluicetask"
)

// An asynq server that runs Sluice task jobs of type "email:send" from the
// queue "default" (in Sluice's task_queues). Producers enqueue them with
// POST /v1/tenants/{tenant}/jobs and
// {"type":"task","task_type":"email:send","queue":"default","payload":{"to":"a@example.com"}};
// Sluice's API refuses them (422 no_task_worker) until this server runs.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // Sluice's Redis
	defer rdb.Close()

	const concurrency, checkInterval = 50, 20 * time.Millisecond
	// No Sluice settings here: Start reads them (shards, timing, retention,
	// throttle) from Sluice's <prefix>:meta and follows their changes.
	m, err := sluicetask.New(sluicetask.Config{
		Redis:             rdb,
		Prefix:            "sluice",
		Queues:            []string{"default"},
		Concurrency:       concurrency,   // the same as the server's
		TaskCheckInterval: checkInterval, // the same as the server's
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Start(ctx); err != nil { // before the server
		log.Fatal(err)
	}
	defer m.Stop() // after the server

	mux := asynq.NewServeMux()
	mux.Use(m.Wrap)
	mux.HandleFunc("email:send", func(ctx context.Context, t *asynq.Task) error {
		var msg struct {
			To string `json:"to"`
		}
		if err := json.Unmarshal(t.Payload(), &msg); err != nil {
			return sluicetask.Permanent(fmt.Errorf("payload: %w", err)) // dead letter, no retries
		}
		job, _ := sluicetask.JobFromContext(ctx)
		resp, err := sendEmail(ctx, msg.To, job.ID) // the job id: the same on every attempt
		if err != nil {
			return err // retried with the tenant's backoff
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			return sluicetask.Throttled(time.Duration(secs) * time.Second) // pause the tenant; no attempt used
		case resp.StatusCode >= 500:
			return fmt.Errorf("email API: %s", resp.Status)
		case resp.StatusCode >= 400:
			return sluicetask.Permanent(fmt.Errorf("email API: %s", resp.Status))
		}
		return nil
	})

	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       concurrency,
		TaskCheckInterval: checkInterval,
		Queues:            map[string]int{"default": 1},
		ShutdownTimeout:   20 * time.Second, // ≥ 2 × dispatch.lead + the largest timeout + 2s
	})
	if err := srv.Start(mux); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	srv.Shutdown()
}

// sendEmail stands for a call to a quota-limited upstream API.
func sendEmail(ctx context.Context, to, idempotencyKey string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://email.example.com/v1/send?to="+to, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Idempotency-Key", idempotencyKey)
	return http.DefaultClient.Do(req)
}

// A handler that calls an LLM API whose jobs reserve an estimate of the
// tokens (the job's cost, e.g. {"type":"task",…,"cost":2000}) and reports
// what the call really used: Sluice refunds or charges the difference on
// the tenant's schedule and on the job's upstreams, so the next jobs leave
// earlier or later accordingly.
func ExampleSetCost() {
	handler := func(ctx context.Context, t *asynq.Task) error {
		used, err := complete(ctx, t.Payload())
		if err != nil {
			return err
		}
		if err := sluicetask.SetCost(ctx, used); err != nil {
			log.Printf("actual cost not reported: %v", err) // the reserved cost stands
		}
		return nil
	}
	mux := asynq.NewServeMux()
	mux.HandleFunc("llm:complete", handler)

	// Outside a Sluice job's handler SetCost changes nothing.
	fmt.Println(sluicetask.SetCost(context.Background(), 10))
	// Output: sluicetask: set cost: not in a Sluice task job's handler
}

// complete stands for a call to an API that reports the tokens it used.
func complete(ctx context.Context, prompt []byte) (int64, error) {
	return int64(len(prompt)), ctx.Err()
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"strings"
	"time"

	"github.com/sluicehq/sluice/client"
)

// listFlag is a flag given any number of times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func jobsEnqueue(fs *flag.FlagSet) runner {
	webhook := fs.String("webhook", "", "a webhook job to this URL (with --event)")
	event := fs.String("event", "", "the webhook's event type")
	httpURL := fs.String("http", "", "an http job to this URL (with --method)")
	method := fs.String("method", "POST", "the http job's method")
	body := fs.String("body", "", "the http job's body")
	var headers listFlag
	fs.Var(&headers, "header", "an http job's header, Name: value (repeatable)")
	task := fs.String("task", "", "a task job of this task type, for a sluicetask middleware")
	queue := fs.String("queue", "", "the task job's asynq queue (default: default)")
	payload := fs.String("payload", "", "the webhook's or task's payload, JSON")
	file := fs.String("file", "", "the job as the API's JSON object, from this file (- for stdin)")
	delay := fs.Duration("delay", 0, "run no earlier than now + this")
	runAt := fs.String("run-at", "", "run no earlier than this RFC 3339 time")
	cost := fs.Int64("cost", 0, "the tokens the job takes (default 1)")
	maxAttempts := fs.Int("max-attempts", 0, "override the policy's retry.max_attempts")
	var upstreams listFlag
	fs.Var(&upstreams, "upstream", "an upstream quota the job consumes (repeatable)")
	callback := fs.String("callback", "", "POST the job's end (succeeded, dead, canceled) to this URL")
	key := fs.String("idempotency-key", "", "send under this key: the same job with the same key is stored once")
	return func(ctx context.Context, e *env, args []string) error {
		job, err := jobOf(e, *webhook, *event, *httpURL, *method, *body, headers, *task, *queue, *payload, *file)
		if err != nil {
			return err
		}
		var opts []client.EnqueueOption
		if *delay != 0 {
			opts = append(opts, client.Delay(*delay))
		}
		if *runAt != "" {
			t, err := time.Parse(time.RFC3339, *runAt)
			if err != nil {
				return usagef("--run-at: not an RFC 3339 time: %q", *runAt)
			}
			opts = append(opts, client.RunAt(t))
		}
		if *cost != 0 {
			opts = append(opts, client.Cost(*cost))
		}
		if *maxAttempts != 0 {
			opts = append(opts, client.MaxAttempts(*maxAttempts))
		}
		if len(upstreams) > 0 {
			opts = append(opts, client.Upstreams(upstreams...))
		}
		if *callback != "" {
			opts = append(opts, client.Callback(*callback))
		}
		if *key != "" {
			opts = append(opts, client.IdempotencyKey(*key))
		}
		info, err := e.c.Enqueue(ctx, args[0], job, opts...)
		if err != nil {
			return err
		}
		if e.json {
			return rawJSON(e.stdout, info.Raw)
		}
		return fields(e.stdout, "id", info.ID, "tenant", info.Tenant, "state", info.State, "eta", orDash(info.ETA),
			"duplicate", yesNo(info.Duplicate), "idempotency key", info.IdempotencyKey)
	}
}

// jobOf builds the job the flags describe: exactly one kind.
func jobOf(e *env, webhook, event, httpURL, method, body string, headers []string, task, queue, payload, file string) (client.Job, error) {
	kinds := 0
	for _, s := range []string{webhook, httpURL, task, file} {
		if s != "" {
			kinds++
		}
	}
	if kinds != 1 {
		return nil, usagef("give exactly one of --webhook, --http, --task or --file")
	}
	var data any
	if payload != "" {
		if !json.Valid([]byte(payload)) {
			return nil, usagef("--payload: not valid JSON")
		}
		data = json.RawMessage(payload)
	}
	switch {
	case webhook != "":
		return client.Webhook{URL: webhook, Event: event, Payload: data}, nil
	case task != "":
		return client.Task{Type: task, Queue: queue, Payload: data}, nil
	case file != "":
		raw, err := readFile(e.stdin, file)
		if err != nil {
			return nil, err
		}
		return client.RawJob(raw), nil
	}
	h := map[string]string{}
	for _, kv := range headers {
		name, value, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, usagef("--header %q: want Name: value", kv)
		}
		h[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	j := client.HTTP{Method: strings.ToUpper(method), URL: httpURL, Header: h}
	if body != "" {
		j.Body = []byte(body)
	}
	return j, nil
}

func showJob(e *env, v *client.JobView) error {
	if e.json {
		return rawJSON(e.stdout, v.Raw)
	}
	kv := []string{"id", v.ID, "tenant", v.Tenant, "type", v.Type, "state", v.State, "cost", itoa(v.Cost),
		"created", orDash(v.Created), "eta", orDash(v.ETA), "ended", orDash(v.Ended), "attempts", itoa(v.AttemptCount)}
	if v.DeadReason != "" {
		kv = append(kv, "dead reason", v.DeadReason)
	}
	if v.CanceledFrom != "" {
		kv = append(kv, "canceled from", v.CanceledFrom)
	}
	if len(v.Attempts) > 0 {
		last := v.Attempts[len(v.Attempts)-1]
		kv = append(kv, "last attempt", strings.TrimSpace(orDash(last.At)+" status "+itoa(int64(last.Status))+" "+last.Error))
	}
	kv = append(kv, "job", compactJSON(v.Job))
	return fields(e.stdout, kv...)
}

// one is a command that calls get with its one argument and shows the
// answer.
func one[T any](get func(*client.Client, context.Context, string) (T, error), show func(*env, T) error) func(*flag.FlagSet) runner {
	return func(*flag.FlagSet) runner {
		return func(ctx context.Context, e *env, args []string) error {
			v, err := get(e.c, ctx, args[0])
			if err != nil {
				return err
			}
			return show(e, v)
		}
	}
}

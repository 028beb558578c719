package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Names shared by every Sluice run.
const (
	prefix = "sluice"
	shards = 16
	apiKey = "bench-key"
)

// env is what every part shares: the options, the Redis client, a dispatch
// Store on Sluice's keys (direct enqueues, job records), the receiver and a
// keep-alive HTTP client for the API.
type env struct {
	o    options
	rdb  *redis.Client
	st   *store.Store
	rcv  *receiver
	http *http.Client
	runs int // Sluice runs started, for file names
}

func newEnv(ctx context.Context, o options) (*env, error) {
	opt, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = 64
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("ping %s: %w", o.redisURL, err)
	}
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: shards})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	rcv, err := newReceiver()
	if err != nil {
		rdb.Close()
		return nil, err
	}
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute, DisableCompression: true}
	return &env{o: o, rdb: rdb, st: st, rcv: rcv, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}, nil
}

func (e *env) close() {
	e.http.CloseIdleConnections()
	e.rcv.close()
	_ = e.rdb.Close()
}

// flush empties the Redis (everything of the previous run) and resets its
// command statistics.
func (e *env) flush(ctx context.Context) error {
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flushall: %w", err)
	}
	return e.rdb.ConfigResetStat(ctx).Err()
}

// webhookJob is one webhook job to the receiver's run, as a producer sends it.
func (e *env) webhookJob(run string, i int) []byte {
	return fmt.Appendf(nil, `{"type":"webhook","url":"%s","event":"bench.%s","payload":{"i":%d}}`, e.rcv.url(run), run, i)
}

// storeItems returns n items of one canonical webhook job to the receiver's
// run, for Store.Enqueue (the script the API runs after parsing).
func (e *env) storeItems(run string, n int) ([]store.Item, error) {
	spec, err := job.Parse(e.webhookJob(run, 0))
	if err != nil {
		return nil, fmt.Errorf("parse the bench job: %w", err)
	}
	items := make([]store.Item, n)
	for i := range items {
		items[i] = store.Item{Type: wire.TypeWebhook, Cost: 1, Body: spec.Canonical()}
	}
	return items, nil
}

// redisStats are cumulative Redis counters.
type redisStats struct {
	calls int64   // commands, summed over INFO commandstats (script-invoked ones included)
	cpu   float64 // used_cpu_sys + used_cpu_user, seconds
	cmds  map[string]cmdStat
}

// cmdStat is one command's INFO commandstats counters.
type cmdStat struct{ calls, usec int64 }

func (a redisStats) sub(b redisStats) redisStats {
	d := redisStats{calls: a.calls - b.calls, cpu: a.cpu - b.cpu, cmds: map[string]cmdStat{}}
	for name, c := range a.cmds {
		if c.calls -= b.cmds[name].calls; c.calls > 0 {
			c.usec -= b.cmds[name].usec
			d.cmds[name] = c
		}
	}
	return d
}

// top lists the n commands with the most calls, per job of jobs:
// "name calls/job µs/job".
func (a redisStats) top(n int, jobs int) string {
	names := make([]string, 0, len(a.cmds))
	for name := range a.cmds {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return a.cmds[names[i]].calls > a.cmds[names[j]].calls })
	var b strings.Builder
	for i, name := range names {
		if i == n {
			break
		}
		c := a.cmds[name]
		fmt.Fprintf(&b, " %s %.1f/job %.0fµs/job;", name, float64(c.calls)/float64(jobs), float64(c.usec)/float64(jobs))
	}
	return b.String()
}

func (e *env) redisStats(ctx context.Context) (redisStats, error) {
	info, err := e.rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("info: %w", err)
	}
	return parseInfo(info), nil
}

// logf reports progress and side findings on stderr (the table goes to
// stdout).
func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchdispatch: "+format+"\n", args...)
}

// redisSummary is, for a diagnosis: Redis's CPU and busiest commands since
// the last flush, and the asynq queues' lengths.
func (e *env) redisSummary(ctx context.Context, since redisStats, at time.Time) string {
	var b strings.Builder
	info, err := e.rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return "  redis: " + err.Error() + "\n"
	}
	st := parseInfo(info).sub(since)
	fmt.Fprintf(&b, "  redis over the run's last %.0f s: %.1f s CPU, %d commands;", time.Since(at).Seconds(), st.cpu, st.calls)
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			fmt.Fprintf(&b, " %s", strings.TrimSpace(line))
		}
	}
	b.WriteString("\n")
	for _, q := range append([]string{wire.WebhookQueue(prefix), "default"}, wire.HandoffQueueNames(prefix)...) {
		pending, _ := e.rdb.LLen(ctx, dispatch.AsynqQueueKey(q, "pending")).Result()
		active, _ := e.rdb.LLen(ctx, dispatch.AsynqQueueKey(q, "active")).Result()
		if pending+active > 0 {
			fmt.Fprintf(&b, "  asynq queue %s: %d pending, %d active\n", q, pending, active)
		}
	}
	return b.String()
}

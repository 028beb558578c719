package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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
// keep-alive HTTP client for the API. Its twin on a Redis Cluster
// (onCluster) shares all but the client, the store and addrs.
type env struct {
	o     options
	rdb   redis.UniversalClient // a *redis.Client, or a *redis.ClusterClient when addrs is set
	addrs []string              // the Cluster's seed addresses (redis.addrs of the configs); nil: the single node of o.redisURL
	st    *store.Store
	rcv   *receiver
	http  *http.Client
	runs  *int // Sluice runs started, for file names (shared with the twin)
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
	return &env{o: o, rdb: rdb, st: st, rcv: rcv, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}, runs: new(int)}, nil
}

// close closes what newEnv opened; a Cluster twin closes only its client.
func (e *env) close() {
	if e.addrs != nil {
		_ = e.rdb.Close()
		return
	}
	e.http.CloseIdleConnections()
	e.rcv.close()
	_ = e.rdb.Close()
}

// onCluster returns e's twin on the Redis Cluster of -cluster (a private
// one: flushed before every run): a Cluster client and a Store on it, the
// same options, receiver and HTTP client. The caller closes it.
func (e *env) onCluster(ctx context.Context) (*env, error) {
	if len(e.o.cluster) == 0 {
		return nil, fmt.Errorf("no -cluster addresses: run it through scripts/bench-dispatch")
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.o.cluster, PoolSize: 64})
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("ping the cluster %v: %w", e.o.cluster, err)
	}
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: shards})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	c := *e
	c.rdb, c.addrs, c.st = rdb, e.o.cluster, st
	return &c, nil
}

// eachMaster runs f on every master of a Cluster (concurrently), else once
// on the single node; addr names the node.
func (e *env) eachMaster(ctx context.Context, f func(ctx context.Context, addr string, c redis.Cmdable) error) error {
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return f(ctx, c.Options().Addr, c) })
	}
	return f(ctx, "", e.rdb)
}

// flush empties the Redis (everything of the previous run) and resets its
// command statistics, on every master of a Cluster.
func (e *env) flush(ctx context.Context) error {
	return e.eachMaster(ctx, func(ctx context.Context, addr string, c redis.Cmdable) error {
		if err := c.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("flushall %s: %w", addr, err)
		}
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			return fmt.Errorf("config resetstat %s: %w", addr, err)
		}
		return nil
	})
}

// webhookJob is one webhook job to the receiver's run, as a producer sends it.
func (e *env) webhookJob(run string, i int) []byte {
	return fmt.Appendf(nil, `{"type":"webhook","url":"%s","event":"bench.%s","payload":{"i":%d}}`, e.rcv.url(run), run, i)
}

// webhookJobs is jobs 0 … n−1 to the receiver's run (webhookJob).
func (e *env) webhookJobs(run string, n int) [][]byte {
	jobs := make([][]byte, n)
	for i := range jobs {
		jobs[i] = e.webhookJob(run, i)
	}
	return jobs
}

// storeItems returns n items of one canonical webhook job to the receiver's
// run, for Store.Enqueue (the script the API runs after parsing).
func (e *env) storeItems(run string, n int) ([]store.Item, error) {
	return itemsOf(e.webhookJob(run, 0), n)
}

// itemsOf returns n items of the webhook job raw (its API body), parsed
// into the canonical form Store.Enqueue stores.
func itemsOf(raw []byte, n int) ([]store.Item, error) {
	spec, err := job.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse the bench job: %w", err)
	}
	items := make([]store.Item, n)
	for i := range items {
		items[i] = store.Item{Type: wire.TypeWebhook, Cost: 1, Body: spec.Canonical()}
	}
	return items, nil
}

// redisStats are cumulative Redis counters, of a single node or summed
// over a Cluster's masters.
type redisStats struct {
	calls   int64   // commands, summed over INFO commandstats (script-invoked ones included)
	cpu     float64 // used_cpu_sys + used_cpu_user, seconds
	sys     float64 // used_cpu_sys alone: the kernel's share (system calls: the network, mostly)
	cmds    map[string]cmdStat
	masters map[string]float64 // a Cluster's masters: address → their cpu; nil on a single node
}

// cmdStat is one command's INFO commandstats counters.
type cmdStat struct{ calls, usec int64 }

func (a redisStats) sub(b redisStats) redisStats {
	d := redisStats{calls: a.calls - b.calls, cpu: a.cpu - b.cpu, sys: a.sys - b.sys, cmds: map[string]cmdStat{}}
	for addr, cpu := range a.masters {
		if d.masters == nil {
			d.masters = map[string]float64{}
		}
		d.masters[addr] = cpu - b.masters[addr]
	}
	for name, c := range a.cmds {
		if c.calls -= b.cmds[name].calls; c.calls > 0 {
			c.usec -= b.cmds[name].usec
			d.cmds[name] = c
		}
	}
	return d
}

// scriptCommands run a script: the time INFO commandstats gives them is
// the whole script's, the commands it runs included (those are counted
// again under their own names).
var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true,
	"fcall": true, "fcall_ro": true}

// inCommands is the Redis time, in seconds, spent inside commands that
// are not script calls (those a script runs included): what the commands
// themselves cost, without the Lua around them, the protocol or the event
// loop.
func (a redisStats) inCommands() float64 {
	var usec int64
	for name, c := range a.cmds {
		if !scriptCommands[name] {
			usec += c.usec
		}
	}
	return float64(usec) / 1e6
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

// redisStats reads the counters, summed over every master of a Cluster
// (each master's cpu kept in masters).
func (e *env) redisStats(ctx context.Context) (redisStats, error) {
	var (
		mu  sync.Mutex
		sum redisStats
	)
	err := e.eachMaster(ctx, func(ctx context.Context, addr string, c redis.Cmdable) error {
		info, err := c.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return fmt.Errorf("info %s: %w", addr, err)
		}
		mu.Lock()
		defer mu.Unlock()
		sum = sum.add(addr, parseInfo(info))
		return nil
	})
	return sum, err
}

// add is a plus one node's counters s (its cpu also under masters[addr]
// when addr is not empty).
func (a redisStats) add(addr string, s redisStats) redisStats {
	out := redisStats{calls: a.calls + s.calls, cpu: a.cpu + s.cpu, sys: a.sys + s.sys, cmds: maps.Clone(a.cmds), masters: maps.Clone(a.masters)}
	if out.cmds == nil {
		out.cmds = map[string]cmdStat{}
	}
	for name, c := range s.cmds {
		sum := out.cmds[name]
		out.cmds[name] = cmdStat{calls: sum.calls + c.calls, usec: sum.usec + c.usec}
	}
	if addr != "" {
		if out.masters == nil {
			out.masters = map[string]float64{}
		}
		out.masters[addr] += s.cpu
	}
	return out
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
	now, err := e.redisStats(ctx)
	if err != nil {
		return "  redis: " + err.Error() + "\n"
	}
	st := now.sub(since)
	fmt.Fprintf(&b, "  redis over the run's last %.0f s: %.1f s CPU, %d commands;", time.Since(at).Seconds(), st.cpu, st.calls)
	for _, name := range []string{"evalsha", "eval"} {
		if c, ok := now.cmds[name]; ok {
			fmt.Fprintf(&b, " cmdstat_%s:calls=%d,usec=%d", name, c.calls, c.usec)
		}
	}
	b.WriteString("\n")
	for _, q := range append([]string{wire.WebhookQueue(prefix), "default"}, wire.HandoffQueueNames(prefix)...) {
		pending, _ := e.rdb.LLen(ctx, wire.AsynqQueueKey(q, "pending")).Result()
		active, _ := e.rdb.LLen(ctx, wire.AsynqQueueKey(q, "active")).Result()
		if pending+active > 0 {
			fmt.Fprintf(&b, "  asynq queue %s: %d pending, %d active\n", q, pending, active)
		}
	}
	return b.String()
}

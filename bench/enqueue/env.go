package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// env is what every cell shares: the HTTP client, the Redis client, the
// dispatch store on the throttler's keys and the prepared request bodies.
type env struct {
	o      options
	http   *http.Client
	rdb    *redis.Client
	st     *store.Store
	one    []byte         // one job, as a producer sends it
	batch  []byte         // {"jobs":[one × o.batch]}
	items  []store.Item   // o.batch items of the canonical job, for the direct cells
	pids   map[string]int // process name → pid, for CPU accounting
	evalsh string         // SHA of the trivial script
}

func newEnv(ctx context.Context, o options) (*env, error) {
	opt, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = 2 * o.producers
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("ping %s: %w", o.redisURL, err)
	}
	st, err := store.NewStore(rdb, store.Config{Prefix: o.prefix, Shards: o.shards})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("load the trivial script: %w", err)
	}
	one, batch := jobBodies(o.pad, o.batch)
	spec, err := job.Parse(one)
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("parse the bench job: %w", err)
	}
	items := make([]store.Item, o.batch)
	for i := range items {
		items[i] = store.Item{Type: wire.TypeWebhook, Cost: 1, Body: spec.Canonical()}
	}
	tr := &http.Transport{
		MaxIdleConns:        2 * o.producers,
		MaxIdleConnsPerHost: 2 * o.producers,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &env{
		o:      o,
		http:   &http.Client{Transport: tr, Timeout: 30 * time.Second},
		rdb:    rdb,
		st:     st,
		one:    one,
		batch:  batch,
		items:  items,
		pids:   parsePids(o.pids),
		evalsh: sha,
	}, nil
}

func (e *env) close() {
	e.http.CloseIdleConnections()
	_ = e.rdb.Close()
}

// jobBodies returns one webhook job with a payload padded by pad characters,
// and a batch body of n of them.
func jobBodies(pad, n int) (one, batch []byte) {
	one = fmt.Appendf(nil, `{"type":"webhook","url":"https://example.com/hook","event":"invoice.paid","payload":{"pad":%q}}`,
		strings.Repeat("x", pad))
	batch = append(batch, `{"jobs":[`...)
	for i := range n {
		if i > 0 {
			batch = append(batch, ',')
		}
		batch = append(batch, one...)
	}
	return one, append(batch, "]}"...)
}

// tenantNames returns n tenant ids starting with tag, so every cell has
// fresh admission buckets and backlogs.
func tenantNames(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("bench-%s-%03d", tag, i)
	}
	return out
}

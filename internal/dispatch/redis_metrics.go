package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisscript"
)

// redisScrapeTimeout bounds a scrape's INFO memory of every master.
const redisScrapeTimeout = 2 * time.Second

// RedisCollector is a Prometheus collector that asks every Redis master
// (one for a single node or Sentinel, each master of a Cluster) for INFO
// memory at scrape time: sluice_redis_up is 1 when every master answered
// within redisScrapeTimeout, else 0; sluice_redis_memory_used_bytes and
// sluice_redis_maxmemory_bytes (0: no limit) come per answering master,
// labeled node (its address; "" for a client that is not a Cluster). The
// label is bounded by the number of masters. Cost: one INFO per master per
// scrape. The alert rules (deploy/alerts.yml) read "Redis unavailable" and
// "storage near full" from it.
type RedisCollector struct {
	rdb            redis.UniversalClient
	log            *slog.Logger
	timeout        time.Duration
	up, used, maxm *prometheus.Desc
}

var _ prometheus.Collector = (*RedisCollector)(nil)

// NewRedisCollector returns the collector of rdb's masters.
func NewRedisCollector(rdb redis.UniversalClient, log *slog.Logger) *RedisCollector {
	node := []string{"node"}
	return &RedisCollector{
		rdb: rdb, log: log, timeout: redisScrapeTimeout,
		up:   prometheus.NewDesc("sluice_redis_up", "1 when every Redis master answered INFO memory within 2 s at this scrape, else 0.", nil, nil),
		used: prometheus.NewDesc("sluice_redis_memory_used_bytes", "A Redis master's used_memory, by master address.", node, nil),
		maxm: prometheus.NewDesc("sluice_redis_maxmemory_bytes", "A Redis master's maxmemory (0: no limit), by master address.", node, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *RedisCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.used
	ch <- c.maxm
}

// Collect implements prometheus.Collector.
func (c *RedisCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var mu sync.Mutex // ForEachMaster calls a Cluster's masters concurrently
	err := redisscript.ForEachMaster(ctx, c.rdb, func(ctx context.Context, node redis.UniversalClient) error {
		used, maxm, err := redisscript.ReadMemory(ctx, node)
		if err != nil {
			return err
		}
		addr := ""
		if n, ok := node.(*redis.Client); ok && isCluster(c.rdb) {
			addr = n.Options().Addr
		}
		mu.Lock()
		defer mu.Unlock()
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(used), addr)
		ch <- prometheus.MustNewConstMetric(c.maxm, prometheus.GaugeValue, float64(maxm), addr)
		return nil
	})
	up := 1.0
	if err != nil {
		up = 0
		c.log.Warn("redis metrics: INFO memory", "err", err)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}

func isCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

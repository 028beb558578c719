package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The files under test, from this package's directory.
var (
	alertsFile    = filepath.Join("..", "..", "deploy", "alerts.yml")
	dashboardFile = filepath.Join("..", "..", "deploy", "grafana", "dashboards", "sluice.json")
)

// TestAlerts (issue #31) runs deploy/alerts.yml on a real Prometheus that
// scrapes a real throttler and worker every second (on a Redis of the
// test's own, which it fills and kills). While all is well no alert fires;
// then each alert's condition is provoked in turn and the alert must fire:
// a backlog whose drain forecast is over an hour, jobs dead-lettered by a
// receiver answering 400, Redis above 80% of its maxmemory, the only
// throttler stopped (SIGSTOP: its shards unheld), the only worker stopped,
// Redis killed. Last, every Grafana panel's query must have returned
// series at some point of the run. The rules' `for:` are cut to 0s in
// Prometheus's copy: the expressions are the shipped ones.
func TestAlerts(t *testing.T) {
	t.Parallel()
	red := redistest.NewPrivate(t)
	rdb := red.Client(t)
	c := newCluster(t, options{redisURL: red.URL(), client: rdb,
		tenants: map[string]string{"busy": "{rate: 50/s}", "slow": "{rate: 1/m, burst: 1}", "doomed": "{rate: 20/s}"},
		sections: map[string]string{"limits": "{api: {algorithm: sliding_window, limit: 1000000, window: 1s}, " +
			"search: {algorithm: token_bucket, rate: 5/s, burst: 20}}"}})
	start := time.Now()
	th := c.startThrottler()
	wk, metrics := startWorkerWithMetrics(c)
	prom := startPrometheus(t, alertsFile, map[string]string{"sluice-throttler": th.addr, "sluice-worker": metrics})

	c.recv.waitDistinct(t, c.enqueue(th, "busy", 20), 30*time.Second)
	if code := c.call(th, http.MethodPost, "/v1/limits/search/check", map[string]any{"key": "k", "cost": 1}, nil); code != http.StatusOK {
		t.Fatalf("limit check answered %d", code)
	}
	poll(t, 30*time.Second, func() (bool, string) {
		up := prom.query(`sum(up) == 2 and on() sum(sluice_dispatch_shards_owned) == ` + fmt.Sprint(shards))
		return len(up) == 1, "prometheus does not see both targets up and every shard owned"
	})
	// Before the first scrapes nothing is owned: the alert that fired then
	// resolves at the next evaluation.
	poll(t, 10*time.Second, func() (bool, string) {
		f := prom.firing()
		return len(f) == 0, fmt.Sprintf("alerts still firing once all is well: %v", f)
	})
	redistest.Hold(t, 3*time.Second, "no alert fires while all is well", func() bool {
		if f := prom.firing(); len(f) > 0 {
			t.Logf("firing while all is well: %v", f)
			return false
		}
		return true
	})

	c.enqueue(th, "slow", 100) // 1/min: about 99 minutes to drain
	prom.waitFiring("SluiceBacklogNotDraining", map[string]string{"tenant": "slow"})

	c.recv.setStatus("doomed", http.StatusBadRequest) // a permanent failure: dead at once
	c.enqueue(th, "doomed", 3)
	prom.waitFiring("SluiceDeadLettersRising", nil)

	provokeStorageNearFull(t, c, prom)

	th.pause()
	prom.waitFiring("SluiceShardsUnheld", nil)
	th.resume()

	wk.term(30 * time.Second)
	prom.waitFiring("SluiceNoWorkerCapacity", nil)

	red.Kill(t)
	prom.waitFiring("SluiceRedisUnavailable", nil)
	poll(t, 30*time.Second, func() (bool, string) { // enqueues that fail, for the Redis errors panel
		c.call(th, http.MethodPost, "/v1/tenants/busy/jobs", c.webhookJob("busy", 0), nil)
		return len(prom.query(`sum by (op) (rate(sluice_redis_errors_total[5s]))`)) > 0, "no Redis error counted by the API"
	})

	requirePanelsHaveSeries(t, prom, start)
}

// startWorkerWithMetrics starts a worker whose /metrics listens on a port
// the system picks and returns it with that address, from its "worker
// running" log line.
func startWorkerWithMetrics(c *cluster) (*proc, string) {
	c.t.Helper()
	p := startProc(c.t, "worker-metrics", bin.worker, []string{"--config", c.cfgPath, "--metrics-listen", "127.0.0.1:0"},
		map[string]string{"SLUICE_REDIS_URL": c.redisURL})
	p.waitLog(`"msg":"worker running"`, startTimeout)
	addr, _ := p.logged("worker running")[0]["metrics"].(string)
	if addr == "" {
		c.t.Fatalf("the worker's running line names no metrics address: %s", p.logs.String())
	}
	return p, addr
}

// provokeStorageNearFull sets Redis's maxmemory so that its used memory
// is about 85% of it — above the alert's 80%, below the 90% high-water
// mark that would refuse enqueues — waits for the alert, and lifts the
// limit again.
func provokeStorageNearFull(t *testing.T, c *cluster, prom *promServer) {
	t.Helper()
	ctx := context.Background()
	used := redistest.UsedMemory(t, c.rdb)
	if err := c.rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(int64(float64(used)/0.85))).Err(); err != nil {
		t.Fatal(err)
	}
	prom.waitFiring("SluiceStorageNearFull", nil)
	if err := c.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
}

// requirePanelsHaveSeries runs every Grafana panel's queries over the run
// (Grafana's $__rate_interval as 5s: four scrapes) and names those that
// returned no series at any step.
func requirePanelsHaveSeries(t *testing.T, prom *promServer, from time.Time) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	var empty []string
	queries := 0
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			walk(p.Panels) // a row's panels
			for _, target := range p.Targets {
				queries++
				q := strings.ReplaceAll(target.Expr, "$__rate_interval", "5s")
				if len(prom.queryRange(q, from)) == 0 {
					empty = append(empty, fmt.Sprintf("%q: %s", p.Title, q))
				}
			}
		}
	}
	walk(dash.Panels)
	if queries == 0 {
		t.Fatal("the dashboard has no queries")
	}
	if len(empty) > 0 {
		slices.Sort(empty)
		t.Errorf("%d of %d dashboard queries returned no series during the run:\n%s", len(empty), queries, strings.Join(empty, "\n"))
	}
}

// grafanaPanel is the part of a dashboard panel the test reads.
type grafanaPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

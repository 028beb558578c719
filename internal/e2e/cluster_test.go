package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/deliverytest"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/worker"
)

// adminKey is the plaintext admin API key of every test's configuration.
const adminKey = "e2e-admin-key"

// cluster is one test's Sluice: a configuration file on a private key
// prefix, a receiver, and the throttlers and workers the test starts, all
// on the test Redis unless redisURL says otherwise.
type cluster struct {
	t        *testing.T
	prefix   string
	shards   int
	cfgPath  string
	redisURL string
	rdb      redis.UniversalClient
	clock    *worker.Clock // the receiver's estimate of Redis's clock
	recv     *receiver
	http     *http.Client // to the throttlers' APIs
	n        atomic.Int32 // processes started, to name them
}

// shards is redis.shards of every test's configuration.
const shards = 4

// options shape a cluster's configuration: tenants maps a tenant id to its
// policy overrides as a YAML flow mapping ("{rate: 40/s, burst: 1}");
// sections replace top-level sections of the base configuration (see
// newCluster) by key, with a YAML value.
type options struct {
	tenants  map[string]string
	sections map[string]string
	redisURL string // default: the test Redis
	// client, when set, is a client of the Redis at redisURL, for the
	// test's own reads (default: redistest.New's, of the test Redis).
	client redis.UniversalClient
	// redisExtra is added to the redis section's flow mapping
	// (", wait_replicas: 1").
	redisExtra string
}

// newCluster writes the configuration and starts the receiver. The base
// configuration: 4 shards; one admin key; the API limiter out of the way;
// defaults with adaptive rates off (the tests check fixed rates) and
// unsigned webhooks (the receiver checks no signatures, and the tenants have
// no secret: without unsigned their webhook jobs are refused), an
// attempt timeout of 2s and retries from 100ms apart (a killed worker's
// running jobs come back 2.5s after their claim); grace 500ms (its
// released ones after 500ms); loopback egress allowed; workers of
// concurrency 20 with a shutdown timeout of 5s (≥ 2·D + 2s + 2s); JSON logs.
func newCluster(t *testing.T, o options) *cluster {
	t.Helper()
	rdb, prefix := redistest.New(t)
	if o.client != nil {
		rdb = o.client
	}
	c := &cluster{t: t, prefix: prefix, shards: shards, rdb: rdb, redisURL: cmp.Or(o.redisURL, redistest.URL())}
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: c.shards})
	if err != nil {
		t.Fatal(err)
	}
	c.clock = worker.NewClock(rdb, 0)
	if err := c.clock.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.recv = newReceiver(t, c.clock, st)
	c.http = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.http.CloseIdleConnections)

	sections := map[string]string{
		"listen": "127.0.0.1:0",
		"redis":  fmt.Sprintf("{prefix: %s, shards: %d%s}", prefix, c.shards, o.redisExtra),
		"auth":   fmt.Sprintf(`{keys: [{name: e2e, key: %q, tenants: ["*"], admin: true}]}`, adminKey),
		"limits": "{api: {algorithm: sliding_window, limit: 1000000, window: 1s}}",
		"defaults": "{adaptive: false, unsigned: true, concurrency: 50, timeout: 2s, " +
			"retry: {max_attempts: 8, min_backoff: 100ms, max_backoff: 1s, max_doublings: 3}}",
		"dispatch": "{grace: 500ms}",
		"egress":   `{allow: ["127.0.0.0/8"]}`,
		"worker":   "{concurrency: 20, shutdown_timeout: 5s}",
		"log":      "{format: json, level: info}",
	}
	maps.Copy(sections, o.sections)
	if p := os.Getenv("SLUICE_TEST_PLANNER"); p != "" { // scripts/test: dispatch.planner go as well
		d := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(sections["dispatch"], "{"), "}"))
		sections["dispatch"] = "{" + strings.TrimSuffix("planner: "+p+", "+d, ", ") + "}"
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(sections)) {
		fmt.Fprintf(&b, "%s: %s\n", k, sections[k])
	}
	if len(o.tenants) > 0 {
		b.WriteString("tenants:\n")
		for _, id := range slices.Sorted(maps.Keys(o.tenants)) {
			fmt.Fprintf(&b, "  %s: %s\n", id, o.tenants[id])
		}
	}
	c.cfgPath = filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(c.cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// startThrottler starts a throttler on a port the system picks (listen
// address 127.0.0.1:0, so no other process can take it first), learns the
// address from its "throttler listening" log line, and waits until its
// /readyz answers 200.
func (c *cluster) startThrottler() *proc {
	c.t.Helper()
	p := c.spawnThrottler("127.0.0.1:0")
	poll(c.t, startTimeout, func() (bool, string) {
		if !p.running() {
			c.t.Fatalf("%s ended (%s) before listening", p.name, p.status)
		}
		if l := p.logged("throttler listening"); len(l) > 0 {
			p.addr, _ = l[0]["addr"].(string)
		}
		return p.addr != "", fmt.Sprintf("%s did not log its listening address", p.name)
	})
	p.waitReadyz(http.StatusOK, startTimeout)
	return p
}

// spawnThrottler starts a throttler listening on addr without waiting.
func (c *cluster) spawnThrottler(addr string) *proc {
	c.t.Helper()
	name := fmt.Sprintf("throttler-%d", c.n.Add(1))
	p := startProc(c.t, name, bin.throttler, []string{"--config", c.cfgPath},
		map[string]string{"SLUICE_REDIS_URL": c.redisURL, "SLUICE_LISTEN": addr})
	if !strings.HasSuffix(addr, ":0") {
		p.addr = addr
	}
	return p
}

// startWorker starts a worker (no metrics listener) and waits until it
// serves its queues.
func (c *cluster) startWorker() *proc {
	c.t.Helper()
	name := fmt.Sprintf("worker-%d", c.n.Add(1))
	p := startProc(c.t, name, bin.worker, []string{"--config", c.cfgPath, "--metrics-listen", "off"},
		map[string]string{"SLUICE_REDIS_URL": c.redisURL})
	p.waitLog(`"msg":"worker running"`, startTimeout)
	return p
}

// call sends an API request to the throttler p with the admin key and
// decodes a JSON answer into out (when not nil). It returns the status.
func (c *cluster) call(p *proc, method, path string, body, out any) int {
	c.t.Helper()
	return c.callWith(p, method, path, body, out, nil, nil)
}

// callWith is call with extra request headers (empty values are left out)
// and, when seen is not nil, a look at the answer's headers.
func (c *cluster) callWith(p *proc, method, path string, body, out any, header map[string]string, seen func(http.Header)) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.url()+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s on %s: %v", method, path, p.name, err)
	}
	defer resp.Body.Close()
	if seen != nil {
		seen(resp.Header)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s on %s: read answer: %v", method, path, p.name, err)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s on %s: %d %s: %v", method, path, p.name, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// webhookJob is the body of a webhook job to the receiver.
func (c *cluster) webhookJob(tenant string, i int) map[string]any {
	return map[string]any{"type": "webhook", "url": c.recv.url(tenant), "event": "e2e.test",
		"payload": map[string]int{"i": i}}
}

// enqueue posts n webhook jobs for tenant through p's batch route and
// returns their ids in order.
func (c *cluster) enqueue(p *proc, tenant string, n int) []string {
	c.t.Helper()
	jobs := make([]map[string]any, n)
	for i := range jobs {
		jobs[i] = c.webhookJob(tenant, i)
	}
	var res struct {
		Results []struct {
			ID     string `json:"id"`
			Status int    `json:"status"`
		} `json:"results"`
	}
	if st := c.call(p, http.MethodPost, "/v1/tenants/"+tenant+"/jobs:batch", map[string]any{"jobs": jobs}, &res); st != http.StatusAccepted {
		c.t.Fatalf("enqueue %d jobs for %s: status %d, want 202", n, tenant, st)
	}
	ids := make([]string, 0, n)
	for _, r := range res.Results {
		if r.Status != http.StatusAccepted || r.ID == "" {
			c.t.Fatalf("enqueue for %s: item %+v not accepted", tenant, r)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// jobState is GET /v1/jobs/{id} on p.
type jobState struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	AttemptCount int64  `json:"attempt_count"`
	Attempts     []struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	} `json:"attempts"`
}

// waitSucceeded polls GET /v1/jobs/{id} on p until every job has
// succeeded (a finish follows the receiver's answer) and returns the jobs.
func (c *cluster) waitSucceeded(p *proc, ids []string, within time.Duration) map[string]jobState {
	c.t.Helper()
	done := map[string]jobState{}
	poll(c.t, within, func() (bool, string) {
		var notYet []string
		for _, id := range ids {
			if _, ok := done[id]; ok {
				continue
			}
			var j jobState
			if st := c.call(p, http.MethodGet, "/v1/jobs/"+id, nil, &j); st != http.StatusOK {
				c.t.Fatalf("GET /v1/jobs/%s: status %d", id, st)
			}
			if j.State == "succeeded" {
				done[id] = j
			} else {
				notYet = append(notYet, id+" "+j.State)
			}
		}
		return len(notYet) == 0, fmt.Sprintf("%d of %d jobs not succeeded, e.g. %v", len(notYet), len(ids), notYet[:min(len(notYet), 5)])
	})
	return done
}

// leaseOwner returns the owner token of shard's dispatch lease ("" = none).
func (c *cluster) leaseOwner(shard int) string {
	v, err := c.rdb.Get(context.Background(), dispatch.LeaseKey(c.prefix, shard)).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// tookShard reports whether throttler p has logged taking shard's lease.
func tookShard(p *proc, shard int) bool {
	return len(p.logged("shard lease taken", "shard", float64(shard))) > 0
}

// logged returns the JSON log lines of p whose msg is msg and whose
// attributes hold the given key, value pairs (numbers as float64).
func (p *proc) logged(msg string, kv ...any) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(p.logs.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			ok = ok && m[kv[i].(string)] == kv[i+1]
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// checkRate fails unless every window of the arrivals holds at most
// b + r·(Δ + 2ε_r) + 1 requests (each job costs 1), Δ the window's length
// and ε_r the measured p99 send error (docs/design.md §5). It logs the worst excess
// over the stricter b + r·Δ + 1, and the arrivals of that window when it
// is positive.
func checkRate(t *testing.T, got []arrival, rate float64, burst int) {
	t.Helper()
	epsR := sendError(got)
	at := make([]time.Time, len(got))
	for i, a := range got {
		at[i] = a.at
	}
	worst, from, to := deliverytest.WorstWindow(at, rate, burst)
	t.Logf("rate %.0f/s, burst %d: worst window %+.3f requests against b + r·Δ + 1 (from %s); ε_r = %s",
		rate, burst, worst, got[from].at.Format(time.StampMicro), epsR)
	if worst > 0 {
		var b strings.Builder
		for k := from; k <= to; k++ {
			fmt.Fprintf(&b, "\n\t%s +%s: arrival − slot %s", got[k].id, got[k].at.Sub(got[from].at), got[k].redis.Sub(got[k].slot))
		}
		t.Logf("the worst window's arrivals:%s", b.String())
	}
	if worst > rate*2*epsR.Seconds() {
		t.Errorf("a window from %s holds %.3f requests more than b + r·Δ + 1, beyond 2·r·ε_r = %.3f",
			got[from].at.Format(time.StampMicro), worst, rate*2*epsR.Seconds())
	}
}

// sendError is ε_r: the p99 of |arrival − slot| over the arrivals, each
// on the receiver's estimate of Redis's clock against the slot it was sent
// for (arrivals whose slot could not be read are left out).
func sendError(got []arrival) time.Duration {
	var errs []time.Duration
	for _, a := range got {
		if !a.slot.IsZero() {
			errs = append(errs, a.redis.Sub(a.slot))
		}
	}
	return deliverytest.P99(errs)
}

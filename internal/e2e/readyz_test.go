package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestReadyzFollowsRedis: a throttler and a worker on a Redis of their own;
// /readyz answers 200; when that Redis is killed, 503; when it is started
// again on the same port (its data back from its append-only file), 200
// again without restarting anything; then jobs enqueued are dispatched and
// delivered (both processes resumed by themselves), and the throttler still
// stops cleanly on SIGTERM.
func TestReadyzFollowsRedis(t *testing.T) {
	t.Parallel()
	const tenant = "acme"
	port := freePort(t)
	dir := t.TempDir()
	rs := startRedis(t, port, dir)
	c := newCluster(t, options{
		redisURL: fmt.Sprintf("redis://127.0.0.1:%d/0", port),
		tenants:  map[string]string{tenant: "{rate: 50/s, burst: 5}"},
	})
	th := c.startThrottler()
	w := c.startWorker()

	rs.kill9()
	th.waitReadyz(http.StatusServiceUnavailable, 10*time.Second)
	startRedis(t, port, dir)
	th.waitReadyz(http.StatusOK, 10*time.Second)

	ids := c.enqueue(th, tenant, 5)
	c.recv.waitDistinct(t, ids, 15*time.Second)
	c.waitSucceeded(th, ids, 10*time.Second)
	exactlyOnce(t, c.recv.arrivals(tenant), ids)
	th.term(15 * time.Second)
	w.term(10 * time.Second)
}

// startRedis starts a redis-server of the test's own on port (its files in
// dir, every write in its append-only file at once, so that a restart on
// the same dir has the data back) and waits until it answers.
func startRedis(t *testing.T, port int, dir string) *proc {
	t.Helper()
	return startRedisAOF(t, port, dir, "always")
}

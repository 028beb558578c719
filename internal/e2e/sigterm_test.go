package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestSIGTERMLosesNothing: a worker stopped with SIGTERM while it holds
// slow requests (500ms each) lets them finish and exits 0 within its
// shutdown timeout (5s: 2·D + timeout 2s + 2s is less); a second worker
// carries on. Then the throttler is stopped with SIGTERM (exit 0) and
// started again, and the remaining jobs are delivered. A graceful stop is
// no crash: every job arrives exactly once (docs/design.md §4.2).
func TestSIGTERMLosesNothing(t *testing.T) {
	t.Parallel()
	const tenant, n = "acme", 80
	const shutdownTimeout = 5 * time.Second // worker.shutdown_timeout in the base configuration
	c := newCluster(t, options{tenants: map[string]string{tenant: "{rate: 20/s, burst: 1, concurrency: 50}"}})
	c.recv.setHold(500 * time.Millisecond)
	th := c.startThrottler()
	w1 := c.startWorker()
	ids := c.enqueue(th, tenant, n)

	c.recv.waitUntil(t, 30*time.Second, func() bool {
		return len(c.recv.arrivals(tenant)) >= 15 && c.recv.held() >= 3
	}, func() string {
		return fmt.Sprintf("%d of %d jobs arrived, %d held", len(c.recv.arrivals(tenant)), n, c.recv.held())
	})
	held := c.recv.held()
	took := w1.term(shutdownTimeout + 2*time.Second) // + the process's own start and teardown
	for _, a := range c.recv.arrivals(tenant) {
		if a.aborted {
			t.Errorf("job %s: its request was cut off by the worker's graceful stop", a.id)
		}
	}
	t.Logf("%s stopped %s after SIGTERM, with %d requests held at the signal", w1.name, took.Round(time.Millisecond), held)

	c.startWorker()
	c.recv.waitUntil(t, 30*time.Second, func() bool { return len(c.recv.arrivals(tenant)) >= n/2 },
		func() string { return fmt.Sprintf("%d of %d jobs arrived", len(c.recv.arrivals(tenant)), n) })
	took = th.term(15 * time.Second) // its HTTP drain is bounded by 10s
	atStop := len(c.recv.arrivals(tenant))
	t.Logf("%s stopped %s after SIGTERM, %d of %d jobs delivered", th.name, took.Round(time.Millisecond), atStop, n)

	th = c.startThrottler()
	c.recv.waitDistinct(t, ids, 30*time.Second)
	c.waitSucceeded(th, ids, 15*time.Second)
	got := c.recv.arrivals(tenant)
	exactlyOnce(t, got, ids)
	t.Logf("duplicates: %d", len(got)-len(ids))
}

//go:build consolecpu

package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/procstat"
	"github.com/sluicehq/sluice/internal/store"
)

// The console CPU measurement (scripts/console-cpu; built only with -tags
// consolecpu, not part of CI): its flags, after -args.
var (
	cpuTenants  = flag.Int("tenants", 10_000, "tenants seeded, each paused with one queued job")
	cpuDuration = flag.Duration("duration", 60*time.Second, "how long the 20 pages poll")
	cpuBaseline = flag.Duration("baseline", 15*time.Second, "how long the throttler's CPU is read with no page polling, first")
)

// TestConsoleCPU starts a throttler (console on: its summary warmer runs)
// and a worker, seeds -tenants tenants (each paused with one queued job:
// state that stays, every one read by the summary's walk) beside alpha
// delivering 5 jobs/s, reads the throttler's CPU (/proc/<pid>/stat) and
// Redis's (INFO cpu) for -baseline with no page open, then while 20 pages
// poll at the console's rate — 10 overviews (GET /v1/summary each second),
// 10 tenant pages (GET /v1/tenants/alpha/live each second) — for
// -duration, and prints both. A figure for docs/benchmarks.md, not an assertion.
func TestConsoleCPU(t *testing.T) {
	c := newCluster(t, options{tenants: map[string]string{"alpha": "{rate: 5/s, burst: 1}"}})
	ctx := context.Background()
	st, err := store.NewStore(c.rdb, store.Config{Prefix: c.prefix, Shards: c.shards})
	if err != nil {
		t.Fatal(err)
	}
	seedStart := time.Now()
	for i := range *cpuTenants {
		tn := fmt.Sprintf("t%05d", i)
		if err := st.Pause(ctx, tn, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Enqueue(ctx, tn, []store.Item{{Type: "webhook", Body: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "console-cpu: seeded %d tenants in %s\n", *cpuTenants, time.Since(seedStart).Round(time.Millisecond))
	p := c.startThrottler()
	c.startWorker()
	stop := make(chan struct{})
	fed := make(chan struct{})
	go func() { // alpha: 5 jobs a second, delivered at its rate
		defer close(fed)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			c.enqueue(p, "alpha", 5)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-fed }()
	poll(t, 2*time.Minute, func() (bool, string) {
		var s struct {
			Tenants int `json:"tenants"`
		}
		c.call(p, http.MethodGet, "/v1/summary", nil, &s)
		return s.Tenants >= *cpuTenants+1, fmt.Sprintf("the summary lists %d tenants", s.Tenants)
	})

	cpu0, _ := procstat.ProcessCPU(p.cmd.Process.Pid)
	redis0 := redisCPU(t, c)
	start := time.Now()
	<-time.After(*cpuBaseline) // a measured span, not a wait for an effect
	cpu1, _ := procstat.ProcessCPU(p.cmd.Process.Pid)
	redis1 := redisCPU(t, c)
	idle := time.Since(start).Seconds()
	fmt.Fprintf(os.Stderr, "console-cpu: no page, %s: throttler %.1f%% of one core, Redis %.1f%%\n",
		*cpuBaseline, 100*(cpu1-cpu0)/idle, 100*(redis1-redis0)/idle)

	redis0, start = redisCPU(t, c), time.Now()
	pct := pollCost(t, c, p, *cpuDuration)
	redis1 = redisCPU(t, c)
	fmt.Fprintf(os.Stderr, "console-cpu: 20 pages, %s, %d tenants: throttler %.1f%% of one core, Redis %.1f%%\n",
		*cpuDuration, *cpuTenants+1, pct, 100*(redis1-redis0)/time.Since(start).Seconds())
}

// redisCPU is the Redis server's CPU seconds so far (INFO cpu: used_cpu_sys
// + used_cpu_user), the whole server's: every test sharing it counts.
func redisCPU(t *testing.T, c *cluster) float64 {
	t.Helper()
	info, err := c.rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			sum += f
		}
	}
	return sum
}

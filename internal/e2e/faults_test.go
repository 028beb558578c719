package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/chaos"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// TestFaults is the fault-injection matrix (issue #18): each subtest runs
// sc.jobs webhooks over five tenants (10/s each, burst 1) through a
// throttler and workers while a fault hits, producers enqueueing all along
// with Idempotency-Keys, and records a row: accepted, delivered, lost,
// duplicates, rate-bound violations at the receiver, time to recover. Each
// asserts: nothing accepted is lost (AOF everysec: at most the 202s of the
// fsync window before the kill); a duplicate is an attempt in flight
// during the fault, under the same webhook-id (none after a graceful
// stop); the receiver never sees a tenant above its rate bound; every
// enqueue answer is a 202 or a 503/507 with Retry-After and the JSON error
// body. Quick by default; SLUICE_FAULTS=full runs the sizes, and
// SLUICE_FAULTS_OUT names a file the rows are appended to as JSON lines
// (scripts/faults prints them as a table).
func TestFaults(t *testing.T) {
	t.Parallel()
	sc := quickFaults
	if os.Getenv("SLUICE_FAULTS") == "full" {
		sc = fullFaults
	}
	t.Cleanup(func() { writeFaultRows(t) })
	for _, s := range faultScenarios(sc) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.run(t, sc)
		})
	}
}

type faultScenario struct {
	name string
	run  func(t *testing.T, sc faultScale)
}

func faultScenarios(sc faultScale) []faultScenario {
	return []faultScenario{
		{fmt.Sprintf("redis black-holed %s", sc.hole), blackholeScenario},
		{fmt.Sprintf("connections cut ×%d", sc.cuts), cutScenario},
		{fmt.Sprintf("latency 50ms for %s", sc.slow), latencyScenario},
		{"redis restart, AOF always", func(t *testing.T, sc faultScale) { redisRestartScenario(t, sc, "always") }},
		{"redis restart, AOF everysec", func(t *testing.T, sc faultScale) { redisRestartScenario(t, sc, "everysec") }},
		{fmt.Sprintf("kill -9 throttler ×%d", sc.moments), func(t *testing.T, sc faultScale) { killScenario(t, sc, true, false) }},
		{fmt.Sprintf("kill -9 worker ×%d", sc.moments), func(t *testing.T, sc faultScale) { killScenario(t, sc, false, true) }},
		{fmt.Sprintf("kill -9 both ×%d", sc.moments), func(t *testing.T, sc faultScale) { killScenario(t, sc, true, true) }},
		{"SIGTERM during a burst", sigtermScenario},
		{"rolling restart 2 throttlers + worker", rollingScenario},
		{"redis out of memory", oomScenario},
	}
}

// faultCluster is a cluster of the five fault tenants on redisURL.
// The receiver holds each request 200ms, so that a fault finds attempts
// in flight.
func faultCluster(t *testing.T, redisURL string, sections ...string) *cluster {
	t.Helper()
	tenants := map[string]string{}
	for _, tn := range faultTenants {
		tenants[tn] = fmt.Sprintf("{rate: %.0f/s, burst: 1, concurrency: 50, admit: {rate: 100000/s, burst: 100000}}", faultRate)
	}
	o := options{redisURL: redisURL, tenants: tenants, sections: map[string]string{}}
	for i := 0; i+1 < len(sections); i += 2 {
		o.sections[sections[i]] = sections[i+1]
	}
	c := newCluster(t, o)
	c.recv.setHold(200 * time.Millisecond)
	return c
}

// proxied starts a chaos proxy to the test Redis and a cluster whose
// processes reach Redis through it (the test's own reads go direct).
func proxied(t *testing.T) (*chaos.Proxy, *cluster) {
	t.Helper()
	redistest.RequireSingle(t, "a proxy in front of one Redis address: a Cluster's clients follow the nodes' own addresses")
	px, err := chaos.Listen(redistest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	return px, faultCluster(t, strings.Replace(redistest.URL(), redistest.Addr(t), px.Addr(), 1))
}

// proxiedRun starts a throttler and a worker behind a proxy and a run of
// sc's producers, and returns once a quarter of the jobs is accepted: the
// moment the network scenarios inject their fault.
func proxiedRun(t *testing.T, sc faultScale) (*chaos.Proxy, *faultRun) {
	t.Helper()
	px, c := proxied(t)
	th := c.startThrottler()
	c.startWorker()
	run := newFaultRun(t, c, sc, th)
	run.start()
	run.waitAccepted(sc.jobs / 4)
	return px, run
}

// during holds a timed fault for d.
func during(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

func blackholeScenario(t *testing.T, sc faultScale) {
	px, run := proxiedRun(t, sc)
	px.Blackhole()
	during(sc.hole)
	px.Resume()
	run.finish(fmt.Sprintf("redis black-holed %s", sc.hole),
		faultCheck{faultEnd: time.Now(), maxDupsEach: workerConcurrency, events: 1})
}

func cutScenario(t *testing.T, sc faultScale) {
	px, run := proxiedRun(t, sc)
	cut := 0
	for i := range sc.cuts {
		if i > 0 {
			during(sc.spread / 2 / time.Duration(sc.cuts))
		}
		cut += px.Cut()
	}
	run.finish(fmt.Sprintf("connections cut ×%d", sc.cuts), faultCheck{faultEnd: time.Now(),
		maxDupsEach: workerConcurrency, events: sc.cuts, note: fmt.Sprintf("%d connections cut", cut)})
}

func latencyScenario(t *testing.T, sc faultScale) {
	px, run := proxiedRun(t, sc)
	px.SetLatency(50 * time.Millisecond)
	during(sc.slow)
	px.SetLatency(0)
	run.finish(fmt.Sprintf("latency 50ms for %s", sc.slow), faultCheck{faultEnd: time.Now(), maxDupsEach: workerConcurrency, events: 1})
}

// startRedisAOF starts a redis-server of the test's own on port with AOF
// and the given appendfsync (always or everysec), its files in dir, and
// waits until it answers.
func startRedisAOF(t *testing.T, port int, dir, fsync string) *proc {
	t.Helper()
	p := startProc(t, "redis-"+strconv.Itoa(port), "redis-server", []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "yes", "--appendfsync", fsync,
		"--dir", dir, "--maxmemory-policy", "noeviction", "--loglevel", "warning",
	}, nil)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	defer rdb.Close()
	poll(t, 20*time.Second, func() (bool, string) {
		if !p.running() {
			t.Fatalf("redis-server on port %d ended: %s", port, p.status)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := rdb.Ping(ctx).Err()
		return err == nil, fmt.Sprintf("redis-server on port %d does not answer: %v", port, err)
	})
	return p
}

// ownRedis starts a redis-server with AOF for one test and a cluster on
// it; the receiver reads job slots from it too.
func ownRedis(t *testing.T, fsync string, sections ...string) (port int, dir string, rs *proc, c *cluster, rdb redis.UniversalClient) {
	t.Helper()
	port, dir = freePort(t), t.TempDir()
	rs = startRedisAOF(t, port, dir, fsync)
	c = faultCluster(t, fmt.Sprintf("redis://127.0.0.1:%d/0", port), sections...)
	rdb = redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.NewStore(rdb, store.Config{Prefix: c.prefix, Shards: c.shards})
	if err != nil {
		t.Fatal(err)
	}
	c.recv.jobs = st // before any traffic
	return port, dir, rs, c, rdb
}

// fsyncWindow is how far back AOF everysec may lose acknowledged writes.
const fsyncWindow = 2 * time.Second

func redisRestartScenario(t *testing.T, sc faultScale, fsync string) {
	port, dir, rs, c, _ := ownRedis(t, fsync)
	th := c.startThrottler()
	c.startWorker()
	run := newFaultRun(t, c, sc, th)
	run.start()
	run.waitAccepted(sc.jobs / 3)
	killedAt := time.Now()
	rs.kill9()
	bound := 0
	if fsync != "always" {
		run.mu.Lock()
		for _, at := range run.acceptedAt {
			if killedAt.Sub(at) <= fsyncWindow {
				bound++
			}
		}
		run.mu.Unlock()
	}
	startRedisAOF(t, port, dir, fsync)
	run.finish("redis restart, AOF "+fsync, faultCheck{faultEnd: time.Now(), lostBound: bound,
		maxDupsEach: workerConcurrency, events: 1, note: fmt.Sprintf("down %s", time.Since(killedAt).Round(time.Millisecond))})
}

// killMoments returns n random fractions of the jobs in [0.15, 0.75],
// sorted: when to kill.
func killMoments(t *testing.T, n int) []float64 {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 18))
	m := make([]float64, n)
	for i := range m {
		m[i] = 0.15 + 0.6*rng.Float64()
	}
	slices.Sort(m)
	t.Logf("kill moments (seed %d): %.2f of the jobs accepted", seed, m)
	return m
}

func killScenario(t *testing.T, sc faultScale, throttler, worker bool) {
	c := faultCluster(t, "")
	th := c.startThrottler()
	workers := []*proc{c.startWorker()}
	if !throttler { // a second worker carries on while one is down
		workers = append(workers, c.startWorker())
	}
	run := newFaultRun(t, c, sc, th)
	run.start()
	moments := killMoments(t, sc.moments)
	for i, m := range moments {
		run.waitAccepted(int(m * float64(sc.jobs)))
		if throttler { // with requests in flight: their producers retry with the same key
			th.kill9()
			run.setThrottlers()
		}
		if worker {
			workers[i%len(workers)].kill9()
		}
		if throttler {
			th = c.startThrottler()
			run.setThrottlers(th)
		}
		if worker {
			workers[i%len(workers)] = c.startWorker()
		}
	}
	what := map[[2]bool]string{{true, false}: "throttler", {false, true}: "worker", {true, true}: "both"}[[2]bool{throttler, worker}]
	run.finish(fmt.Sprintf("kill -9 %s ×%d", what, sc.moments),
		faultCheck{faultEnd: time.Now(), maxDupsEach: workerConcurrency, events: sc.moments})
}

// sigtermScenario: the throttler and the worker get SIGTERM at once while
// the receiver holds requests, and are started again: a graceful stop, so
// every job arrives exactly once.
func sigtermScenario(t *testing.T, sc faultScale) {
	c := faultCluster(t, "")
	th := c.startThrottler()
	w := c.startWorker()
	run := newFaultRun(t, c, sc, th)
	run.start()
	run.waitAccepted(sc.jobs / 3)
	held := c.recv.held()
	run.setThrottlers()
	th.signal(syscall.SIGTERM)
	w.term(10 * time.Second)
	th.exit0(15 * time.Second)
	th = c.startThrottler()
	run.setThrottlers(th)
	c.startWorker()
	run.finish("SIGTERM during a burst", faultCheck{faultEnd: time.Now(), noDups: true, events: 1,
		note: fmt.Sprintf("%d requests held at the signal", held)})
}

// rollingScenario: two throttlers and a worker are replaced one at a time
// (the new one started, then the old one stopped with SIGTERM).
func rollingScenario(t *testing.T, sc faultScale) {
	c := faultCluster(t, "")
	ths := []*proc{c.startThrottler(), c.startThrottler()}
	w := c.startWorker()
	run := newFaultRun(t, c, sc, ths...)
	run.start()
	run.waitAccepted(sc.jobs / 4)
	for i := range ths {
		fresh := c.startThrottler()
		old := ths[i]
		ths[i] = fresh
		run.setThrottlers(ths...)
		old.term(15 * time.Second)
	}
	c.startWorker()
	w.term(10 * time.Second)
	run.finish("rolling restart 2 throttlers + worker", faultCheck{faultEnd: time.Now(), noDups: true, events: 3})
}

// exit0 waits up to within for a process already signalled to end, and
// fails the test unless it exited 0.
func (p *proc) exit0(within time.Duration) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(within):
		p.t.Fatalf("%s still running %s after its signal", p.name, within)
	}
	if code := p.status.ExitCode(); code != 0 {
		p.t.Fatalf("%s exited with %s, want exit status 0", p.name, p.status)
	}
}

// oomHeadroom is where the memory high-water mark (redis.memory_high_water,
// the default) is set against Redis's use at the fault: below it, so the
// API refuses new jobs at once while Redis keeps its headroom.
const oomHeadroom = -(64 << 10)

// oomScenario: Redis's maxmemory (noeviction) is set so that its use is a
// little above the API's high-water mark while producers enqueue: enqueue
// must answer 507 storage_full (or 503) with Retry-After, nothing accepted
// is lost, dispatch goes on draining (succeeded jobs expire after 1s here)
// and enqueue recovers by itself, maxmemory still set. The limit is lifted
// after sc.hole·3 either way so the run ends. (TestRedisMemoryFull fills
// Redis up to the mark with a backlog and checks the drain itself.)
func oomScenario(t *testing.T, sc faultScale) {
	_, _, _, c, rdb := ownRedis(t, "always", "retention", "{succeeded: 1s}")
	th := c.startThrottler()
	c.startWorker()
	run := newFaultRun(t, c, sc, th)
	run.start()
	run.waitAccepted(sc.jobs / 4)
	ctx := context.Background()
	used := redistest.UsedMemory(t, rdb)
	limit := int64(float64(used+oomHeadroom) / config.MemoryHighWaterDefault)
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	setAt := time.Now()
	full := func() time.Time {
		run.mu.Lock()
		defer run.mu.Unlock()
		return run.firstFull
	}
	poll(t, sc.spread, func() (bool, string) {
		return !full().IsZero(), fmt.Sprintf("no 507 in %s with maxmemory %d B (used %d B)",
			time.Since(setAt).Round(time.Millisecond), limit, redistest.UsedMemory(t, rdb))
	})
	fullAt := full()
	recovered := time.Time{}
	deadline := time.Now().Add(3 * sc.hole)
	for recovered.IsZero() && time.Now().Before(deadline) {
		c.recv.waitFor(200 * time.Millisecond)
		run.mu.Lock()
		if n := len(run.acceptedAt); n > 0 && run.acceptedAt[n-1].After(fullAt) {
			recovered = run.acceptedAt[n-1]
		}
		run.mu.Unlock()
	}
	peak := redistest.UsedMemory(t, rdb)
	run.mu.Lock()
	fulls := run.fulls
	run.mu.Unlock()
	during := 0
	for _, a := range c.recv.arrivals("") {
		if a.at.After(fullAt) && (recovered.IsZero() || a.at.Before(recovered)) {
			during++
		}
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	note := fmt.Sprintf("%d × 507, the first %s after maxmemory; %d delivered between the first 507 and the next 202; ",
		fulls, fullAt.Sub(setAt).Round(time.Millisecond), during)
	if recovered.IsZero() {
		note += fmt.Sprintf("NOT recovered by itself in %s (used %d B of %d B), limit lifted", 3*sc.hole, peak, limit)
	} else {
		note += fmt.Sprintf("enqueue recovered by itself %s after the first 507", recovered.Sub(fullAt).Round(time.Millisecond))
	}
	run.finish("redis out of memory", faultCheck{faultEnd: time.Now(), maxDupsEach: workerConcurrency, events: 1, note: note})
	// The producers here enqueue slower than the tenants' rates, so the
	// backlog at the fault may be empty and nothing left to deliver while
	// refused: the note says how many arrived; TestRedisMemoryFull asserts
	// the drain on a backlog.
	if peak >= limit {
		t.Errorf("used_memory %d B reached maxmemory %d B: the high-water mark let Redis's own limit be hit", peak, limit)
	}
	if recovered.IsZero() {
		t.Errorf("enqueue did not recover by itself within %s of the first 507 (%s)", 3*sc.hole, note)
	}
}

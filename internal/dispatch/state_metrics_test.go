package dispatch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

func TestStateCollectorReadsTenantsAndQueues(t *testing.T) {
	t.Parallel()
	rdb, prefix, st := realStore(t, 4, 0)
	ctx := context.Background()
	items := []store.Item{{Type: "webhook", Body: []byte(`{}`)}, {Type: "webhook", Body: []byte(`{}`)}, {Type: "webhook", Body: []byte(`{}`)}}
	if _, err := st.Enqueue(ctx, "acme", items); err != nil {
		t.Fatal(err)
	}
	if err := st.Pause(ctx, "globex", time.Time{}); err != nil {
		t.Fatal(err)
	}
	queue := wire.WebhookQueue(prefix)
	client := asynq.NewClientFromRedisClient(rdb)
	if _, err := client.EnqueueContext(ctx, asynq.NewTask(wire.TaskTypeWebhook, []byte(`{}`)), asynq.Queue(queue)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.EnqueueContext(ctx, asynq.NewTask(wire.TaskTypeWebhook, []byte(`{}`)), asynq.Queue(queue), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	c := NewStateCollector(st, rdb, StateConfig{}, []string{queue}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	reg.MustRegister(c)
	want := `
# HELP sluice_tenant_backlog_jobs Jobs toward max_backlog (scheduled, queued, released, retrying), per labeled tenant.
# TYPE sluice_tenant_backlog_jobs gauge
sluice_tenant_backlog_jobs{tenant="acme"} 3
sluice_tenant_backlog_jobs{tenant="globex"} 0
# HELP sluice_tenant_paused 1 while the tenant cannot send: admin-paused, upstream-paused or disabled by a 410.
# TYPE sluice_tenant_paused gauge
sluice_tenant_paused{reason="admin",tenant="acme"} 0
sluice_tenant_paused{reason="admin",tenant="globex"} 1
sluice_tenant_paused{reason="disabled",tenant="acme"} 0
sluice_tenant_paused{reason="disabled",tenant="globex"} 0
sluice_tenant_paused{reason="upstream",tenant="acme"} 0
sluice_tenant_paused{reason="upstream",tenant="globex"} 0
# HELP sluice_tenant_rate_per_second The tenant's configured dispatch rate (policy rate), per labeled tenant.
# TYPE sluice_tenant_rate_per_second gauge
sluice_tenant_rate_per_second{tenant="acme"} 10
sluice_tenant_rate_per_second{tenant="globex"} 10
# HELP sluice_inflight_jobs Jobs released or running, over every shard.
# TYPE sluice_inflight_jobs gauge
sluice_inflight_jobs 0
`
	want += `# HELP sluice_tenant_effective_rate_per_second The tenant's effective dispatch rate: the configured rate times the adaptive rate factor.
# TYPE sluice_tenant_effective_rate_per_second gauge
sluice_tenant_effective_rate_per_second{tenant="acme"} 10
sluice_tenant_effective_rate_per_second{tenant="globex"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_tenant_backlog_jobs", "sluice_tenant_paused",
		"sluice_tenant_rate_per_second", "sluice_tenant_effective_rate_per_second", "sluice_inflight_jobs"); err != nil {
		t.Error(err)
	}
	sizes := `
# HELP sluice_asynq_queue_tasks Tasks in the asynq queues Sluice feeds, by queue and state.
# TYPE sluice_asynq_queue_tasks gauge
sluice_asynq_queue_tasks{queue="Q",state="active"} 0
sluice_asynq_queue_tasks{queue="Q",state="archived"} 0
sluice_asynq_queue_tasks{queue="Q",state="completed"} 0
sluice_asynq_queue_tasks{queue="Q",state="pending"} 1
sluice_asynq_queue_tasks{queue="Q",state="retry"} 0
sluice_asynq_queue_tasks{queue="Q",state="scheduled"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.ReplaceAll(sizes, "Q", queue)), "sluice_asynq_queue_tasks"); err != nil {
		t.Error(err)
	}
}

// The top N tenants by backlog are labeled, re-chosen at each read; the
// others are summed under _other; with 10 000 tenants made at run time the
// series stay N + 1 per metric.
func TestStateCollectorTopTenants(t *testing.T) {
	t.Parallel()
	_, _, st := realStore(t, 4, 0)
	ctx := context.Background()
	const n, top = 10_000, 5
	job := store.Item{Type: "webhook", Body: []byte(`{}`)}
	for i := range n {
		backlog := 1
		if i < top+1 {
			backlog = 20 + i // t00000 … t00005: the six largest
		}
		items := make([]store.Item, backlog)
		for k := range items {
			items[k] = job
		}
		if _, err := st.Enqueue(ctx, fmt.Sprintf("t%05d", i), items); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Pause(ctx, "t09999", time.Time{}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c := NewStateCollector(st, nil, StateConfig{TopTenants: top, CacheFor: -1}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.costFactor = 0           // every scrape reads
	c.scrapeWait = time.Minute // every scrape sees its own read, however busy the machine
	reg.MustRegister(c)
	backlogs := func() map[string]float64 { return tenantBacklogs(t, reg, top) }
	got := backlogs()
	want := map[string]float64{"t00005": 25, "t00004": 24, "t00003": 23, "t00002": 22, "t00001": 21,
		OtherTenants: 20 + (n - top - 1)}
	if len(got) != top+1 {
		t.Fatalf("%d backlog series, want %d: %v", len(got), top+1, got)
	}
	for tn, v := range want {
		if got[tn] != v {
			t.Fatalf("backlog of %s: %v, want %v (all: %v)", tn, got[tn], v, got)
		}
	}
	paused := `
# HELP sluice_tenant_paused 1 while the tenant cannot send: admin-paused, upstream-paused or disabled by a 410.
# TYPE sluice_tenant_paused gauge
`
	for _, tn := range []string{OtherTenants, "t00001", "t00002", "t00003", "t00004", "t00005"} {
		v := 0
		if tn == OtherTenants {
			v = 1 // t09999
		}
		paused += fmt.Sprintf("sluice_tenant_paused{reason=\"admin\",tenant=%q} %d\n", tn, v)
		paused += fmt.Sprintf("sluice_tenant_paused{reason=\"disabled\",tenant=%q} 0\n", tn)
		paused += fmt.Sprintf("sluice_tenant_paused{reason=\"upstream\",tenant=%q} 0\n", tn)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(paused), "sluice_tenant_paused"); err != nil {
		t.Error(err)
	}
	// A tenant grows past the others: the next read labels it.
	grow := make([]store.Item, 100)
	for k := range grow {
		grow[k] = job
	}
	if _, err := st.Enqueue(ctx, "t05000", grow); err != nil {
		t.Fatal(err)
	}
	if got := backlogs(); got["t05000"] != 101 || len(got) != top+1 || got["t00001"] != 0 || got[OtherTenants] != want[OtherTenants]-1+21 {
		t.Fatalf("after t05000 grew: %v", got)
	}
}

// A read serves the scrapes within CacheFor.
func TestStateCollectorCachesTenants(t *testing.T) {
	t.Parallel()
	_, reg, more, _ := acmeCollector(t, time.Hour)
	more()
	if got := tenantBacklogs(t, reg, 1)["acme"]; got != 1 {
		t.Fatalf("backlog %v within CacheFor, want the cached 1", got)
	}
}

// A read of the tenant series that outlasts a scrape's wait (100 000
// tenants: seconds of walking) goes on in the background: the scrapes
// meanwhile answer the last complete read's series and start no second
// read; once it ends, the scrapes answer its series.
func TestStateCollectorAnswersTheLastReadWhileASlowOneRuns(t *testing.T) {
	t.Parallel()
	c, reg, more, src := acmeCollector(t, -1)
	more()
	src.hold.Store(true) // the next read waits for release
	c.scrapeWait = 10 * time.Millisecond
	for i := range 3 {
		if got := tenantBacklogs(t, reg, 1)["acme"]; got != 1 {
			t.Fatalf("scrape %d during the held read: backlog %v, want the last read's 1", i, got)
		}
	}
	if n := src.reads.Load(); n != 2 {
		t.Fatalf("%d reads after 3 scrapes during a held one, want 2 (no second read at once)", n)
	}
	src.hold.Store(false)
	close(src.release)
	c.scrapeWait = time.Minute
	if got := tenantBacklogs(t, reg, 1)["acme"]; got != 2 {
		t.Fatalf("backlog %v after the held read ended, want 2", got)
	}
}

// A read's series serve the scrapes for StateCostFactor times the read's
// duration when that is longer than CacheFor: a slow walk (many tenants)
// is not repeated at every scrape.
func TestStateCollectorSpacesSlowReads(t *testing.T) {
	t.Parallel()
	c, reg, more, src := acmeCollector(t, -1) // CacheFor < 0: every scrape reads
	more()
	if got := tenantBacklogs(t, reg, 1)["acme"]; got != 2 {
		t.Fatalf("backlog %v, want a new read's 2 (CacheFor < 0)", got)
	}
	c.cache.mu.Lock()
	c.costFactor, c.cache.took = StateCostFactor, time.Hour // the last read took an hour
	c.cache.mu.Unlock()
	more()
	reads := src.reads.Load()
	if got := tenantBacklogs(t, reg, 1)["acme"]; got != 2 {
		t.Fatalf("backlog %v after a read that took an hour, want its 2 (no new read)", got)
	}
	if n := src.reads.Load(); n != reads {
		t.Fatalf("%d reads, want %d: a scrape read again within %d times the last read's duration", n, reads, StateCostFactor)
	}
	c.cache.mu.Lock()
	c.cache.took = 0
	c.cache.mu.Unlock()
	if got := tenantBacklogs(t, reg, 1)["acme"]; got != 3 {
		t.Fatalf("backlog %v after a quick read, want a new read's 3", got)
	}
}

// acmeCollector enqueues a job of tenant acme into a new store and
// registers a collector of it, through a heldTenants that counts its reads
// (cache for cacheFor, scrapes waiting a minute for a read), whose first
// scrape must give acme a backlog of 1; more enqueues another.
func acmeCollector(t *testing.T, cacheFor time.Duration) (*StateCollector, *prometheus.Registry, func(), *heldTenants) {
	t.Helper()
	_, _, st := realStore(t, 1, 0)
	src := &heldTenants{StateSource: st, release: make(chan struct{})}
	job := []store.Item{{Type: "webhook", Body: []byte(`{}`)}}
	enqueue := func() {
		t.Helper()
		if _, err := st.Enqueue(context.Background(), "acme", job); err != nil {
			t.Fatal(err)
		}
	}
	enqueue()
	reg := prometheus.NewRegistry()
	c := NewStateCollector(src, nil, StateConfig{CacheFor: cacheFor}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.scrapeWait, c.costFactor = time.Minute, 0 // CacheFor alone decides
	reg.MustRegister(c)
	if got := tenantBacklogs(t, reg, 1)["acme"]; got != 1 {
		t.Fatalf("backlog %v, want 1", got)
	}
	return c, reg, enqueue, src
}

// heldTenants is a StateSource whose Observe, while hold is set, waits for
// release; it counts its reads.
type heldTenants struct {
	StateSource
	hold    atomic.Bool
	release chan struct{}
	reads   atomic.Int64
}

func (h *heldTenants) Observe(ctx context.Context, o store.ObserveOptions) (store.Observation, error) {
	h.reads.Add(1)
	if h.hold.Load() {
		select {
		case <-h.release:
		case <-ctx.Done():
			return store.Observation{}, ctx.Err()
		}
	}
	return h.StateSource.Observe(ctx, o)
}

// tenantBacklogs gathers reg's backlog series by tenant, failing when a
// tenant metric has more series than top + 1 tenants give.
func tenantBacklogs(t *testing.T, reg *prometheus.Registry, top int) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sluice_tenant_") {
			continue
		}
		if len(mf.GetMetric()) > 3*(top+1) {
			t.Errorf("%s: %d series for %d labeled tenants", mf.GetName(), len(mf.GetMetric()), top)
		}
		if mf.GetName() == "sluice_tenant_backlog_jobs" {
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func TestStateConfigDefaults(t *testing.T) {
	t.Parallel()
	if c := (StateConfig{}).WithDefaults(); c.TopTenants != TopTenantsDefault || c.CacheFor != StateCacheDefault {
		t.Errorf("defaults %+v", c)
	}
	if c := (StateConfig{TopTenants: MaxLabeledTenants + 50}).WithDefaults(); c.TopTenants != MaxLabeledTenants {
		t.Errorf("labeled tenants = %d, want the cap %d", c.TopTenants, MaxLabeledTenants)
	}
}

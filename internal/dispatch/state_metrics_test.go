package dispatch

import (
	"context"
	"io"
	"log/slog"
	"strings"
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
	c := NewStateCollector(st, rdb, []string{"acme", "globex"}, []string{queue}, slog.New(slog.NewTextHandler(io.Discard, nil)))
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

func TestStateCollectorCapsTenantLabels(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxLabeledTenants+50)
	for i := range many {
		many[i] = "t" + strings.Repeat("x", i%7)
	}
	c := NewStateCollector(nil, nil, many, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(c.tenants) != MaxLabeledTenants {
		t.Errorf("labeled tenants = %d, want the cap %d", len(c.tenants), MaxLabeledTenants)
	}
}

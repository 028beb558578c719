package dispatch

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRedisCollector: a Redis that answers gives sluice_redis_up 1 and its
// memory and maxmemory as INFO tells them; once it is gone, up is 0 and the
// memory series are left out.
func TestRedisCollector(t *testing.T) {
	t.Parallel()
	red := redistest.NewPrivate(t, "--maxmemory", "64mb")
	c := NewRedisCollector(red.Client(t), slog.New(slog.NewTextHandler(io.Discard, nil)))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	want := "# HELP sluice_redis_maxmemory_bytes A Redis master's maxmemory (0: no limit), by master address.\n" +
		"# TYPE sluice_redis_maxmemory_bytes gauge\n" +
		"sluice_redis_maxmemory_bytes{node=\"\"} 6.7108864e+07\n" +
		"# HELP sluice_redis_up 1 when every Redis master answered INFO memory within 2 s at this scrape, else 0.\n" +
		"# TYPE sluice_redis_up gauge\nsluice_redis_up 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_redis_up", "sluice_redis_maxmemory_bytes"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_redis_memory_used_bytes"); err != nil || n != 1 {
		t.Errorf("used memory series: %d (%v), want 1", n, err)
	}

	red.Kill(t)
	want = "# HELP sluice_redis_up 1 when every Redis master answered INFO memory within 2 s at this scrape, else 0.\n" +
		"# TYPE sluice_redis_up gauge\nsluice_redis_up 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_redis_up"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_redis_memory_used_bytes", "sluice_redis_maxmemory_bytes"); err != nil || n != 0 {
		t.Errorf("memory series of a Redis that is gone: %d (%v), want 0", n, err)
	}
}

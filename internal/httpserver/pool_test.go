package httpserver

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The pool metrics follow each client's pool: connections held are in_use,
// given back they are idle, and each one the pool had to open is a dial.
func TestRegisterRedisPoolMetrics(t *testing.T) {
	t.Parallel()
	redistest.RequireSingle(t, "Conn pins a connection of a single-node client")
	ctx := context.Background()
	opts := redistest.Options()
	opts.PoolSize = 8
	busy, quiet := redistest.NewClient(t, opts), redistest.NewClient(t, opts)
	reg := prometheus.NewRegistry()
	RegisterRedisPoolMetrics(reg, map[string]redis.UniversalClient{"busy": busy, "quiet": quiet})

	const held = 3
	var conns []*redis.Conn
	for range held {
		c := busy.(*redis.Client).Conn() // a single node: Conn pins one pool connection
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	want := func(state, client string, v float64) {
		t.Helper()
		if got := series(t, reg, "sluice_redis_pool_connections", map[string]string{"client": client, "state": state}); got != v {
			t.Errorf("%s %s connections = %v, want %v", client, state, got, v)
		}
	}
	want("in_use", "busy", held)
	want("idle", "busy", 0)
	want("in_use", "quiet", 0)
	for _, c := range conns {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want("in_use", "busy", 0)
	want("idle", "busy", held)
	if got := dials(t, reg, "busy"); got != held {
		t.Errorf("busy dials = %v, want %d", got, held)
	}
}

func dials(t *testing.T, reg *prometheus.Registry, client string) float64 {
	t.Helper()
	return series(t, reg, "sluice_redis_pool_dials_total", map[string]string{"client": client})
}

// series is the value of the one series of name whose labels are labels.
func series(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

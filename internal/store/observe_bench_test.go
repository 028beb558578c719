package store

import (
	"flag"
	"fmt"
	"testing"
)

var observeTenants = flag.Int("observe.tenants", 10_000, "BenchmarkObserve: tenants with a job each")

// BenchmarkObserve measures what one read of the deployment's totals and
// top 20 backlogs costs Redis at -observe.tenants tenants with a job each
// (16 shards): by the shards' aggregates (Observe, what the state metrics
// and GET /v1/summary read) beside the walk of every tenant they replaced
// (Tenants). Reported per read, from INFO commandstats and INFO cpu deltas
// (server-wide: run it alone):
//
//	go test -run '^$' -bench Observe -benchtime 20x ./internal/store/ -observe.tenants 100000
func BenchmarkObserve(b *testing.B) {
	e := newEnvShards(b, 16)
	names := make([]string, *observeTenants)
	for i := range names {
		names[i] = fmt.Sprintf("t%07d", i)
	}
	for i := 0; i < len(names); i += 5000 {
		e.benchEnqueue(names[i:min(len(names), i+5000)])
	}
	if err := e.store.LoadFunctions(e.ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := e.store.Observe(e.ctx, ObserveOptions{}); err != nil { // built, as a running deployment's are
		b.Fatal(err)
	}
	for _, way := range []string{"aggregates", "walk"} {
		b.Run("read="+way, func(b *testing.B) {
			before := e.commandStats()
			for range b.N {
				var err error
				if way == "aggregates" {
					_, err = e.store.Observe(e.ctx, ObserveOptions{Top: 20, Attention: 30})
				} else {
					_, err = e.store.Tenants(e.ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			st := e.commandStats().minus(before)
			b.ReportMetric(float64(st.calls)/float64(b.N), "cmds/read")
			b.ReportMetric(float64(st.cpu)/float64(b.N), "redis-cpu-µs/read")
		})
	}
}

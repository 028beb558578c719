package store

import (
	"fmt"
	"testing"
)

// BenchmarkTenants measures one Store.Tenants walk over 1 000 tenants with
// jobs (4 shards): the cost of a listing page and of a metrics read.
func BenchmarkTenants(b *testing.B) {
	e := newEnv(b)
	for i := range 1000 {
		e.enqueueOne(fmt.Sprintf("t%04d", i), item(`{}`))
	}
	b.ResetTimer()
	for range b.N {
		all, err := e.store.Tenants(e.ctx)
		if err != nil || len(all) != 1000 {
			b.Fatalf("%d tenants, %v", len(all), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "µs/tenant")
}

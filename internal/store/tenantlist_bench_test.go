package store

import (
	"cmp"
	"fmt"
	"slices"
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

// BenchmarkTenantPages measures the store's work for the first page of
// GET /v1/tenants over 10 000 tenants with jobs (16 shards, the default),
// per sort and limit, as the handler does it: name — TenantNames of limit,
// then TenantViews; backlog and oldest — TenantKeys, sort, then TenantViews
// of the page; walk — the summary walk (Tenants) every page read before.
//
//	go test ./internal/store -run x -bench BenchmarkTenantPages -benchtime 20x
func BenchmarkTenantPages(b *testing.B) {
	e := newEnvShards(b, ShardsDefault)
	const n = 10_000
	for i := range n {
		e.enqueueOne(fmt.Sprintf("t%05d", i), item(`{}`))
	}
	page := func(names []string) {
		views, err := e.store.TenantViews(e.ctx, names)
		if err != nil || len(views) != len(names) {
			b.Fatalf("%d views, %v", len(views), err)
		}
	}
	for _, limit := range []int{50, 500} {
		b.Run(fmt.Sprintf("name/limit=%d", limit), func(b *testing.B) {
			for range b.N {
				names, more, err := e.store.TenantNames(e.ctx, "", "", limit)
				if err != nil || !more || len(names) != limit {
					b.Fatalf("%d names, %v", len(names), err)
				}
				page(names)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/page")
		})
		for _, key := range []string{"backlog", "oldest"} {
			b.Run(fmt.Sprintf("%s/limit=%d", key, limit), func(b *testing.B) {
				for range b.N {
					keys, err := e.store.TenantKeys(e.ctx, key)
					if err != nil || len(keys) != n {
						b.Fatalf("%d keys, %v", len(keys), err)
					}
					slices.SortFunc(keys, func(a, b TenantKey) int {
						return cmp.Or(cmp.Compare(b.Key, a.Key), cmp.Compare(a.Tenant, b.Tenant))
					})
					names := make([]string, limit)
					for i := range names {
						names[i] = keys[i].Tenant
					}
					page(names)
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/page")
			})
		}
	}
	b.Run("walk", func(b *testing.B) {
		for range b.N {
			if all, err := e.store.Tenants(e.ctx); err != nil || len(all) != n {
				b.Fatalf("%d tenants, %v", len(all), err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/page")
	})
}

package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
)

// TestAPICostsByRouteClass: the API limiter charges each route class its
// configured cost, and a batch its items × batch_item, at most the limit's
// capacity; a batch refused before its items were counted costs one item.
func TestAPICostsByRouteClass(t *testing.T) {
	t.Parallel()
	limit := bucket.Limit{Algorithm: bucket.SlidingWindow, Limit: 100, Window: time.Hour}
	f := newStoreFixture(t, func(o *Options, rdb redis.UniversalClient, prefix string) {
		o.APILimiter, o.APILimit = newLimiter(t, rdb, prefix, ReservedLimit, limit), limit
		o.APICosts = config.APICosts{Read: 2, Write: 5, BatchItem: 3}
	})
	remaining := func(r response) int64 {
		t.Helper()
		st := params(t, r.header, "RateLimit")
		if _, ok := st[ReservedLimit]; !ok {
			t.Fatalf("%d: no %q in RateLimit %q", r.status, ReservedLimit, r.header.Get("RateLimit"))
		}
		return st[ReservedLimit]["r"]
	}
	steps := []struct {
		name   string
		send   func() response
		status int
		want   int64 // remaining after the step
	}{
		{"read", func() response { return f.get(t, "/v1/tenants/acme-costs", producerToken) }, http.StatusOK, 98},
		{"write", func() response { return f.post(t, "/v1/tenants/acme-costs/jobs", producerToken, hook(0)) }, http.StatusAccepted, 93},
		{"batch of 4", func() response {
			return f.post(t, "/v1/tenants/acme-costs/jobs:batch", producerToken, batch(hook(1), hook(2), hook(3), hook(4)))
		}, http.StatusAccepted, 81},
		{"malformed batch", func() response { return f.post(t, "/v1/tenants/acme-costs/jobs:batch", producerToken, `{"jobs":`) }, http.StatusBadRequest, 78},
		{"batch over the capacity", func() response {
			items := make([]string, 40) // 120 tokens, above the capacity of 100: charged 78 and refused
			for i := range items {
				items[i] = hook(i)
			}
			return f.post(t, "/v1/tenants/acme-costs/jobs:batch", producerToken, batch(items...))
		}, http.StatusTooManyRequests, 78},
	}
	for _, s := range steps {
		r := s.send()
		if got := remaining(r); r.status != s.status || got != s.want {
			t.Fatalf("%s: %d api r=%d, want %d r=%d", s.name, r.status, got, s.status, s.want)
		}
	}
}

package api

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestCheckBucketsPerAPIKey: by default (scope api_key) two API keys
// checking the same key string have separate buckets, whose Redis keys hold
// the API key's name and never its secret; with scope shared they share one.
func TestCheckBucketsPerAPIKey(t *testing.T) {
	t.Parallel()
	drain := func(f *fixture) {
		t.Helper()
		if r := f.check(t, producerToken, `{"key":"user-42","cost":3}`); r.status != http.StatusOK || r.body["remaining"] != 0.0 {
			t.Fatalf("producer takes the 3 tokens: %d %v", r.status, r.body)
		}
		if r := f.check(t, producerToken, `{"key":"user-42","cost":1}`); r.status != http.StatusTooManyRequests {
			t.Fatalf("producer's 4th token: %d %v, want 429", r.status, r.body)
		}
	}

	var rdb redis.UniversalClient
	var prefix string
	f := newFixture(t, func(_ *Options, c redis.UniversalClient, p string) { rdb, prefix = c, p })
	drain(f)
	if r := f.check(t, adminToken, `{"key":"user-42","cost":1}`); r.status != http.StatusOK || r.body["remaining"] != 2.0 {
		t.Errorf("ops after producer emptied its bucket: %d %v, want 200 with its own 2 left", r.status, r.body)
	}
	keys, err := redistest.Keys(context.Background(), rdb, prefix+":rl:{search:*")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(keys, " ")
	if len(keys) != 2 || !strings.Contains(joined, "{search:producer:user-42}") || !strings.Contains(joined, "{search:ops:user-42}") {
		t.Errorf("search buckets = %v, want one per API key name", keys)
	}
	if strings.Contains(joined, producerToken) || strings.Contains(joined, adminToken) {
		t.Errorf("search buckets %v hold an API key's secret", keys)
	}

	shared := newFixture(t, func(o *Options, _ redis.UniversalClient, _ string) {
		l := o.Limits["search"]
		l.Shared = true
		o.Limits["search"] = l
	})
	drain(shared)
	if r := shared.check(t, adminToken, `{"key":"user-42","cost":1}`); r.status != http.StatusTooManyRequests || errorCode(r) != CodeRateLimited {
		t.Errorf("ops on a shared limit after producer emptied it: %d %v, want 429 rate_limited", r.status, r.body)
	}
}

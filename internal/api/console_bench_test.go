package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/store"
)

// BenchmarkConsoleCalls measures the server time of the console's calls
// over 10 000 tenants with a job each (16 shards): the tenants view's first
// page (GET /v1/tenants?limit=50, by name and by backlog), the overview's
// summary read (GET /v1/summary, its cache off) and a tenant page's poll
// (GET /v1/tenants/{t}/live). The time is the handler's, measured around
// ServeHTTP (no network).
//
//	go test ./internal/api -run x -bench BenchmarkConsoleCalls -benchtime 10x
func BenchmarkConsoleCalls(b *testing.B) {
	const n = 10_000
	rdb, prefix := redistest.New(b)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	fillTenants(b, st, n)
	newServer := func() *Server { // a new one has no summary cached
		srv, err := New(Options{Keys: config.AuthConfig{Keys: []config.KeyConfig{
			{Name: "ops", SHA256: config.HashKey(adminToken), Tenants: []string{"*"}, Admin: true}}}.ByHash(),
			Redis: rdb, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Store: st, RequestTimeout: time.Minute, LiveStep: time.Nanosecond})
		if err != nil {
			b.Fatal(err)
		}
		return srv
	}
	srv := newServer()
	for _, path := range []string{"/v1/tenants?limit=50", "/v1/tenants?limit=50&sort=backlog", "/v1/summary", "/v1/tenants/t05000/live"} {
		b.Run(path, func(b *testing.B) {
			var spent time.Duration
			for range b.N {
				if path == "/v1/summary" {
					srv = newServer()
				}
				start := time.Now()
				serveOK(b, srv.Handler(), path)
				spent += time.Since(start)
			}
			b.ReportMetric(float64(spent.Microseconds())/1000/float64(b.N), "ms/call")
		})
	}
}

// fillTenants makes n tenants t00000… with one job each.
func fillTenants(b *testing.B, st *store.Store, n int) {
	b.Helper()
	ctx := context.Background()
	for i := range n {
		if _, err := st.Enqueue(ctx, fmt.Sprintf("t%05d", i), []store.Item{{Type: "webhook", Body: []byte(`{}`)}}); err != nil {
			b.Fatal(err)
		}
	}
}

func serveOK(b *testing.B, h http.Handler, path string) {
	b.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
}

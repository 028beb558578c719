package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
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
// summary (GET /v1/summary) on a new server that has read nothing, as right
// after a throttler's start — for a key with the glob "*" (the shards'
// aggregates), cold for a key with other globs (the walk of every tenant)
// and on its page's first load (a new server whose warmer has read the
// summary's base: Options.SummaryWarm) —, and a tenant page's poll
// (GET /v1/tenants/{t}/live). The time is the handler's, measured around
// ServeHTTP (no network).
//
//	go test ./internal/api -run x -bench BenchmarkConsoleCalls -benchtime 10x
//
// SLUICE_CONSOLE_BENCH_TENANTS sets another number of tenants (e.g.
// 100000, with -bench 'ConsoleCalls/summary' -benchtime 3x).
func BenchmarkConsoleCalls(b *testing.B) {
	n := 10_000
	if v := os.Getenv("SLUICE_CONSOLE_BENCH_TENANTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("SLUICE_CONSOLE_BENCH_TENANTS=%q: want a number of tenants", v)
		}
	}
	rdb, prefix := redistest.New(b)
	st, err := store.NewStore(rdb, store.Config{Prefix: prefix, Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	fillTenants(b, st, n)
	newServer := func() *Server { // a new one has no summary cached
		srv, err := New(Options{Keys: config.AuthConfig{Keys: []config.KeyConfig{
			{Name: "ops", SHA256: config.HashKey(adminToken), Tenants: []string{"*"}, Admin: true},
			{Name: "producer", SHA256: config.HashKey(producerToken), Tenants: []string{"t*"}}}}.ByHash(),
			Redis: rdb, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Store: st, RequestTimeout: time.Minute, LiveStep: time.Nanosecond, SummaryWarm: SummaryWarmDefault})
		if err != nil {
			b.Fatal(err)
		}
		return srv
	}
	srv := newServer()
	for _, c := range []struct{ name, path string }{
		{"tenants by name", "/v1/tenants?limit=50"}, {"tenants by backlog", "/v1/tenants?limit=50&sort=backlog"},
		{"summary", "/v1/summary"}, {"summary walk cold", "/v1/summary"}, {"summary walk first load", "/v1/summary"},
		{"live", "/v1/tenants/t05000/live"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var spent time.Duration
			for range b.N {
				token := adminToken
				switch c.name {
				case "summary", "summary walk cold":
					srv = newServer()
				case "summary walk first load":
					srv = newServer()
					if _, err := srv.bases.get(context.Background()); err != nil { // the warmer's read
						b.Fatal(err)
					}
				}
				if strings.HasPrefix(c.name, "summary walk") {
					token = producerToken // globs other than "*": the walk
				}
				start := time.Now()
				serveOK(b, srv.Handler(), c.path, token)
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

func serveOK(b *testing.B, h http.Handler, path, token string) {
	b.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
}

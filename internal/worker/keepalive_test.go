package worker_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/webhook"
	"github.com/sluicehq/sluice/internal/worker"
)

// TestExecutorKeepsAConnectionPerConcurrentRequest: the executor's client
// keeps as many idle connections per host as it was given (cmd/worker: its
// concurrency), so a receiver getting that many requests at once, round
// after round, is dialled once per request slot, not again every round
// beyond a smaller pool (16, the default: up to 24 of 40 re-dialled a round).
func TestExecutorKeepsAConnectionPerConcurrentRequest(t *testing.T) {
	t.Parallel()
	const concurrency, rounds = 40, 3
	var dials atomic.Int64
	// A barrier: no request of a round is answered before all of its
	// requests have arrived, so each round really holds concurrency
	// connections at once (without it, a request ending before another
	// starts lends it its connection and fewer are dialled).
	var (
		mu      sync.Mutex
		arrived int
		release chan struct{}
	)
	newRound := func() {
		mu.Lock()
		arrived, release = 0, make(chan struct{})
		mu.Unlock()
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		ch := release
		if arrived == concurrency {
			close(ch)
		}
		mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
		case <-time.After(30 * time.Second): // not all came: the count below tells
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for _, c := range []struct {
		idle     int
		min, max int64
	}{
		{concurrency, concurrency, concurrency},
		// The default pool: concurrency - default more dials a round.
		{0, concurrency + (rounds-1)*(concurrency-webhook.MaxIdleConnsPerHostDefault), concurrency + (rounds-1)*(concurrency-webhook.MaxIdleConnsPerHostDefault)},
	} {
		dials.Store(0)
		exec, _, err := worker.NewWebhookExecutor(loopback, policy.Overrides{}, nil, nil, nil, c.idle)
		if err != nil {
			t.Fatal(err)
		}
		for range rounds {
			newRound()
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range concurrency {
				wg.Go(func() {
					<-start
					req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, nil)
					if err != nil {
						t.Error(err)
						return
					}
					resp, err := exec.Client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_ = resp.Body.Close()
				})
			}
			close(start)
			wg.Wait()
		}
		exec.Close()
		if n := dials.Load(); n < c.min || n > c.max {
			t.Errorf("idle per host %d: %d connections for %d rounds of %d requests at once, want %d … %d",
				c.idle, n, rounds, concurrency, c.min, c.max)
		}
	}
}

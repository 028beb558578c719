package worker

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/upstream"
	"github.com/sluicehq/sluice/internal/wire"
)

// leaseSource is an UpstreamRates with fixed concurrencies that records the
// calls a worker makes.
type leaseSource struct {
	mu          sync.Mutex
	concurrency map[string]int64
	calls       []string
}

func (s *leaseSource) record(call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
}

func (s *leaseSource) UpstreamSettings(_ context.Context, names []string) ([]quota.UpstreamSettings, error) {
	s.record("settings")
	out := make([]quota.UpstreamSettings, len(names))
	for i, n := range names {
		out[i] = quota.UpstreamSettings{Found: true, Params: upstream.Params{IntervalUS: 1000, Burst: 1, Concurrency: s.concurrency[n]}}
	}
	return out, nil
}

func (s *leaseSource) PauseUpstream(context.Context, string, time.Time, string) error { return nil }

func (s *leaseSource) UpstreamOutcome(context.Context, string, bool, time.Time, quota.AdaptConfig) (int64, time.Duration, error) {
	return 0, 0, nil
}

func (s *leaseSource) UpstreamAnswer(context.Context, string, *wire.Quota, time.Time, int64, int64) (bool, error) {
	return false, nil
}

func (s *leaseSource) AcquireUpstreamRun(_ context.Context, name, holder string, _ time.Duration) (bool, error) {
	s.record("acquire " + name + " " + holder)
	return true, nil
}

func (s *leaseSource) ReleaseUpstreamRun(_ context.Context, name, holder string) error {
	s.record("release " + name + " " + holder)
	return nil
}

// A job naming no upstream costs no call; one naming upstreams without a
// concurrency costs one settings read per upstream and second (cached),
// no lease; one naming an upstream with a concurrency takes and gives back
// a lease on that one only, as holder "<id>:<gen>".
func TestAcquireRunsCallsOnlyForConcurrency(t *testing.T) {
	t.Parallel()
	src := &leaseSource{concurrency: map[string]int64{"capped": 2}}
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{UpstreamRates: src, Logger: slog.New(slog.DiscardHandler), DefaultTimeout: time.Second},
		upstreams: NewUpstreamCache(src), metrics: m}
	w.current.Store(&wire.Settings{Grace: time.Second})
	ctx := context.Background()

	for _, job := range []store.ClaimedJob{{ID: "plain", Gen: 1}, {ID: "free", Gen: 1, Upstreams: []string{"free"}}, {ID: "free2", Gen: 1, Upstreams: []string{"free"}}} {
		held, ok := w.acquireRuns(ctx, job)
		if !ok || held != nil {
			t.Fatalf("job %s: held %v, ok %v; want nothing held, ok", job.ID, held, ok)
		}
		w.releaseRuns(ctx, job, held)
	}
	if want := []string{"settings"}; !slices.Equal(src.calls, want) {
		t.Fatalf("calls %q, want %q (one cached settings read, no lease)", src.calls, want)
	}
	src.calls = nil
	job := store.ClaimedJob{ID: "j", Gen: 3, Upstreams: []string{"capped", "free"}}
	held, ok := w.acquireRuns(ctx, job)
	if !ok || !slices.Equal(held, []string{"capped"}) {
		t.Fatalf("held %v, ok %v; want [capped]", held, ok)
	}
	w.releaseRuns(ctx, job, held)
	if want := []string{"settings", "acquire capped j:3", "release capped j:3"}; !slices.Equal(src.calls, want) {
		t.Fatalf("calls %q, want %q", src.calls, want)
	}
	if n := testutil.ToFloat64(m.upstreamLeases.WithLabelValues(leaseHeld)); n != 1 {
		t.Fatalf("leases counted held %v, want 1 (the jobs without a concurrency are not counted)", n)
	}
}

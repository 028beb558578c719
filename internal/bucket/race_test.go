package bucket

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestRaceOneKey: 200 goroutines call at once on one key at one fake
// instant; every algorithm admits exactly its capacity (50), and the
// admitted calls see each Remaining 49..0 exactly once (each decision saw
// the previous one's write: the scripts are atomic).
func TestRaceOneKey(t *testing.T) {
	t.Parallel()
	const callers, capacity = 200, 50
	for _, a := range Algorithms {
		t.Run(string(a), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, withCapacity(a, capacity))
			key, now := newKey(), at(30*time.Second) // mid-window
			start := make(chan struct{})
			results := make(chan Decision, callers)
			errs := make(chan error, callers)
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					<-start
					d, err := f.lim.AllowAt(context.Background(), key, 1, now)
					if err != nil {
						errs <- err
						return
					}
					results <- d
				})
			}
			close(start)
			wg.Wait()
			close(results)
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var remaining []int64
			for d := range results {
				if d.Allowed {
					remaining = append(remaining, d.Remaining)
				} else if d.Remaining != 0 || d.RetryAfter <= 0 {
					t.Errorf("refusal %+v, want 0 remaining and a RetryAfter", d)
				}
			}
			if len(remaining) != capacity {
				t.Fatalf("admitted %d of %d racing calls, want exactly %d", len(remaining), callers, capacity)
			}
			slices.Sort(remaining)
			for i, r := range remaining {
				if r != int64(i) {
					t.Fatalf("admitted calls saw Remaining %v, want each of 0..%d once", remaining, capacity-1)
				}
			}
			f.checkTTL(key, true)
		})
	}
}

package worker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/worker"
)

func TestSplitConcurrency(t *testing.T) {
	for _, tc := range []struct {
		total, n int
		want     []int
	}{
		{100, 4, []int{25, 25, 25, 25}},
		{5, 4, []int{2, 1, 1, 1}},
		{3, 3, []int{1, 1, 1}},
		{7, 1, []int{7}},
	} {
		if got := worker.Split(tc.total, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Split(%d, %d) = %v, want %v", tc.total, tc.n, got, tc.want)
		}
	}
}

// TestShutdownTimeoutRule: the configured timeout unless it is below
// 2·D + the largest attempt timeout + 2 s.
func TestShutdownTimeoutRule(t *testing.T) {
	if d, raised := worker.ShutdownTimeout(time.Minute, 100*time.Millisecond, 15*time.Second); d != time.Minute || raised {
		t.Errorf("1m with D 100ms, timeout 15s: %s, raised %v", d, raised)
	}
	if d, raised := worker.ShutdownTimeout(time.Second, 100*time.Millisecond, 15*time.Second); d != 17200*time.Millisecond || !raised {
		t.Errorf("1s with D 100ms, timeout 15s: %s, raised %v; want 17.2s raised", d, raised)
	}
}

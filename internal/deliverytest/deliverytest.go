// Package deliverytest checks what a test's receiver saw against Sluice's
// delivery guarantees (docs/design.md §5): every job arrives exactly once, and no
// window of a tenant's arrivals holds more than b + r·Δ + 1 of them.
package deliverytest

import (
	"math"
	"slices"
	"testing"
	"time"
)

// ExactlyOnce fails t unless every id of want arrived exactly once in got
// (arrived ids, in any order) and nothing else arrived.
func ExactlyOnce(t testing.TB, got, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("job %s arrived %d times, want once", id, seen[id])
		}
		delete(seen, id)
	}
	for id, n := range seen {
		t.Errorf("unexpected job %s arrived %d times", id, n)
	}
}

// WorstWindow returns the window of arrivals at[from…to] (at in order,
// each arrival costing 1) whose count exceeds the rate bound b + r·Δ + 1
// the most, Δ = at[to] − at[from], and that excess; −Inf and 0, 0 for
// fewer than two arrivals. The bound holds for every window iff excess ≤ 0.
func WorstWindow(at []time.Time, rate float64, burst int) (excess float64, from, to int) {
	excess = math.Inf(-1)
	for i := range at {
		for j := i + 1; j < len(at); j++ {
			span := at[j].Sub(at[i]).Seconds()
			if e := float64(j-i+1) - (float64(burst) + rate*span + 1); e > excess {
				excess, from, to = e, i, j
			}
		}
	}
	return excess, from, to
}

// P99 is the 99th percentile of |d| over ds (0 when ds is empty): a
// measured send error ε_r.
func P99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	abs := make([]time.Duration, len(ds))
	for i, d := range ds {
		abs[i] = max(d, -d)
	}
	slices.Sort(abs)
	return abs[(len(abs)-1)*99/100]
}

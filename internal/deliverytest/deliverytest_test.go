package deliverytest

import (
	"math"
	"testing"
	"time"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errors int
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }

func TestExactlyOnceReportsMissingDuplicateAndUnexpected(t *testing.T) {
	for _, tc := range []struct {
		got, want []string
		errors    int
	}{
		{[]string{"b", "a"}, []string{"a", "b"}, 0},
		{[]string{"a"}, []string{"a", "b"}, 1},           // b missing
		{[]string{"a", "a", "b"}, []string{"a", "b"}, 1}, // a twice
		{[]string{"a", "b", "c"}, []string{"a", "b"}, 1}, // c unexpected
	} {
		r := &recorder{TB: t}
		ExactlyOnce(r, tc.got, tc.want)
		if r.errors != tc.errors {
			t.Errorf("ExactlyOnce(%v, %v): %d errors, want %d", tc.got, tc.want, r.errors, tc.errors)
		}
	}
}

func TestWorstWindowFindsTheClumpAboveTheBound(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms ...int) []time.Time {
		out := make([]time.Time, len(ms))
		for i, m := range ms {
			out[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return out
	}
	// 10/s, burst 1: one every 100 ms is within the bound (excess 0 for
	// every pair of neighbours: 2 − (1 + 1 + 1) = −1… and the whole run).
	if e, _, _ := WorstWindow(at(0, 100, 200, 300), 10, 1); e > 0 {
		t.Errorf("evenly spaced at the rate: excess %v, want ≤ 0", e)
	}
	// Three within 10 ms after a gap: 3 − (1 + 0.1 + 1) = 0.9 over.
	e, from, to := WorstWindow(at(0, 100, 500, 505, 510), 10, 1)
	if math.Abs(e-0.9) > 1e-9 || from != 2 || to != 4 {
		t.Errorf("clump at 500–510 ms: excess %v over [%d, %d], want 0.9 over [2, 4]", e, from, to)
	}
	if e, _, _ := WorstWindow(at(0), 10, 1); !math.IsInf(e, -1) {
		t.Errorf("one arrival: excess %v, want −Inf", e)
	}
}

func TestP99IsOfAbsoluteValues(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	ds[99] = -200 * time.Millisecond // the largest in absolute value
	if got := P99(ds); got != 99*time.Millisecond {
		t.Errorf("P99 = %s, want 99ms", got)
	}
	if got := P99(nil); got != 0 {
		t.Errorf("P99(nil) = %s, want 0", got)
	}
}

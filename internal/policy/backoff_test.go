package policy

import (
	"math"
	"testing"
	"time"
)

func TestBackoffCurve(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name     string
		retry    Retry
		attempts []int           // attempt numbers, from 1
		want     []time.Duration // Backoff for each
	}{
		{
			name:     "Cloud Tasks' documented example",
			retry:    Retry{MinBackoff: 10 * s, MaxBackoff: 300 * s, MaxDoublings: 3},
			attempts: []int{1, 2, 3, 4, 5, 6, 7, 8, 100},
			want:     []time.Duration{10 * s, 20 * s, 40 * s, 80 * s, 160 * s, 240 * s, 300 * s, 300 * s, 300 * s},
		},
		{
			name:     "builtin: 1s, 5 doublings, 1h cap",
			retry:    Builtin().Retry,
			attempts: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 117, 118, 119},
			want:     []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 32 * s, 64 * s, 96 * s, 128 * s, 3584 * s, 3600 * s, 3600 * s},
		},
		{
			name:     "no doublings: linear from min",
			retry:    Retry{MinBackoff: 5 * s, MaxBackoff: 12 * s, MaxDoublings: 0},
			attempts: []int{1, 2, 3},
			want:     []time.Duration{5 * s, 10 * s, 12 * s},
		},
		{
			name:     "cap reached while doubling",
			retry:    Retry{MinBackoff: s, MaxBackoff: 5 * s, MaxDoublings: 10},
			attempts: []int{1, 2, 3, 4, 5, 50},
			want:     []time.Duration{s, 2 * s, 4 * s, 5 * s, 5 * s, 5 * s},
		},
		{
			name:     "min equals max",
			retry:    Retry{MinBackoff: 7 * s, MaxBackoff: 7 * s, MaxDoublings: 3},
			attempts: []int{1, 2, 9},
			want:     []time.Duration{7 * s, 7 * s, 7 * s},
		},
		{
			name:     "attempt below 1 counts as 1",
			retry:    Retry{MinBackoff: 3 * s, MaxBackoff: time.Hour, MaxDoublings: 2},
			attempts: []int{0, -5},
			want:     []time.Duration{3 * s, 3 * s},
		},
		{
			name:     "no overflow at extremes",
			retry:    Retry{MinBackoff: time.Nanosecond, MaxBackoff: math.MaxInt64, MaxDoublings: math.MaxInt},
			attempts: []int{64, math.MaxInt},
			want:     []time.Duration{math.MaxInt64, math.MaxInt64},
		},
		{
			name:     "no overflow in the linear part",
			retry:    Retry{MinBackoff: time.Hour, MaxBackoff: math.MaxInt64, MaxDoublings: 1},
			attempts: []int{math.MaxInt},
			want:     []time.Duration{math.MaxInt64},
		},
	} {
		for i, a := range tc.attempts {
			if got := tc.retry.Backoff(a); got != tc.want[i] {
				t.Errorf("%s: Backoff(%d) = %v, want %v", tc.name, a, got, tc.want[i])
			}
		}
	}
}

func TestBackoffNeverDecreases(t *testing.T) {
	for _, r := range []Retry{
		Builtin().Retry,
		{MinBackoff: 10 * time.Second, MaxBackoff: 300 * time.Second, MaxDoublings: 3},
		{MinBackoff: time.Millisecond, MaxBackoff: 24 * time.Hour, MaxDoublings: 0},
		{MinBackoff: 3 * time.Millisecond, MaxBackoff: time.Hour, MaxDoublings: 62},
	} {
		prev := time.Duration(0)
		for a := 1; a <= 10_000; a++ {
			got := r.Backoff(a)
			if got < prev || got < r.MinBackoff || got > r.MaxBackoff {
				t.Fatalf("%+v: Backoff(%d) = %v after %v", r, a, got, prev)
			}
			prev = got
		}
	}
}

func TestExhausted(t *testing.T) {
	r := Retry{MaxAttempts: 3, MaxRetryDuration: time.Hour}
	for _, tc := range []struct {
		attempts int
		elapsed  time.Duration
		want     bool
	}{
		{1, 0, false},
		{2, 59 * time.Minute, false},
		{3, 0, true},         // attempts reached
		{1, time.Hour, true}, // duration reached
		{4, 2 * time.Hour, true},
	} {
		if got := r.Exhausted(tc.attempts, tc.elapsed); got != tc.want {
			t.Errorf("Exhausted(%d, %v) = %v, want %v", tc.attempts, tc.elapsed, got, tc.want)
		}
	}
	unlimited := Retry{MaxAttempts: 2}
	if unlimited.Exhausted(1, 1000*time.Hour) {
		t.Error("MaxRetryDuration 0 bounded the retry duration")
	}
	if !unlimited.Exhausted(2, 0) {
		t.Error("MaxAttempts 2 allowed a third attempt")
	}
}

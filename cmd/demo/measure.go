package main

import (
	"slices"
	"time"
)

// limit is a tenant's delivery limit as the throttler reports it: a token
// bucket of Rate tokens per second holding at most Burst.
type limit struct {
	Rate  float64 // tokens per second; > 0
	Burst int64   // ≥ 1
}

// measuredRate is the long-run delivery rate of arrivals (offsets from any
// common origin, sorted), in deliveries per second: (n − b) / (a[n−1] −
// a[b−1]), b = min(Burst, n−1). It discounts the burst that a full bucket
// lets through at once: with a bucket of b tokens the k-th delivery (k > b)
// is due (k − b)/r after the b-th, so the result is r whether the bucket
// started full or empty. It is 0 when fewer than two arrivals are known or
// they all share one instant.
func measuredRate(arrivals []time.Duration, burst int64) float64 {
	n := int64(len(arrivals))
	if n < 2 {
		return 0
	}
	b := min(max(burst, 1), n-1)
	span := arrivals[n-1] - arrivals[b-1]
	if span <= 0 {
		return 0
	}
	return float64(n-b) / span.Seconds()
}

// windowExcess is the largest amount by which the deliveries in any closed
// time window [a[i], a[j]] exceed what the bucket allows in that window,
// Burst + Rate·(a[j] − a[i] + slack): ≤ 0 means the arrivals never ran
// ahead of the limit, and 1 is one delivery early (the whole-token rounding
// of a slot). slack absorbs the jitter between a job's slot and its arrival.
// arrivals must be sorted.
func windowExcess(arrivals []time.Duration, l limit, slack time.Duration) float64 {
	worst := float64(-l.Burst)
	for i := range arrivals {
		for j := i; j < len(arrivals); j++ {
			allowed := float64(l.Burst) + l.Rate*(arrivals[j]-arrivals[i]+slack).Seconds()
			worst = max(worst, float64(j-i+1)-allowed)
		}
	}
	return worst
}

// inLast counts the arrivals in (now − d, now]; arrivals must be sorted.
func inLast(arrivals []time.Duration, now, d time.Duration) int {
	lo, _ := slices.BinarySearch(arrivals, now-d+1)
	hi, _ := slices.BinarySearch(arrivals, now+1)
	return hi - lo
}

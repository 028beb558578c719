// Package stats holds the figures the benchmark commands share.
package stats

import (
	"slices"
	"sort"
)

// Median is the median of xs (the mean of the middle two of an even
// count); xs is left as it was.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

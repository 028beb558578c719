package stats

import (
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	odd := []float64{91.3, 86.9, 101.9, 95.5, 90.8}
	if got := Median(odd); got != 91.3 {
		t.Errorf("median of %v = %v, want 91.3", odd, got)
	}
	if !slices.Equal(odd, []float64{91.3, 86.9, 101.9, 95.5, 90.8}) {
		t.Errorf("Median reordered its input: %v", odd)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4, 1, 3, 2 = %v, want the middle two's mean 2.5", got)
	}
}

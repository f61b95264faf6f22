package bench

import (
	"math"
	"slices"
)

// Median is the median of xs, ignoring NaN; NaN when none is left.
func Median(xs []float64) float64 {
	v := finite(xs)
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// Range is the smallest and largest of xs, ignoring NaN; NaN, NaN when none is left.
func Range(xs []float64) (lo, hi float64) {
	v := finite(xs)
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(v), slices.Max(v)
}

// PairedRatio is the median over rounds of a[i]/b[i]: the ratio taken within each round, so
// that load which slows a whole round cancels. Rounds where either side is missing (NaN) or
// b is zero are skipped.
func PairedRatio(a, b []float64) float64 {
	r := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if math.IsNaN(a[i]) || math.IsNaN(b[i]) || b[i] == 0 {
			continue
		}
		r = append(r, a[i]/b[i])
	}
	return Median(r)
}

// PairedDiff is the median over rounds of a[i]-b[i], skipping rounds where either is NaN.
func PairedDiff(a, b []float64) float64 {
	r := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if math.IsNaN(a[i]) || math.IsNaN(b[i]) {
			continue
		}
		r = append(r, a[i]-b[i])
	}
	return Median(r)
}

func finite(xs []float64) []float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	return v
}

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

// Spread is a median with the smallest and largest of the values it was taken over, and how
// many there were (NaN left out). The zero value is not meaningful: use SpreadOf.
type Spread struct {
	Median, Min, Max float64
	N                int
}

// SpreadOf is the spread of xs, ignoring NaN; with nothing left every figure is NaN and N 0.
func SpreadOf(xs []float64) Spread {
	lo, hi := Range(xs)
	return Spread{Median: Median(xs), Min: lo, Max: hi, N: len(finite(xs))}
}

// PairedRatios is a[i]/b[i] per round: the ratio taken within each round, so that load which
// slows a whole round cancels. A round where either side is missing (NaN) or b is zero gives
// NaN. The result has the length of the shorter input.
func PairedRatios(a, b []float64) []float64 {
	r := make([]float64, min(len(a), len(b)))
	for i := range r {
		if math.IsNaN(a[i]) || math.IsNaN(b[i]) || b[i] == 0 {
			r[i] = math.NaN()
			continue
		}
		r[i] = a[i] / b[i]
	}
	return r
}

// PairedDiffs is a[i]-b[i] per round, NaN where either is missing.
func PairedDiffs(a, b []float64) []float64 {
	r := make([]float64, min(len(a), len(b)))
	for i := range r {
		r[i] = a[i] - b[i] // NaN stays NaN
	}
	return r
}

// PairedRatio is the median over rounds of a[i]/b[i] (see PairedRatios), skipping rounds
// where either side is missing or b is zero.
func PairedRatio(a, b []float64) float64 { return Median(PairedRatios(a, b)) }

// PairedDiff is the median over rounds of a[i]-b[i], skipping rounds where either is NaN.
func PairedDiff(a, b []float64) float64 { return Median(PairedDiffs(a, b)) }

func finite(xs []float64) []float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	return v
}

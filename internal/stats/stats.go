// Package stats is the experiment harness's arithmetic: nearest-rank
// percentiles, geometric means, paired ratios, a seeded bootstrap over whole
// paired blocks with percentile intervals, and an ordinary least-squares fit
// (for cost-model calibration).
//
// Everything is deterministic: the same inputs and seed give the same bits.
// Functions never modify their input slices.
package stats

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrEmpty is returned when a statistic is asked of no values.
var ErrEmpty = errors.New("stats: no values")

// NearestRank returns the p-th percentile of xs by the nearest-rank method:
// the smallest value such that at least p% of the values are ≤ it, i.e. the
// value of (1-based) rank ⌈p/100 · n⌉ in ascending order. p = 0 gives the
// minimum, p = 100 the maximum. The result is always one of the values (no
// interpolation), the usual definition for per-batch P50/P95.
// p must lie in [0, 100]; xs must be non-empty and hold no NaN.
func NearestRank(xs []float64, p float64) (float64, error) {
	if len(xs) == 0 {
		return 0, ErrEmpty
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	return nearestRankSorted(sorted, p)
}

// Percentiles returns NearestRank(xs, p) for every p in ps, sorting xs once.
func Percentiles(xs []float64, ps ...float64) ([]float64, error) {
	if len(xs) == 0 {
		return nil, ErrEmpty
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	out := make([]float64, len(ps))
	for i, p := range ps {
		v, err := nearestRankSorted(sorted, p)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// nearestRankSorted is NearestRank on ascending, NaN-free values.
func nearestRankSorted(sorted []float64, p float64) (float64, error) {
	if math.IsNaN(p) || p < 0 || p > 100 {
		return 0, fmt.Errorf("stats: percentile %v outside [0, 100]", p)
	}
	n := len(sorted)
	if math.IsNaN(sorted[0]) || math.IsNaN(sorted[n-1]) {
		// slices.Sort puts NaNs first; checking both ends is cheap insurance.
		return 0, fmt.Errorf("stats: NaN among %d values", n)
	}
	return sorted[rankIndex(p, n)], nil
}

// rankIndex is the 0-based index of the nearest rank ⌈p/100 · n⌉. The
// product p·n is formed before dividing so that integer p and n (the usual
// case: P95 of 32 programs) give an exact rank, and a relative 1e-12 guard
// keeps 97.5 · 40 / 100 from rounding up to the next rank.
func rankIndex(p float64, n int) int {
	x := p * float64(n) / 100
	r := int(math.Ceil(x - 1e-12*math.Max(1, x)))
	if r < 1 {
		r = 1
	}
	if r > n {
		r = n
	}
	return r - 1
}

// Mean is the arithmetic mean of xs.
func Mean(xs []float64) (float64, error) {
	if len(xs) == 0 {
		return 0, ErrEmpty
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs)), nil
}

// GeoMean is the geometric mean of xs, computed as exp(mean(log x)) so long
// products cannot overflow. Every value must be finite and > 0.
func GeoMean(xs []float64) (float64, error) {
	if len(xs) == 0 {
		return 0, ErrEmpty
	}
	s := 0.0
	for i, x := range xs {
		if !(x > 0) || math.IsInf(x, 1) {
			return 0, fmt.Errorf("stats: geometric mean needs finite values > 0; value %d is %v", i, x)
		}
		s += math.Log(x)
	}
	return math.Exp(s / float64(len(xs))), nil
}

// PairedRatios returns num[i]/den[i] for every paired block i (e.g. the
// batch throughput of arm B over arm A run on the same workload seed).
// The slices must have equal, non-zero length and every value must be
// finite and > 0.
func PairedRatios(num, den []float64) ([]float64, error) {
	if len(num) != len(den) {
		return nil, fmt.Errorf("stats: paired ratios need equal lengths; numerator has %d, denominator %d", len(num), len(den))
	}
	if len(num) == 0 {
		return nil, ErrEmpty
	}
	out := make([]float64, len(num))
	for i := range num {
		for _, v := range [2]float64{num[i], den[i]} {
			if !(v > 0) || math.IsInf(v, 1) {
				return nil, fmt.Errorf("stats: paired ratio of block %d needs finite values > 0; got %v / %v", i, num[i], den[i])
			}
		}
		out[i] = num[i] / den[i]
	}
	return out, nil
}

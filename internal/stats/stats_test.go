package stats

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func TestNearestRank(t *testing.T) {
	five := []float64{50, 15, 40, 20, 35} // unsorted on purpose
	tests := []struct {
		name    string
		xs      []float64
		p       float64
		want    float64
		wantErr string
	}{
		{"p0 is min", five, 0, 15, ""},
		{"p5 rank 1", five, 5, 15, ""},
		{"p30 rank 2", five, 30, 20, ""},
		{"p40 rank 2 exactly", five, 40, 20, ""},
		{"p50 rank 3", five, 50, 35, ""},
		{"p100 is max", five, 100, 50, ""},
		{"p50 of 10 is 5th", seq(10), 50, 5, ""},
		{"p11 of 10 rounds up", seq(10), 11, 2, ""},
		{"p95 of 10 is 10th", seq(10), 95, 10, ""},
		{"p95 of 32 programs is 31st", seq(32), 95, 31, ""},
		{"p50 of 32 programs is 16th", seq(32), 50, 16, ""},
		{"p97.5 of 40 is exact 39th", seq(40), 97.5, 39, ""},
		{"p2.5 of 10000 is 250th", seq(10000), 2.5, 250, ""},
		{"p97.5 of 10000 is 9750th", seq(10000), 97.5, 9750, ""},
		{"single value", []float64{7}, 95, 7, ""},
		{"empty", nil, 50, 0, "no values"},
		{"negative p", five, -1, 0, "percentile -1 outside"},
		{"p above 100", five, 100.5, 0, "percentile 100.5 outside"},
		{"NaN p", five, math.NaN(), 0, "outside"},
		{"NaN value", []float64{1, math.NaN(), 3}, 50, 0, "NaN among 3 values"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.xs)
			got, err := NearestRank(tc.xs, tc.p)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, before, tc.xs, "input must not be modified")
		})
	}
}

func TestPercentiles(t *testing.T) {
	got, err := Percentiles(seq(32), 50, 95, 100)
	require.NoError(t, err)
	require.Equal(t, []float64{16, 31, 32}, got)
	_, err = Percentiles(seq(3), 50, 101)
	require.ErrorContains(t, err, "101")
	_, err = Percentiles(nil, 50)
	require.ErrorIs(t, err, ErrEmpty)
}

func TestMeanGeoMean(t *testing.T) {
	tests := []struct {
		name     string
		xs       []float64
		wantMean float64
		wantGeo  float64
		geoErr   string
	}{
		{"pair", []float64{1, 4}, 2.5, 2, ""},
		{"triple", []float64{2, 8, 4}, 14.0 / 3, 4, ""},
		{"no overflow", []float64{1e300, 1e300, 1e300}, 1e300, 1e300, ""},
		{"zero refused", []float64{1, 0}, 0.5, 0, "value 1 is 0"},
		{"negative refused", []float64{-2, 3}, 0.5, 0, "value 0 is -2"},
		{"inf refused", []float64{math.Inf(1)}, math.Inf(1), 0, "value 0 is +Inf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Mean(tc.xs)
			require.NoError(t, err)
			if math.IsInf(tc.wantMean, 0) {
				require.Equal(t, tc.wantMean, m)
			} else {
				require.InEpsilon(t, tc.wantMean, m, 1e-12)
			}
			g, err := GeoMean(tc.xs)
			if tc.geoErr != "" {
				require.ErrorContains(t, err, tc.geoErr)
				return
			}
			require.NoError(t, err)
			require.InEpsilon(t, tc.wantGeo, g, 1e-12)
		})
	}
	_, err := Mean(nil)
	require.ErrorIs(t, err, ErrEmpty)
	_, err = GeoMean(nil)
	require.ErrorIs(t, err, ErrEmpty)
}

func TestPairedRatios(t *testing.T) {
	tests := []struct {
		name     string
		num, den []float64
		want     []float64
		wantErr  string
	}{
		{"blocks", []float64{2, 3, 1}, []float64{1, 4, 2}, []float64{2, 0.75, 0.5}, ""},
		{"length mismatch", []float64{1, 2}, []float64{1}, nil, "numerator has 2, denominator 1"},
		{"empty", nil, nil, nil, "no values"},
		{"zero denominator", []float64{1, 2}, []float64{1, 0}, nil, "block 1"},
		{"NaN numerator", []float64{math.NaN()}, []float64{1}, nil, "block 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PairedRatios(tc.num, tc.den)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// FuzzNearestRank checks the defining property of the nearest rank: the
// result is one of the values, at least ⌈p·n/100⌉ values are ≤ it, and
// fewer than that many are < it.
func FuzzNearestRank(f *testing.F) {
	f.Add([]byte{1, 5, 3, 9, 200}, 95.0)
	f.Add([]byte{7}, 0.0)
	f.Add([]byte{4, 4, 4, 1}, 50.0)
	f.Add([]byte{10, 20, 30, 40}, 100.0)
	f.Fuzz(func(t *testing.T, raw []byte, p float64) {
		xs := make([]float64, len(raw))
		for i, b := range raw {
			xs[i] = float64(b)
		}
		got, err := NearestRank(xs, p)
		if len(xs) == 0 || math.IsNaN(p) || p < 0 || p > 100 {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		require.Contains(t, xs, got)
		le, lt := 0, 0
		for _, x := range xs {
			if x <= got {
				le++
			}
			if x < got {
				lt++
			}
		}
		rank := rankIndex(p, len(xs)) + 1
		require.GreaterOrEqual(t, le, rank)
		require.Less(t, lt, rank)
		// The rank itself is ⌈p·n/100⌉ up to the rounding guard.
		exact := p * float64(len(xs)) / 100
		require.LessOrEqual(t, math.Abs(float64(rank)-math.Max(1, math.Ceil(exact))), 1.0)
	})
}

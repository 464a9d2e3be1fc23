package stats

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBootstrapTinyExact covers cases small enough that the seeded interval
// must equal the exact one: with one block every resample is that block;
// with two blocks of ratios 1 and 4 the exact resample distribution of the
// geometric mean is {1: 1/4, 2: 1/2, 4: 1/4}, whose 2.5% and 97.5%
// nearest-rank quantiles are 1 and 4 (each atom holds 25% ≫ 2.5%, so 10,000
// draws put ~2,500 ± 43 on each end and the empirical quantiles coincide).
func TestBootstrapTinyExact(t *testing.T) {
	tests := []struct {
		name          string
		num, den      []float64
		point, lo, hi float64
	}{
		{"one block", []float64{1.3}, []float64{1}, 1.3, 1.3, 1.3},
		{"two blocks", []float64{1, 8}, []float64{1, 2}, 2, 1, 4},
		{"two identical", []float64{3, 6}, []float64{2, 4}, 1.5, 1.5, 1.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Bootstrap{Seed: DefaultSeed}.GeoMeanRatio(tc.num, tc.den)
			require.NoError(t, err)
			require.InEpsilon(t, tc.point, e.Point, 1e-12)
			require.InEpsilon(t, tc.lo, e.Lo, 1e-12)
			require.InEpsilon(t, tc.hi, e.Hi, 1e-12)
			require.Equal(t, DefaultResamples, e.Resamples)
			require.Equal(t, DefaultLevel, e.Level)
			require.Equal(t, len(tc.num), e.Blocks)
		})
	}
}

// TestBootstrapThreeBlocksByHand checks the seeded bootstrap against the
// exact bootstrap distribution for three blocks with paired ratios 1, 2, 4.
//
// By hand: a resample picks 3 blocks with replacement, 3³ = 27 equally
// likely ordered draws. Write the ratios as 2^e, e ∈ {0, 1, 2}; the geometric
// mean of a draw is 2^(k/3) with k = e₁+e₂+e₃. The number of draws giving
// k = 0..6 is 1, 3, 6, 7, 6, 3, 1 (sum 27). So the exact CDF steps at
// 1/27 ≈ .037, 4/27 ≈ .148, 10/27 ≈ .370, 17/27 ≈ .630, 23/27 ≈ .852,
// 26/27 ≈ .963 and 1, and the nearest-rank quantiles are
//
//	2.5%: k=0 → 1     25%: k=2 → 2^(2/3)     50%: k=3 → 2
//	75%: k=4 → 2^(4/3)     97.5%: k=6 → 4
//
// Tolerance: with 10,000 resamples the empirical CDF at any step has a
// standard error ≤ √(.25/10⁴) = .005, and every quantile asked for sits at
// least .012 (2.4 s.e. at the worst step, .037 vs .025, where the s.e. is
// only .0019, i.e. 6 s.e.) from a step, so the empirical quantile must be
// the exact atom: compared within 1e-12. Each atom's empirical frequency is
// compared with its exact probability within .02 (≥ 4.5 s.e.).
func TestBootstrapThreeBlocksByHand(t *testing.T) {
	ratios := []float64{1, 2, 4}
	ones := []float64{1, 1, 1}

	// Enumerate the 27 resamples to confirm the hand counts.
	counts := make([]int, 7)
	for a := range 3 {
		for b := range 3 {
			for c := range 3 {
				counts[a+b+c]++
			}
		}
	}
	require.Equal(t, []int{1, 3, 6, 7, 6, 3, 1}, counts)
	exactQ := func(p float64) float64 {
		cum := 0
		for k, c := range counts {
			cum += c
			if float64(cum)/27 >= p/100 {
				return math.Pow(2, float64(k)/3)
			}
		}
		return 4
	}

	b := Bootstrap{Seed: DefaultSeed}
	logs := []float64{0, math.Log(2), math.Log(4)}
	reps, err := b.Replicates(3, func(idx []int) float64 {
		s := 0.0
		for _, i := range idx {
			s += logs[i]
		}
		return math.Exp(s / 3)
	})
	require.NoError(t, err)
	require.Len(t, reps, DefaultResamples)

	for _, tc := range []struct {
		p, want float64
	}{{2.5, 1}, {25, math.Pow(2, 2.0/3)}, {50, 2}, {75, math.Pow(2, 4.0/3)}, {97.5, 4}} {
		require.InEpsilon(t, tc.want, exactQ(tc.p), 1e-12, "hand value at p=%v", tc.p)
		got, err := NearestRank(reps, tc.p)
		require.NoError(t, err)
		require.InEpsilon(t, tc.want, got, 1e-12, "seeded quantile at p=%v", tc.p)
	}
	// Atom frequencies.
	freq := make([]int, 7)
	for _, r := range reps {
		k := int(math.Round(3 * math.Log2(r)))
		require.InDelta(t, math.Pow(2, float64(k)/3), r, 1e-12, "replicate %v is not an atom", r)
		freq[k]++
	}
	for k := range freq {
		require.InDelta(t, float64(counts[k])/27, float64(freq[k])/DefaultResamples, 0.02, "atom k=%d", k)
	}

	// The same through GeoMeanRatio at two levels.
	e, err := b.GeoMeanRatio(ratios, ones)
	require.NoError(t, err)
	require.InEpsilon(t, 2, e.Point, 1e-12)
	require.InEpsilon(t, 1, e.Lo, 1e-12)
	require.InEpsilon(t, 4, e.Hi, 1e-12)
	e, err = Bootstrap{Seed: DefaultSeed, Level: 0.5}.GeoMeanRatio(ratios, ones)
	require.NoError(t, err)
	require.InEpsilon(t, math.Pow(2, 2.0/3), e.Lo, 1e-12)
	require.InEpsilon(t, math.Pow(2, 4.0/3), e.Hi, 1e-12)
}

func TestBootstrapReproducible(t *testing.T) {
	num := []float64{1.30, 1.22, 1.41, 1.18, 1.35, 1.27, 1.33, 1.25, 1.29, 1.38, 1.21, 1.31}
	den := slices.Repeat([]float64{1}, len(num))
	a, err := Bootstrap{Seed: 7}.GeoMeanRatio(num, den)
	require.NoError(t, err)
	b, err := Bootstrap{Seed: 7}.GeoMeanRatio(num, den)
	require.NoError(t, err)
	require.Equal(t, a, b, "same seed must reproduce bit for bit")
	// Pinned values for the studies' seed: a change in the resampling
	// stream moves the interval by far more than the 1e-12 allowed for
	// exp/log rounding across platforms, and must be deliberate.
	g, err := Bootstrap{Seed: DefaultSeed}.GeoMeanRatio(num, den)
	require.NoError(t, err)
	for i, want := range []float64{1.289938709947316, 1.2522701327723322, 1.3276622996913006} {
		require.InEpsilon(t, want, []float64{g.Point, g.Lo, g.Hi}[i], 1e-12)
	}
	c, err := Bootstrap{Seed: 8}.GeoMeanRatio(num, den)
	require.NoError(t, err)
	require.Equal(t, a.Point, c.Point)
	require.NotEqual(t, [2]float64{a.Lo, a.Hi}, [2]float64{c.Lo, c.Hi}, "another seed draws other resamples")
	for _, e := range []Estimate{a, c} {
		require.Less(t, e.Lo, e.Point)
		require.Greater(t, e.Hi, e.Point)
		require.GreaterOrEqual(t, e.Lo, slices.Min(num))
		require.LessOrEqual(t, e.Hi, slices.Max(num))
	}
}

func TestBootstrapErrors(t *testing.T) {
	stat := func(idx []int) float64 { return float64(idx[0]) }
	tests := []struct {
		name    string
		b       Bootstrap
		n       int
		stat    func([]int) float64
		wantErr string
	}{
		{"no blocks", Bootstrap{}, 0, stat, "0 blocks"},
		{"negative resamples", Bootstrap{Resamples: -3}, 2, stat, "resamples -3"},
		{"level 1", Bootstrap{Level: 1}, 2, stat, "level 1 outside"},
		{"level negative", Bootstrap{Level: -0.5}, 2, stat, "level -0.5 outside"},
		{"NaN statistic", Bootstrap{Resamples: 5}, 2, func([]int) float64 { return math.NaN() }, "NaN on resample 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.b.Blocks(tc.n, tc.stat)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	_, err := Bootstrap{}.GeoMeanRatio([]float64{1, 2}, []float64{1})
	require.ErrorContains(t, err, "numerator has 2")
}

// FuzzGeoMeanRatio checks that any interval lies within the range of the
// paired ratios, is ordered, and that the point is the geometric mean.
func FuzzGeoMeanRatio(f *testing.F) {
	f.Add([]byte{10, 20, 30, 40}, uint64(1))
	f.Add([]byte{1, 1}, uint64(20260919))
	f.Add([]byte{255, 1, 7, 9, 3, 3}, uint64(0))
	f.Fuzz(func(t *testing.T, raw []byte, seed uint64) {
		n := len(raw) / 2
		num := make([]float64, n)
		den := make([]float64, n)
		for i := range n {
			num[i] = float64(raw[2*i]) + 1
			den[i] = float64(raw[2*i+1]) + 1
		}
		e, err := Bootstrap{Seed: seed, Resamples: 200}.GeoMeanRatio(num, den)
		if n == 0 {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		ratios, err := PairedRatios(num, den)
		require.NoError(t, err)
		g, err := GeoMean(ratios)
		require.NoError(t, err)
		require.InEpsilon(t, g, e.Point, 1e-9)
		lo, hi := slices.Min(ratios), slices.Max(ratios)
		require.LessOrEqual(t, e.Lo, e.Hi)
		require.GreaterOrEqual(t, e.Lo, lo*(1-1e-12))
		require.LessOrEqual(t, e.Hi, hi*(1+1e-12))
	})
}

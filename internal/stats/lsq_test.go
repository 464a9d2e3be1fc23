package stats

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLeastSquares(t *testing.T) {
	// Cost-model shaped design: intercept, prefill tokens, decode seqs,
	// context tokens, spanning 1 to ~10⁶; y generated exactly.
	var costX [][]float64
	var costY []float64
	truth := []float64{1.5e-3, 2.0e-5, 4.0e-5, 1.0e-8}
	for i := range 40 {
		row := []float64{1, float64((i * 997) % 8192), float64((i * 31) % 256), float64((i*7919)%1000000 + 1)}
		costX = append(costX, row)
		costY = append(costY, dot(row, truth))
	}
	tests := []struct {
		name     string
		x        [][]float64
		y        []float64
		coef     []float64
		rms, r2  float64
		resid    []float64
		tolerant float64
		wantErr  string
	}{
		{
			// By hand: x̄ = 1, ȳ = 2/3, slope = Σ(x-x̄)(y-ȳ)/Σ(x-x̄)² = 1/2,
			// intercept = 2/3 - 1/2 = 1/6; residuals -1/6, 1/3, -1/6;
			// RMS = √((1/36+1/9+1/36)/3) = √(1/18); Σ(y-ȳ)² = 2/3, so
			// R² = 1 - (1/6)/(2/3) = 3/4.
			name: "line through three points", x: [][]float64{{1, 0}, {1, 1}, {1, 2}}, y: []float64{0, 1, 1},
			coef: []float64{1.0 / 6, 0.5}, rms: math.Sqrt(1.0 / 18), r2: 0.75,
			resid: []float64{-1.0 / 6, 1.0 / 3, -1.0 / 6}, tolerant: 1e-12,
		},
		{
			name: "exact plane", x: [][]float64{{1, 0, 0}, {1, 1, 0}, {1, 0, 1}, {1, 2, 3}}, y: []float64{3, 5, 3.5, 8.5},
			coef: []float64{3, 2, 0.5}, rms: 0, r2: 1, tolerant: 1e-12,
		},
		{name: "cost model scales", x: costX, y: costY, coef: truth, rms: 0, r2: 1, tolerant: 1e-9},
		{name: "constant y", x: [][]float64{{1}, {1}}, y: []float64{2, 2}, coef: []float64{2}, rms: 0, r2: 1, tolerant: 1e-12},
		{name: "no rows", wantErr: "no values"},
		{name: "y length", x: [][]float64{{1}, {1}}, y: []float64{1}, wantErr: "2 rows of X but 1 values"},
		{name: "too few rows", x: [][]float64{{1, 2}}, y: []float64{1}, wantErr: "1 observations cannot determine 2"},
		{name: "ragged", x: [][]float64{{1, 2}, {1}, {1, 3}}, y: []float64{1, 2, 3}, wantErr: "row 1 has 1 columns"},
		{name: "dependent column", x: [][]float64{{1, 1, 2}, {1, 2, 4}, {1, 3, 6}, {1, 5, 10}}, y: []float64{1, 2, 3, 4}, wantErr: "column 2 is linearly dependent"},
		{name: "zero column", x: [][]float64{{0, 1}, {0, 2}}, y: []float64{1, 2}, wantErr: "column 0"},
		{name: "NaN in X", x: [][]float64{{1}, {math.NaN()}}, y: []float64{1, 2}, wantErr: "X[1][0] is NaN"},
		{name: "Inf in y", x: [][]float64{{1}, {1}}, y: []float64{1, math.Inf(-1)}, wantErr: "y[1] is -Inf"},
		{name: "no columns", x: [][]float64{{}}, y: []float64{1}, wantErr: "no columns"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := LeastSquares(tc.x, tc.y)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, f.Coef, len(tc.coef))
			for j := range tc.coef {
				require.InDelta(t, tc.coef[j], f.Coef[j], tc.tolerant*math.Max(1, math.Abs(tc.coef[j])), "coef %d", j)
			}
			require.InDelta(t, tc.rms, f.RMS, 1e-9)
			require.InDelta(t, tc.r2, f.R2, 1e-9)
			for i := range tc.resid {
				require.InDelta(t, tc.resid[i], f.Residuals[i], 1e-12)
			}
		})
	}
}

// TestLeastSquaresNoisyRecovers fits a noisy linear model and checks the
// coefficients come back within the noise and the fit error reports it.
func TestLeastSquaresNoisyRecovers(t *testing.T) {
	truth := []float64{2e-3, 1e-5}
	var x [][]float64
	var y []float64
	for i := range 200 {
		tok := float64(64 * (i + 1))
		noise := 1e-5 * float64(i%5-2) // zero-mean, ±2e-5 s
		x = append(x, []float64{1, tok})
		y = append(y, truth[0]+truth[1]*tok+noise)
	}
	f, err := LeastSquares(x, y)
	require.NoError(t, err)
	require.InDelta(t, truth[0], f.Coef[0], 1e-5)
	require.InDelta(t, truth[1], f.Coef[1], 1e-9)
	require.InDelta(t, math.Sqrt(2e-10), f.RMS, 1e-6) // noise RMS: √(mean of {4,1,0,1,4}·1e-10)
	require.InDelta(t, 2e-5, f.MaxAbs, 2e-6)
	require.Greater(t, f.R2, 0.999)
	require.Greater(t, f.MaxRel, 0.0)
}

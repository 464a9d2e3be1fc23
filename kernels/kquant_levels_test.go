package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKQuantLevelsAgree runs the int8-activation K-quant kernels of every
// variant this CPU has against the portable one on random-bit blocks. All
// levels compute the same integers per super-block and differ only in the
// order of float32 sums, so they must agree within (k+16)·u·Σ|x·w|: a far
// tighter bound than the activation rounding TestMatMulLowPrecision allows,
// and one a single wrong quant bit or scale breaks.
func TestKQuantLevelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	// The m ≥ 5 Q4_K/Q5_K shapes take the tile kernels: n = 40 is two
	// 16-row tiles (512-bit levels) and one 8-row tile, n = 27 adds 3 rows
	// for mmk; k = 1280 spans two depth chunks, the second partial.
	shapes := []struct{ m, k, n int }{{1, 256, 5}, {1, 2048, 7}, {3, 768, 9}, {6, 512, 11},
		{5, 768, 40}, {17, 512, 40}, {33, 256, 27}, {8, 1280, 24}}
	for _, typ := range []DType{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K} {
		for _, s := range shapes {
			if s.m > streamMaxRows && !int8Tiled(typ) {
				continue // no int8 kernel past streamMaxRows rows
			}
			W := randomBitsMatrix(rng, typ, s.n, s.k)
			x := randFloats(rng, s.m*s.k, 2)
			bound := make([]float64, s.m*s.n)
			wf := make([]float32, s.k)
			for j := 0; j < s.n; j++ {
				W.Row(j, wf)
				for r := 0; r < s.m; r++ {
					var mag float64
					for c, v := range wf {
						mag += math.Abs(float64(v) * float64(x[r*s.k+c]))
					}
					bound[r*s.n+j] = float64(s.k+16)*unitRoundoff*mag + 1e-30
				}
			}
			// run multiplies at most rows rows of x at a time: the portable
			// path has int8 only up to streamMaxRows rows, and activations
			// are quantised per row, so a split changes no result.
			run := func(cfg lowpConfig, rows int) []float32 {
				w := NewWorkers(1)
				defer w.Close()
				require.NoError(t, w.SetPath(cfg.path))
				require.NoError(t, w.SetFeatures(cfg.feat))
				y := make([]float32, s.m*s.n)
				for r := 0; r < s.m; r += rows {
					mm := min(rows, s.m-r)
					require.Equal(t, "int8", w.LowPrecision(W, mm), "%v on %v/%v", typ, cfg.path, cfg.feat)
					require.NoError(t, w.MatMul(y[r*s.n:(r+mm)*s.n], x[r*s.k:(r+mm)*s.k], mm, W))
				}
				return y
			}
			ref := run(lowpConfig{Portable, 0}, streamMaxRows)
			for _, cfg := range lowpConfigs() {
				t.Run(fmt.Sprintf("%v/m=%d,k=%d/%v/%v", typ, s.m, s.k, cfg.path, cfg.feat), func(t *testing.T) {
					rows := s.m
					if cfg.path == Portable {
						rows = streamMaxRows
					}
					for i, got := range run(cfg, rows) {
						require.InDeltaf(t, ref[i], got, bound[i], "y[%d][%d]", i/s.n, i%s.n)
					}
				})
			}
		}
	}
}

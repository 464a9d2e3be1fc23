package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/sampling"
)

// TestGreedyArgmaxMatchesSampler: the argmax the CUDA runner's greedy rows
// use (kernels.Argmax, the order the device kernels ts_argmax and
// ts_rt_argmax_last follow, which the emulated device runs) picks the token
// the host sampler picks at temperature 0 on every row, +Inf, NaN and ties
// included: the two backends give the same greedy tokens on the same logits.
func TestGreedyArgmaxMatchesSampler(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	rows := [][]float32{
		{math.MaxFloat32, inf, 1},     // +Inf ties FLT_MAX: the lower index
		{1, inf, math.MaxFloat32},     // +Inf first
		{inf, inf},                    // tie
		{nan, 1, nan, 2},              // NaN never wins
		{nan, nan},                    // no number: 0
		{nan, -inf},                   // NaN is -Inf: the tie goes low
		{-inf, -inf, 3},               // -Inf below numbers
		{float32(math.Inf(-1)), -inf}, // no number above -Inf: 0
		{2, 5, 5, -1},                 // ties go low
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		row := make([]float32, 300)
		for i := range row {
			switch r.IntN(20) {
			case 0:
				row[i] = inf
			case 1:
				row[i] = nan
			case 2:
				row[i] = math.MaxFloat32
			default:
				row[i] = float32(r.NormFloat64())
			}
		}
		rows = append(rows, row)
	}
	for i, row := range rows {
		s, err := sampling.New(1, len(row))
		require.NoError(t, err)
		p := sampling.DefaultParams()
		p.Temperature = 0
		require.NoError(t, s.Start(0, &p, nil))
		var c sampling.Choice
		require.NoError(t, s.Sample(0, append([]float32(nil), row...), &c))
		require.Equal(t, c.Token, kernels.Argmax(row), "row %d %v", i, row)
		require.Equal(t, c.Token, kernels.RefArgmax(row), "row %d", i)
	}
}

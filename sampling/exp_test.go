package sampling

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExpNeg(t *testing.T) {
	for _, tc := range []struct {
		x    float32
		want float64
	}{
		{0, 1},
		{float32(math.Inf(-1)), 0},
		{float32(math.NaN()), 0},
		{-88, 0},
		{-1000, 0},
	} {
		require.Equal(t, tc.want, float64(expNeg(tc.x)), "x=%v", tc.x)
	}
	var worst float64
	for i := 0; i <= 200000; i++ {
		x := float32(-87.3 * float64(i) / 200000)
		want := math.Exp(float64(x))
		rel := math.Abs(float64(expNeg(x))-want) / want
		worst = math.Max(worst, rel)
	}
	require.Less(t, worst, 3e-7, "worst relative error over [-87.3, 0]")
}

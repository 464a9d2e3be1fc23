package stats

import (
	"math"
	"testing"
)

// BenchmarkGeoMeanRatio is the headline statistic of one comparison: 12
// paired blocks, 10,000 resamples.
func BenchmarkGeoMeanRatio(b *testing.B) {
	num := []float64{1.30, 1.22, 1.41, 1.18, 1.35, 1.27, 1.33, 1.25, 1.29, 1.38, 1.21, 1.31}
	den := make([]float64, len(num))
	for i := range den {
		den[i] = 1
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (Bootstrap{Seed: DefaultSeed}).GeoMeanRatio(num, den); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeastSquares fits the 4-term cost model to 1,000 steps.
func BenchmarkLeastSquares(b *testing.B) {
	x := make([][]float64, 1000)
	y := make([]float64, len(x))
	for i := range x {
		x[i] = []float64{1, float64(i % 2048), float64(i % 64), float64((i * 7919) % 500000)}
		y[i] = 4e-3 + 2.7e-5*x[i][1] + 2.7e-5*x[i][2] + 3.4e-8*x[i][3] + 1e-5*math.Sin(float64(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LeastSquares(x, y); err != nil {
			b.Fatal(err)
		}
	}
}

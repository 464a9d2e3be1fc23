package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkKQuantTile is the int8 tile GEMM of Q4_K and Q5_K (mmkt in
// tk_lowp_body.h) at the batched-decode row counts and both depths of the
// 110M model (k = 768: attention and FFN up; k = 2048: FFN down).
func BenchmarkKQuantTile(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, typ := range []DType{Q4_K, Q5_K} {
		for _, s := range []struct{ m, k, n int }{{8, 768, 2048}, {32, 768, 2048}, {8, 2048, 768}, {32, 2048, 768}} {
			W, err := Quantize(typ, s.n, s.k, randFloats(rng, s.n*s.k, 1))
			if err != nil {
				b.Fatal(err)
			}
			x, y := randFloats(rng, s.m*s.k, 1), make([]float32, s.m*s.n)
			for _, cores := range benchCores() {
				b.Run(fmt.Sprintf("%v/m=%d,k=%d,n=%d/cores=%d", typ, s.m, s.k, s.n, cores), func(b *testing.B) {
					w := NewWorkers(cores)
					defer w.Close()
					if mode := w.LowPrecision(W, s.m); mode != "int8" {
						b.Skipf("%s activations", mode)
					}
					best, _ := loop(b, func() error { return w.MatMul(y, x, s.m, W) })
					flop := 2 * float64(s.m*s.k*s.n)
					b.ReportMetric(float64(b.N)*flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					b.ReportMetric(flop/best.Seconds()/1e9, "best_GFLOP/s")
				})
			}
		}
	}
}

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkBF16Layers is MatMul on BF16 weights of the 110M model's shapes
// (k=768 into the FFN width and back), at decode (m=1) and batched (m=8,
// 32) rows. Each iteration runs once over 48 matrices of 3 MiB (144 MiB,
// 4.5x the LLC), so every weight comes from memory as in decode; frac_bw
// is the best weight read rate over the read bandwidth of a same-size
// buffer measured in the same run.
func BenchmarkBF16Layers(b *testing.B) {
	const mats = 48
	rng := rand.New(rand.NewPCG(3, 3))
	bw := make([]float32, mats*768*2048/2) // same bytes as the weights
	for i := range bw {
		bw[i] = 1
	}
	for _, s := range []struct{ k, n int }{{768, 2048}, {2048, 768}} {
		Ws := make([]Matrix, mats)
		for i := range Ws {
			Ws[i] = streamMatrix(BF16, s.n, s.k)
		}
		bytes := mats * len(Ws[0].Data)
		for _, m := range []int{1, 8, 32} {
			x, y := randFloats(rng, m*s.k, 1), make([]float32, m*s.n)
			for _, cores := range benchCores() {
				b.Run(fmt.Sprintf("m=%d,k=%d,n=%d/cores=%d", m, s.k, s.n, cores), func(b *testing.B) {
					w := NewWorkers(cores)
					defer w.Close()
					if w.LowPrecision(Ws[0], m) != "bf16" {
						b.Skip("no AVX512-BF16 on this CPU")
					}
					roof := measureBandwidth(b, w, bw, cores)
					b.SetBytes(int64(bytes))
					best, _ := loop(b, func() error {
						for _, W := range Ws {
							if err := w.MatMul(y, x, m, W); err != nil {
								return err
							}
						}
						return nil
					})
					b.ReportMetric(float64(bytes)/best.Seconds()/1e9, "best_GB/s")
					b.ReportMetric(roof, "roof_GB/s")
					b.ReportMetric(float64(bytes)/best.Seconds()/1e9/roof, "frac_bw")
				})
			}
		}
	}
}

package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkLayerMatMuls runs the matmuls of a decode step of a 110M-shape
// F32 model (12 layers of fused q/k/v, o, fused gate/up and down; dim 768,
// FFN 2048) at 1, 8 and 32 rows: 340 MB of weights, ten times the LLC, so
// it shows what the hand-offs and the tiles' tails cost next to the GEMV
// streaming one large matrix (BenchmarkGEMVStream).
func BenchmarkLayerMatMuls(b *testing.B) {
	const layers, dim, ffn = 12, 768, 2048
	type layer struct {
		qkv, gu []Matrix
		o, down Matrix
	}
	ls := make([]layer, layers)
	bytes := 0
	for i := range ls {
		l := &ls[i]
		l.qkv = []Matrix{streamMatrix(F32, dim, dim), streamMatrix(F32, dim, dim), streamMatrix(F32, dim, dim)}
		l.o = streamMatrix(F32, dim, dim)
		l.gu = []Matrix{streamMatrix(F32, ffn, dim), streamMatrix(F32, ffn, dim)}
		l.down = streamMatrix(F32, dim, ffn)
		bytes += 4 * (4*dim*dim + 3*dim*ffn)
	}
	for _, m := range []int{1, 8, 32} {
		x, h := make([]float32, m*ffn), make([]float32, m*ffn)
		q, k, v, o := make([]float32, m*dim), make([]float32, m*dim), make([]float32, m*dim), make([]float32, m*dim)
		g, u := make([]float32, m*ffn), make([]float32, m*ffn)
		b.Run(fmt.Sprintf("m=%d/cores=2", m), func(b *testing.B) {
			w := NewWorkers(2)
			defer w.Close()
			step := func() error {
				for i := range ls {
					l := &ls[i]
					if err := w.MatMuls([][]float32{q, k, v}, x[:m*dim], m, l.qkv); err != nil {
						return err
					}
					if err := w.MatMul(o, q, m, l.o); err != nil {
						return err
					}
					if err := w.MatMuls([][]float32{g, u}, x[:m*dim], m, l.gu); err != nil {
						return err
					}
					if err := w.MatMul(o, h, m, l.down); err != nil {
						return err
					}
				}
				return nil
			}
			best, cpu := loop(b, step)
			b.ReportMetric(float64(b.N)*float64(bytes)/b.Elapsed().Seconds()/1e9, "GB/s")
			b.ReportMetric(float64(bytes)/best.Seconds()/1e9, "best_GB/s")
			b.ReportMetric(float64(cpu.Microseconds()), "cpu_us/op")
		})
	}
}

package kernels

import (
	"fmt"
	"testing"

	"github.com/turnstile-llm/turnstile/internal/hugemem"
)

// BenchmarkLayerMatMuls runs the matmuls of a decode step of a 110M-shape
// model (12 layers of fused q/k/v, o, fused gate/up and down; dim 768,
// FFN 2048) per weight type at 1, 8 and 32 rows: 340 MB of F32 weights
// (90 MB of Q8_0), several times the LLC, so it shows what the hand-offs,
// the tiles' tails and the short rows cost next to the GEMV streaming one
// large matrix (BenchmarkGEMVStream), and the read probe in the same run.
func BenchmarkLayerMatMuls(b *testing.B) {
	bw := make([]float32, 1<<26) // 256 MiB read probe
	for i := range bw {
		bw[i] = 1
	}
	for _, typ := range []DType{F32, F16, BF16, Q8_0} {
		benchLayerMatMuls(b, typ, bw)
	}
}

func benchLayerMatMuls(b *testing.B, typ DType, bw []float32) {
	const layers, dim, ffn = 12, 768, 2048
	type layer struct {
		qkv, gu []Matrix
		o, down Matrix
	}
	ls := make([]layer, layers)
	bytes := 0
	for i := range ls {
		l := &ls[i]
		l.qkv = []Matrix{streamMatrix(typ, dim, dim), streamMatrix(typ, dim, dim), streamMatrix(typ, dim, dim)}
		l.o = streamMatrix(typ, dim, dim)
		l.gu = []Matrix{streamMatrix(typ, ffn, dim), streamMatrix(typ, ffn, dim)}
		l.down = streamMatrix(typ, dim, ffn)
		for _, W := range append(append([]Matrix{l.o, l.down}, l.qkv...), l.gu...) {
			bytes += len(W.Data)
		}
	}
	// The weights in huge pages, as LoadLlama places them, each 64-byte
	// aligned (7 matrices a layer).
	reg, err := hugemem.Alloc(bytes + 64*7*layers)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = reg.Free() }()
	mem := reg.Bytes()
	for i := range ls {
		l := &ls[i]
		for _, W := range append(append([]*Matrix{&l.o, &l.down}, &l.qkv[0], &l.qkv[1], &l.qkv[2]), &l.gu[0], &l.gu[1]) {
			n := len(W.Data)
			copy(mem, W.Data)
			W.Data, mem = mem[:n:n], mem[(n+63)&^63:]
		}
	}
	for _, m := range []int{1, 8, 32} {
		x, h := make([]float32, m*ffn), make([]float32, m*ffn)
		q, k, v, o := make([]float32, m*dim), make([]float32, m*dim), make([]float32, m*dim), make([]float32, m*dim)
		g, u := make([]float32, m*ffn), make([]float32, m*ffn)
		b.Run(fmt.Sprintf("%v/m=%d/cores=2", typ, m), func(b *testing.B) {
			w := NewWorkers(2)
			defer w.Close()
			roof := measureBandwidth(b, w, bw, 2)
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
			b.ReportMetric(roof, "roof_GB/s")
			b.ReportMetric(float64(bytes)/best.Seconds()/1e9/roof, "frac_bw")
		})
	}
}

package kernels

import (
	"fmt"
	"testing"

	"github.com/turnstile-llm/turnstile/internal/hugemem"
)

// BenchmarkLayerMatMuls1B is BenchmarkLayerMatMuls at the Llama-3.2-1B
// shape (16 layers, dim 2048, 8 kv heads of 64, FFN 8192; the tied output
// matrix 128,256 × 2048) in the weight types llama-quantize's Q4_K_M mixes
// (Q4_K, Q6_K) and Q8_0, one row of x (decode): each kind of matrix on
// its own over all 16 layers (q/k/v as the runner calls them, fused when
// one type), so its GB/s against the read probe in the same run says
// which kernel or shape falls short of the bandwidth, then the output
// matrix alone. 550 MB (Q4_K) to 1 GB (Q8_0) of layer weights: well past
// any cache.
func BenchmarkLayerMatMuls1B(b *testing.B) {
	bw := make([]float32, 1<<26) // 256 MiB read probe
	for i := range bw {
		bw[i] = 1
	}
	for _, typ := range []DType{Q4_K, Q6_K, Q8_0} {
		benchLayerMatMuls1B(b, typ, bw)
	}
}

func benchLayerMatMuls1B(b *testing.B, typ DType, bw []float32) {
	const layers, dim, kvDim, ffn, vocab = 16, 2048, 512, 8192, 128256
	type layer struct {
		qkv, gu []Matrix
		o, down Matrix
	}
	ls := make([]layer, layers)
	all := []*Matrix{}
	for i := range ls {
		l := &ls[i]
		l.qkv = []Matrix{streamMatrix(typ, dim, dim), streamMatrix(typ, kvDim, dim), streamMatrix(typ, kvDim, dim)}
		l.o = streamMatrix(typ, dim, dim)
		l.gu = []Matrix{streamMatrix(typ, ffn, dim), streamMatrix(typ, ffn, dim)}
		l.down = streamMatrix(typ, dim, ffn)
		all = append(all, &l.qkv[0], &l.qkv[1], &l.qkv[2], &l.o, &l.gu[0], &l.gu[1], &l.down)
	}
	out := streamMatrix(typ, vocab, dim)
	all = append(all, &out)
	bytes := 0
	for _, W := range all {
		bytes += (len(W.Data) + 63) &^ 63
	}
	// The weights in huge pages, as LoadLlama places them, 64-byte aligned.
	reg, err := hugemem.Alloc(bytes)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = reg.Free() }()
	mem := reg.Bytes()
	for _, W := range all {
		n := len(W.Data)
		copy(mem, W.Data)
		W.Data, mem = mem[:n:n], mem[(n+63)&^63:]
	}
	x, h := make([]float32, ffn), make([]float32, ffn)
	for i := range x {
		x[i], h[i] = 0.01*float32(i%13), 0.02*float32(i%7)
	}
	q, k, v, o := make([]float32, dim), make([]float32, kvDim), make([]float32, kvDim), make([]float32, dim)
	g, u, logits := make([]float32, ffn), make([]float32, ffn), make([]float32, vocab)
	kinds := []struct {
		name string
		run  func(w *Workers, l *layer) error
		size func(l *layer) int
	}{
		{"qkv", func(w *Workers, l *layer) error {
			return w.MatMuls([][]float32{q, k, v}, x[:dim], 1, l.qkv)
		}, func(l *layer) int { return len(l.qkv[0].Data) + len(l.qkv[1].Data) + len(l.qkv[2].Data) }},
		{"o", func(w *Workers, l *layer) error { return w.MatMul(o, q, 1, l.o) },
			func(l *layer) int { return len(l.o.Data) }},
		{"gate_up", func(w *Workers, l *layer) error {
			return w.MatMuls([][]float32{g, u}, x[:dim], 1, l.gu)
		}, func(l *layer) int { return len(l.gu[0].Data) + len(l.gu[1].Data) }},
		{"down", func(w *Workers, l *layer) error { return w.MatMul(o, h, 1, l.down) },
			func(l *layer) int { return len(l.down.Data) }},
	}
	w := NewWorkers(2)
	defer w.Close()
	for _, kd := range kinds {
		b.Run(fmt.Sprintf("%v/%s/x16/cores=2", typ, kd.name), func(b *testing.B) {
			roof := measureBandwidth(b, w, bw, 2)
			n := 0
			for i := range ls {
				n += kd.size(&ls[i])
			}
			best, _ := loop(b, func() error {
				for i := range ls {
					if err := kd.run(w, &ls[i]); err != nil {
						return err
					}
				}
				return nil
			})
			reportBW(b, n, best, roof)
		})
	}
	b.Run(fmt.Sprintf("%v/output_%dx%d/cores=2", typ, vocab, dim), func(b *testing.B) {
		roof := measureBandwidth(b, w, bw, 2)
		best, _ := loop(b, func() error { return w.MatMul(logits, x[:dim], 1, out) })
		reportBW(b, len(out.Data), best, roof)
	})
}

func reportBW(b *testing.B, n int, best interface{ Seconds() float64 }, roof float64) {
	b.ReportMetric(float64(b.N)*float64(n)/b.Elapsed().Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(n)/best.Seconds()/1e9, "best_GB/s")
	b.ReportMetric(roof, "roof_GB/s")
	b.ReportMetric(float64(n)/best.Seconds()/1e9/roof, "frac_bw")
	b.ReportMetric(best.Seconds()*1e6, "best_us")
}

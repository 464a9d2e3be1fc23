package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Benchmarks report the machine's own limits (peak FMA GFLOP/s, read
// bandwidth) and the kernels as fractions of those limits, measured in the
// same run because this machine is shared and noisy.

// benchCores are the core counts every benchmark is run with.
func benchCores() []int { return []int{1, 2} }

// loop runs op under b.Loop and returns the fastest single iteration and
// the process CPU time per iteration. This machine is shared: the average
// (ns/op) includes waiting for other tenants; the fastest iteration and the
// work per CPU-second are the kernel's own speed, so the "best_" and "cpu_"
// metrics and the fractions use them.
func loop(b *testing.B, op func() error) (best, cpu time.Duration) {
	if err := op(); err != nil { // warm-up: grows the pool's scratch once
		b.Fatal(err)
	}
	best = time.Duration(math.MaxInt64)
	cpu0 := processCPUTime()
	for b.Loop() {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return best, (processCPUTime() - cpu0) / time.Duration(b.N)
}

// cpuPeak returns peak FMA GFLOP/s per core per CPU-second (the speed of a
// core while it runs our thread).
func cpuPeak(b *testing.B, w *Workers) float64 {
	cpu0 := processCPUTime()
	var flops float64
	for i := 0; i < 10; i++ {
		f, err := w.FMAProbe(BestPath(), 1, 1<<19)
		if err != nil {
			b.Fatal(err)
		}
		flops += f
	}
	return flops / (processCPUTime() - cpu0).Seconds() / 1e9
}

// measurePeak returns the best of ten short FMA probes in GFLOP/s.
func measurePeak(b *testing.B, w *Workers, cores int) float64 {
	best := 0.0
	for i := 0; i < 10; i++ {
		start := time.Now()
		flops, err := w.FMAProbe(BestPath(), cores, 1<<19)
		if err != nil {
			b.Fatal(err)
		}
		best = max(best, flops/time.Since(start).Seconds()/1e9)
	}
	return best
}

// measureBandwidth returns the best of ten reads of buf in GB/s.
func measureBandwidth(b *testing.B, w *Workers, buf []float32, cores int) float64 {
	best := 0.0
	for i := 0; i < 10; i++ {
		start := time.Now()
		if _, err := w.ReadProbe(buf, cores); err != nil {
			b.Fatal(err)
		}
		best = max(best, float64(4*len(buf))/time.Since(start).Seconds()/1e9)
	}
	return best
}

func BenchmarkPeakFMA(b *testing.B) {
	w := NewWorkers(2)
	defer w.Close()
	for _, p := range SupportedPaths() {
		for _, cores := range benchCores() {
			b.Run(fmt.Sprintf("%v/cores=%d", p, cores), func(b *testing.B) {
				var flops float64
				best, cpu := loop(b, func() (err error) {
					flops, err = w.FMAProbe(p, cores, 1<<20)
					return err
				})
				b.ReportMetric(float64(b.N)*flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops/best.Seconds()/1e9, "best_GFLOP/s")
				b.ReportMetric(flops/cpu.Seconds()/1e9, "cpu_GFLOP/s/core")
			})
		}
	}
}

// BenchmarkReadBandwidth reads a 1 GiB buffer (≫ the 32 MiB LLC).
func BenchmarkReadBandwidth(b *testing.B) {
	w := NewWorkers(2)
	defer w.Close()
	buf := make([]float32, 1<<28)
	for i := range buf {
		buf[i] = 1
	}
	for _, cores := range benchCores() {
		b.Run(fmt.Sprintf("cores=%d", cores), func(b *testing.B) {
			b.SetBytes(int64(4 * len(buf)))
			best, _ := loop(b, func() error {
				_, err := w.ReadProbe(buf, cores)
				return err
			})
			b.ReportMetric(float64(b.N)*float64(4*len(buf))/b.Elapsed().Seconds()/1e9, "GB/s")
			b.ReportMetric(float64(4*len(buf))/best.Seconds()/1e9, "best_GB/s")
		})
	}
}

func BenchmarkMatMul(b *testing.B) {
	shapes := []struct{ m, k, n int }{{1, 768, 768}, {8, 768, 2048}, {32, 768, 2048}, {512, 768, 2048}}
	rng := rand.New(rand.NewPCG(1, 1))
	for _, typ := range []DType{F32, F16, BF16, Q8_0, Q4_K} {
		for _, s := range shapes {
			W, err := Quantize(typ, s.n, s.k, randFloats(rng, s.n*s.k, 1))
			if err != nil {
				b.Fatal(err)
			}
			x, y := randFloats(rng, s.m*s.k, 1), make([]float32, s.m*s.n)
			for _, cores := range benchCores() {
				for _, exact := range []bool{true, false} {
					w := NewWorkers(cores)
					w.SetExact(exact)
					mode := w.LowPrecision(W, s.m)
					if !exact && mode == "f32" {
						w.Close()
						continue
					}
					b.Run(fmt.Sprintf("%v/m=%d,k=%d,n=%d/cores=%d/%s", typ, s.m, s.k, s.n, cores, mode), func(b *testing.B) {
						peak, corePeak := measurePeak(b, w, cores), cpuPeak(b, w)
						best, cpu := loop(b, func() error { return w.MatMul(y, x, s.m, W) })
						flop := 2 * float64(s.m*s.k*s.n)
						b.ReportMetric(float64(b.N)*flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						b.ReportMetric(flop/best.Seconds()/1e9, "best_GFLOP/s")
						b.ReportMetric(flop/best.Seconds()/1e9/peak, "frac_peak")
						b.ReportMetric(flop/cpu.Seconds()/1e9/corePeak, "cpu_frac_peak")
					})
					w.Close()
				}
			}
		}
	}
}

// streamMatrix builds a rows x cols matrix of type t directly as bytes
// (Quantize on 64M random floats would take longer than the benchmark).
func streamMatrix(t DType, rows, cols int) Matrix {
	rb, _ := t.RowBytes(cols)
	data := make([]byte, rows*rb)
	switch t {
	case F32:
		for i := 0; i+4 <= len(data); i += 4 {
			binary.LittleEndian.PutUint32(data[i:], math.Float32bits(float32(i%251)*0.01))
		}
	case F16, BF16:
		for i := 0; i+2 <= len(data); i += 2 {
			binary.LittleEndian.PutUint16(data[i:], uint16(0x3c00+i%512))
		}
	case Q8_0:
		for i := 0; i+Q8BlockBytes <= len(data); i += Q8BlockBytes {
			binary.LittleEndian.PutUint16(data[i:], F32ToF16(0.01))
			for j := 2; j < Q8BlockBytes; j++ {
				data[i+j] = byte(i + j)
			}
		}
	}
	return Matrix{Type: t, Rows: rows, Cols: cols, Data: data}
}

// BenchmarkGEMVStream is decode (m=1) over 256 MiB of weights (8× the LLC):
// it must stream them at near the read bandwidth, measured in the same run
// on a buffer of the same size.
func BenchmarkGEMVStream(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	const k = 8192
	bw := make([]float32, 1<<26) // 256 MiB roofline probe
	for i := range bw {
		bw[i] = 1
	}
	for _, s := range []struct {
		typ DType
		n   int
	}{{F32, 8192}, {F16, 16384}, {BF16, 16384}, {Q8_0, 30840}} {
		W := streamMatrix(s.typ, s.n, k)
		x, y := randFloats(rng, k, 1), make([]float32, s.n)
		for _, cores := range benchCores() {
			b.Run(fmt.Sprintf("%v/k=%d,n=%d/cores=%d", s.typ, k, s.n, cores), func(b *testing.B) {
				w := NewWorkers(cores)
				defer w.Close()
				roof := measureBandwidth(b, w, bw, cores)
				b.SetBytes(int64(len(W.Data)))
				best, _ := loop(b, func() error { return w.MatMul(y, x, 1, W) })
				b.ReportMetric(float64(b.N)*float64(len(W.Data))/b.Elapsed().Seconds()/1e9, "GB/s")
				b.ReportMetric(float64(len(W.Data))/best.Seconds()/1e9, "best_GB/s")
				b.ReportMetric(roof, "roof_GB/s")
				b.ReportMetric(float64(len(W.Data))/best.Seconds()/1e9/roof, "frac_bw")
			})
		}
	}
}

// BenchmarkPagedAttention: 16 sequences decoding at context 512, and one
// 512-token prefill; 12 heads (4 kv heads), head dim 64, blocks of 16.
func BenchmarkPagedAttention(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 3))
	const kvHeads, heads, hd, bs, ctx = 4, 12, 64, 16, 512
	nb := 16 * ctx / bs
	l := &KVLayer{NumBlocks: nb, KVHeads: kvHeads, BlockSize: bs, HeadDim: hd,
		K: randFloats(rng, nb*kvHeads*bs*hd, 1), V: randFloats(rng, nb*kvHeads*bs*hd, 1)}
	perm := rng.Perm(nb)
	table := func(s int) []int32 {
		t := make([]int32, ctx/bs)
		for i := range t {
			t[i] = int32(perm[s*ctx/bs+i])
		}
		return t
	}
	decode := make([]AttnSeq, 16)
	for s := range decode {
		decode[s] = AttnSeq{QStart: int32(s), NumQ: 1, ContextLen: ctx, BlockTable: table(s)}
	}
	prefill := []AttnSeq{{QStart: 0, NumQ: ctx, ContextLen: ctx, BlockTable: table(0)}}
	for _, c := range []struct {
		name string
		seqs []AttnSeq
		rows int
	}{{"decode16x512", decode, 16}, {"prefill512", prefill, ctx}} {
		q, out := randFloats(rng, c.rows*heads*hd, 1), make([]float32, c.rows*heads*hd)
		for _, cores := range benchCores() {
			b.Run(fmt.Sprintf("%s/cores=%d", c.name, cores), func(b *testing.B) {
				w := NewWorkers(cores)
				defer w.Close()
				best, _ := loop(b, func() error { return w.PagedAttention(out, q, l, c.seqs, heads, 0.125) })
				b.ReportMetric(float64(best.Nanoseconds()), "best_ns")
			})
		}
	}
}

// BenchmarkSiLUMul: one FFN activation of 32 sequences of the 110M model
// (32 x 2048 elements), on every path (portable is the scalar expf loop).
func BenchmarkSiLUMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(4, 4))
	const n = 32 * 2048
	g, u, y := randFloats(rng, n, 8), randFloats(rng, n, 2), make([]float32, n)
	for _, p := range SupportedPaths() {
		b.Run(p.String(), func(b *testing.B) {
			best, _ := loop(b, func() error { return siluMulPath(p, y, g, u) })
			b.ReportMetric(float64(best.Nanoseconds())/n, "best_ns/elem")
		})
	}
}

// BenchmarkPagedAttentionGroups: one layer, 32 sequences decoding at
// context 2048 whose tables share their first 0%, 50% or 90% of blocks
// (90%: 115 of 128), plain PagedAttention against PagedAttentionGroups on
// 2 workers; the 110M shape (12 heads, 12 kv heads, head dim 64) and a GQA
// one (32 heads, 8 kv heads, head dim 128), blocks of 16.
func BenchmarkPagedAttentionGroups(b *testing.B) {
	const seqs, ctx, bs = 32, 2048, 16
	w := NewWorkers(2)
	defer w.Close()
	for _, shape := range []struct {
		name               string
		heads, kvHeads, hd int
	}{{"110M", 12, 12, 64}, {"gqa32x8x128", 32, 8, 128}} {
		for _, pct := range []int{0, 50, 90} {
			rng := rand.New(rand.NewPCG(5, uint64(pct)))
			per := ctx / bs
			shared := per * pct / 100
			if pct == 90 {
				shared = 115
			}
			nb := shared + seqs*(per-shared)
			n := nb * shape.kvHeads * bs * shape.hd
			l := &KVLayer{NumBlocks: nb, KVHeads: shape.kvHeads, BlockSize: bs, HeadDim: shape.hd,
				K: randFloats(rng, n, 1), V: randFloats(rng, n, 1)}
			perm := rng.Perm(nb)
			ss := make([]AttnSeq, seqs)
			members := make([]int32, seqs)
			for s := range ss {
				t := make([]int32, per)
				for i := range t {
					if i < shared {
						t[i] = int32(perm[i])
					} else {
						t[i] = int32(perm[shared+s*(per-shared)+i-shared])
					}
				}
				ss[s] = AttnSeq{QStart: int32(s), NumQ: 1, ContextLen: ctx, BlockTable: t}
				members[s] = int32(s)
			}
			var groups []AttnGroup
			if shared > 0 {
				groups = []AttnGroup{{SharedBlocks: int32(shared), Members: members}}
			}
			row := shape.heads * shape.hd
			q, out := randFloats(rng, seqs*row, 1), make([]float32, seqs*row)
			scale := float32(1 / math.Sqrt(float64(shape.hd)))
			for _, v := range []struct {
				name string
				op   func() error
			}{
				{"plain", func() error { return w.PagedAttention(out, q, l, ss, shape.heads, scale) }},
				{"cascade", func() error { return w.PagedAttentionGroups(out, q, l, ss, groups, shape.heads, scale) }},
			} {
				b.Run(fmt.Sprintf("%s/shared=%d%%/%s", shape.name, pct, v.name), func(b *testing.B) {
					b.ReportAllocs()
					best, cpu := loop(b, v.op)
					b.ReportMetric(float64(best.Nanoseconds()), "best_ns")
					b.ReportMetric(float64(cpu.Nanoseconds()), "cpu_ns")
				})
			}
		}
	}
}

// BenchmarkGEMVInt8Core is decode (m=1) on the int8-activation kernels of
// every block type over about 2 MiB of weights (L2/LLC-resident): the
// kernel's own speed in weight bytes per CPU-second (cpu_GB/s), which the
// other tenants of a shared machine disturb far less than wall time. A
// type whose cpu_GB/s is not well above the read bandwidth cannot stream
// at it, whatever the prefetching.
func BenchmarkGEMVInt8Core(b *testing.B) {
	rng := rand.New(rand.NewPCG(6, 6))
	const k, target = 4096, 2 << 20
	sup := SupportedFeatures()
	for _, typ := range blockTypes {
		rb, _ := typ.RowBytes(k)
		n := target / rb
		W := randomBitsMatrix(rng, typ, n, k)
		x, y := randFloats(rng, k, 1), make([]float32, n)
		// Every dot level this CPU has: all extensions, then AVX-VNNI, then
		// AVX2 maddubs.
		seen := map[Features]bool{}
		for _, f := range []Features{sup, sup &^ FeatAVX512VNNI, sup &^ (FeatAVX512VNNI | FeatAVXVNNI)} {
			if seen[f] {
				continue
			}
			seen[f] = true
			w := NewWorkers(1)
			if err := w.SetFeatures(f); err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%v/k=%d,n=%d/%s/%v", typ, k, n, w.LowPrecision(W, 1), f), func(b *testing.B) {
				best, cpu := loop(b, func() error { return w.MatMul(y, x, 1, W) })
				b.ReportMetric(float64(len(W.Data))/best.Seconds()/1e9, "best_GB/s")
				b.ReportMetric(float64(len(W.Data))/cpu.Seconds()/1e9, "cpu_GB/s")
			})
			w.Close()
		}
	}
}

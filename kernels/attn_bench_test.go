package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkPagedAttentionDecode: one layer of decode attention at the 110M
// shape (12 heads, 12 kv heads, head dim 64, blocks of 16) on 1 and 2
// workers, per KV cache type and vector path: one sequence after a 512-token prompt
// (tg128@d512) and 32 sequences after 128 (tg128x32). One op is a step
// through as many layers as make 128 MiB of F32 cache (each layer's
// sequences on their own blocks), so, as in a model's decode step, the
// cache comes from memory and not from a cache the last op warmed. The
// paths run side by side in one binary, so their ratio is a paired A/B.
func BenchmarkPagedAttentionDecode(b *testing.B) {
	const kvHeads, heads, hd, bs = 12, 12, 64, 16
	for _, c := range []struct {
		name      string
		seqs, ctx int
	}{{"1x576", 1, 576}, {"32x192", 32, 192}} {
		rng := rand.New(rand.NewPCG(7, uint64(c.seqs)))
		per := c.ctx / bs
		layers := max(1, (128<<20)/(c.seqs*per*kvHeads*bs*hd*4*2))
		nb := layers * c.seqs * per
		base := &KVLayer{NumBlocks: nb, KVHeads: kvHeads, BlockSize: bs, HeadDim: hd,
			K: randFloats(rng, nb*kvHeads*bs*hd, 1), V: randFloats(rng, nb*kvHeads*bs*hd, 1)}
		ss := make([][]AttnSeq, layers)
		for ly := range ss {
			ss[ly] = make([]AttnSeq, c.seqs)
			for s := range ss[ly] {
				t := make([]int32, per)
				for i := range t { // a sequence's blocks in order, as a fresh pool hands them out
					t[i] = int32((ly*c.seqs+s)*per + i)
				}
				ss[ly][s] = AttnSeq{QStart: int32(s), NumQ: 1, ContextLen: int32(c.ctx), BlockTable: t}
			}
		}
		q, out := randFloats(rng, c.seqs*heads*hd, 1), make([]float32, c.seqs*heads*hd)
		for _, kt := range KVTypes {
			l := kvAs(base, kt)
			for _, p := range SupportedPaths() {
				if p == Portable {
					continue
				}
				for _, cores := range benchCores() {
					b.Run(fmt.Sprintf("%s/%v/%v/cores=%d", c.name, kt, p, cores), func(b *testing.B) {
						w := NewWorkers(cores)
						defer w.Close()
						if err := w.SetPath(p); err != nil {
							b.Fatal(err)
						}
						best, cpu := loop(b, func() error {
							for _, layer := range ss {
								if err := w.PagedAttention(out, q, l, layer, heads, 0.125); err != nil {
									return err
								}
							}
							return nil
						})
						b.ReportMetric(float64(best.Nanoseconds()), "best_ns")
						b.ReportMetric(float64(cpu.Nanoseconds()), "cpu_ns")
					})
				}
			}
		}
	}
}

// BenchmarkPagedAttentionPrefill: one layer of prefill attention at the
// 110M shape (12 heads, 12 kv heads, head dim 64, blocks of 16): one
// sequence's 512-token prompt attending causally to itself (ctx 512), per
// KV cache type and vector path, on 1 and 2 workers. The cache (≤ 3 MiB)
// is the one the prompt just wrote, so it is in the CPU's caches, as in a
// model's prefill; the work is the ~4.8 GFLOP of causal QKᵀ and PV.
func BenchmarkPagedAttentionPrefill(b *testing.B) {
	const kvHeads, heads, hd, bs, ctx = 12, 12, 64, 16, 512
	rng := rand.New(rand.NewPCG(9, 9))
	nb := ctx / bs
	base := &KVLayer{NumBlocks: nb, KVHeads: kvHeads, BlockSize: bs, HeadDim: hd,
		K: randFloats(rng, nb*kvHeads*bs*hd, 1), V: randFloats(rng, nb*kvHeads*bs*hd, 1)}
	t := make([]int32, nb)
	for i := range t {
		t[i] = int32(i)
	}
	seqs := []AttnSeq{{QStart: 0, NumQ: ctx, ContextLen: ctx, BlockTable: t}}
	q, out := randFloats(rng, ctx*heads*hd, 1), make([]float32, ctx*heads*hd)
	for _, kt := range KVTypes {
		l := kvAs(base, kt)
		for _, p := range SupportedPaths() {
			if p == Portable {
				continue
			}
			for _, cores := range benchCores() {
				b.Run(fmt.Sprintf("pp512/%v/%v/cores=%d", kt, p, cores), func(b *testing.B) {
					w := NewWorkers(cores)
					defer w.Close()
					if err := w.SetPath(p); err != nil {
						b.Fatal(err)
					}
					best, cpu := loop(b, func() error { return w.PagedAttention(out, q, l, seqs, heads, 0.125) })
					b.ReportMetric(float64(best.Nanoseconds()), "best_ns")
					b.ReportMetric(float64(cpu.Nanoseconds()), "cpu_ns")
				})
			}
		}
	}
}

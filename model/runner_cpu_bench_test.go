package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/internal/hugemem"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/sampling"
	"github.com/turnstile-llm/turnstile/step"
)

// spec110M is the stories110M shape with a small vocabulary.
func spec110M(t gguf.GGMLType) synthSpec {
	return synthSpec{Dim: 768, Layers: 12, Heads: 12, KVHeads: 12, FFN: 2048, Vocab: 512, Context: 1024,
		Types: []gguf.GGMLType{t}, Seed: 11}
}

// Decode benchmarks run at a fixed context: every step decodes position
// ctx-1 of each sequence again (Start with the prefix cached, which resets
// only the sampler), so all steps cost the same whatever b.N is and the
// best step is a fair figure on a shared machine.
const (
	ctxShort = 24
	ctxMid   = 160
)

// decodeResult is what benchDecode measured: mean tokens/s over the timed
// loop, the fastest single step (on a shared machine the best step is the
// steadiest figure), and the step function for further measurements.
type decodeResult struct {
	tps, bestTPS float64
	best         time.Duration
	step         func()
}

// benchDecode measures decode steps of seqs sequences together at context
// ctx and reports tokens/s (sequences × steps per second), mean and best.
// kv is the KV cache's type; exact (optional) selects float32 activations
// in every MatMul.
func benchDecode(b *testing.B, m *Llama, seqs, ctx int, kv kernels.DType, exact ...bool) *decodeResult {
	bs := 16
	per := (ctx + bs - 1) / bs
	r := newTestRunner(b, m, CPURunnerConfig{Seats: seqs, KVBlocks: seqs * per, BlockSize: bs, MaxBatchTokens: max(seqs, ctx), KVType: kv})
	setExact(r, exact)
	h := newHarness(b, r)
	ss := make([]*tseq, seqs)
	for i := range ss {
		ss[i] = newSeq(int32(i), iota32(i*per, per)...)
		prompt := make([]int32, ctx-1)
		for j := range prompt {
			prompt[j] = int32((i*7 + j*13) % m.cfg.Vocab)
		}
		h.step(part{ss[i], prompt, false})
	}
	parts := make([]part, seqs)
	for i := range parts {
		parts[i] = part{ss[i], []int32{int32(i + 3)}, true}
	}
	h.build(parts...)
	for i := range h.b.Seqs {
		h.b.Seqs[i].Start = true
	}
	step := func() {
		if err := r.Execute(&h.b, &h.out); err != nil {
			b.Fatal(err)
		}
	}
	step() // grow the kernels' scratch for this batch shape
	step()
	res := &decodeResult{best: time.Duration(math.MaxInt64)}
	res.step = func() {
		t0 := time.Now()
		step()
		res.best = min(res.best, time.Since(t0))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res.step()
	}
	b.StopTimer()
	res.tps = float64(b.N*seqs) / b.Elapsed().Seconds()
	res.bestTPS = float64(seqs) / res.best.Seconds()
	b.ReportMetric(res.tps, "tok/s")
	b.ReportMetric(res.bestTPS, "best-tok/s")
	return res
}

// readBandwidth measures DRAM read bandwidth (bytes/s) with the kernels'
// read probe (eight streams per core) on a buffer far larger than the
// last-level cache, best of
// rounds passes; between passes it runs between(), so that the probe and
// the measurement it is compared with see the same machine load.
func readBandwidth(b *testing.B, cores, rounds int, between func()) float64 {
	w := kernels.NewWorkers(cores)
	defer w.Close()
	// 256 MiB in huge pages, as the model's weights (LoadLlama).
	reg, err := hugemem.Alloc(256 << 20)
	require.NoError(b, err)
	defer func() { require.NoError(b, reg.Free()) }()
	buf, err := hugemem.Float32s(reg, 64<<20)
	require.NoError(b, err)
	for i := range buf {
		buf[i] = 1
	}
	best := math.Inf(1)
	for range rounds {
		t0 := time.Now()
		_, err := w.ReadProbe(buf, cores)
		require.NoError(b, err)
		best = min(best, time.Since(t0).Seconds())
		between()
	}
	return float64(4*len(buf)) / best
}

// fmaPeak measures the cores' peak FLOP/s on the pool's path.
// Like readBandwidth it is the best of rounds passes with between() run
// after each.
func fmaPeak(b *testing.B, cores, rounds int, between func()) float64 {
	w := kernels.NewWorkers(cores)
	defer w.Close()
	best := 0.0
	for range rounds {
		t0 := time.Now()
		flops, err := w.FMAProbe(w.Path(), cores, 1<<22)
		require.NoError(b, err)
		best = max(best, flops/time.Since(t0).Seconds())
		between()
	}
	return best
}

func BenchmarkStories260K(b *testing.B) {
	m := loadStories(b)
	for _, ctx := range []int{ctxShort, ctxMid} {
		for _, seqs := range []int{1, 32} {
			b.Run(fmt.Sprintf("decode/ctx=%d/seqs=%d", ctx, seqs), func(b *testing.B) { benchDecode(b, m, seqs, ctx, kernels.F32) })
		}
	}
}

// setExact applies benchDecode's and benchPrefill's optional exact flag
// to the runner's pools.
func setExact(r *CPURunner, exact []bool) {
	if len(exact) > 0 {
		r.pool.SetExact(exact[0])
		r.serial.SetExact(exact[0])
	}
}

// BenchmarkLlama110M: decode of 1 and 32 sequences and a 512-token
// prefill of the 110M shape per weight type, with the kernels' default
// low-precision activations (lowp: bf16 for BF16, int8 for Q8_0/Q4_K) and
// with float32 activations (exact), side by side.
func BenchmarkLlama110M(b *testing.B) {
	cores := runtime.GOMAXPROCS(0)
	for _, typ := range []gguf.GGMLType{gguf.TypeF32, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_K} {
		m, err := LoadLlama(writeSynth(b, b.TempDir(), spec110M(typ)), LlamaOptions{})
		require.NoError(b, err)
		modes := []bool{false, true}
		if typ == gguf.TypeF32 {
			modes = modes[:1]
		}
		for _, exact := range modes {
			bench110M(b, m, typ, exact, cores)
		}
		require.NoError(b, m.Close())
	}
}

func bench110M(b *testing.B, m *Llama, typ gguf.GGMLType, exact bool, cores int) {
	mode := "lowp"
	if exact {
		mode = "exact"
	}
	// The KV cache types only with the default activations: the cache's
	// cost does not depend on how the weights' products are rounded.
	kvs := kernels.KVTypes[:]
	if exact {
		kvs = []kernels.DType{DefaultCPUKVType}
	}
	for _, kv := range kvs {
		var one *decodeResult
		b.Run(fmt.Sprintf("%v/%s/decode/ctx=%d/seqs=1/kv=%v", typ, mode, ctxMid, kv), func(b *testing.B) {
			one = benchDecode(b, m, 1, ctxMid, kv, exact)
			// Roofline: a decode step streams every weight once. Probe
			// passes alternate with decode steps; both keep their best.
			bw := readBandwidth(b, cores, 8, func() {
				for range 4 {
					one.step()
				}
			})
			one.bestTPS = 1 / one.best.Seconds()
			achieved := one.bestTPS * float64(m.WeightBytes())
			b.ReportMetric(one.bestTPS, "best-tok/s")
			b.ReportMetric(bw/1e9, "probe-GB/s")
			b.ReportMetric(achieved/1e9, "weights-GB/s")
			b.ReportMetric(achieved/bw, "roofline-frac")
		})
		b.Run(fmt.Sprintf("%v/%s/decode/ctx=%d/seqs=32/kv=%v", typ, mode, ctxMid, kv), func(b *testing.B) {
			res := benchDecode(b, m, 32, ctxMid, kv, exact)
			if one != nil {
				b.ReportMetric(res.tps/one.tps, "x-one-seq")
				b.ReportMetric(res.bestTPS/one.bestTPS, "best-x-one-seq")
			}
		})
	}
	b.Run(fmt.Sprintf("%v/%s/prefill/tokens=512", typ, mode), func(b *testing.B) { benchPrefill(b, m, 512, cores, exact) })
}

// benchPrefill measures one sequence's prompt of n tokens in one step and
// reports tokens/s and the fraction of the FMA peak it reaches.
func benchPrefill(b *testing.B, m *Llama, n, cores int, exact ...bool) {
	bs := 16
	r := newTestRunner(b, m, CPURunnerConfig{Seats: 1, KVBlocks: n / bs, BlockSize: bs, MaxBatchTokens: n})
	setExact(r, exact)
	h := newHarness(b, r)
	prompt := make([]int32, n)
	for j := range prompt {
		prompt[j] = int32(j * 17 % m.cfg.Vocab)
	}
	s := newSeq(0, iota32(0, n/bs)...)
	h.build(part{s, prompt, true})
	best := time.Duration(math.MaxInt64)
	step := func() {
		t0 := time.Now()
		if err := r.Execute(&h.b, &h.out); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(t0))
	}
	step() // grow the kernels' scratch for this batch shape
	best = time.Duration(math.MaxInt64)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		step()
	}
	b.StopTimer()
	tps := float64(b.N*n) / b.Elapsed().Seconds()
	// FMA probes alternate with two more prefill steps; both keep their best.
	peak := fmaPeak(b, cores, 3, step)
	c := m.cfg
	// Attention: QKᵀ and PV over the causal triangle, 2 FLOPs per MAC.
	attn := 2 * 2 * float64(c.Layers*c.Heads*c.HeadDim) * float64(n) * float64(n+1) / 2
	flops := float64(m.MatMulFLOPs())*float64(n) + attn
	achieved := flops / best.Seconds()
	b.ReportMetric(tps, "tok/s")
	b.ReportMetric(float64(n)/best.Seconds(), "best-tok/s")
	b.ReportMetric(achieved/1e9, "best-GFLOP/s")
	b.ReportMetric(peak/1e9, "peak-GFLOP/s")
	b.ReportMetric(achieved/peak, "peak-frac")
}

// BenchmarkCPUDecodeShared is one decode step of 32 sequences at 2,048
// context on the 110M shape, where a fraction of every context is a prefix
// all 32 share (the same leading blocks, as kvpool's prefix cache hands them
// out), with the step's groups (cascade attention) and without (plain: each
// sequence reads the shared blocks itself). Each iteration runs, back to
// back, a plain step, a cascade step, and the attention of every layer alone
// both ways (PagedAttention and PagedAttentionGroups on the step's queries),
// so that the pairs see the same machine load; it reports the medians and
// their ratios. The KV cache holds random values instead of a prefill's:
// attention costs the same, and setting up 4.8 GB of unshared KV by prefill
// would take minutes.
func BenchmarkCPUDecodeShared(b *testing.B) {
	const seqs, ctx, bs = 32, 2048, 16
	spec := spec110M(gguf.TypeF32)
	spec.Context = ctx
	m, err := LoadLlama(writeSynth(b, b.TempDir(), spec), LlamaOptions{})
	require.NoError(b, err)
	defer m.Close()
	per := ctx / bs
	for _, kv := range kernels.KVTypes {
		for _, share := range []float64{0, 0.5, 0.9} {
			benchDecodeShared(b, m, kv, share, seqs, ctx, bs, per)
		}
	}
}

// benchDecodeShared is one row of BenchmarkCPUDecodeShared: a cache of
// type kv, share of every context shared.
func benchDecodeShared(b *testing.B, m *Llama, kv kernels.DType, share float64, seqs, ctx, bs, per int) {
	b.Run(fmt.Sprintf("kv=%v/share=%.0f%%", kv, share*100), func(b *testing.B) {
		shared := int(share * float64(per))
		blocks := shared + seqs*(per-shared)
		r := newTestRunner(b, m, CPURunnerConfig{Seats: seqs, KVBlocks: blocks, BlockSize: bs, MaxBatchTokens: seqs, KVType: kv})
		rng := rand.New(rand.NewPCG(5, uint64(shared)))
		for li := range r.kv {
			l := &r.kv[li]
			for _, buf := range [][]float32{l.K, l.V} {
				for i := range buf {
					buf[i] = float32(rng.NormFloat64())
				}
			}
			for _, buf := range [][]uint16{l.K16, l.V16} {
				for i := range buf {
					if kv == kernels.F16 {
						buf[i] = kernels.F32ToF16(float32(rng.NormFloat64()))
					} else {
						buf[i] = kernels.F32ToBF16(float32(rng.NormFloat64()))
					}
				}
			}
		}
		plain, cascade := decodeSharedBatch(seqs, ctx, bs, shared), decodeSharedBatch(seqs, ctx, bs, shared)
		(&step.Grouper{MinBlocks: 2}).Group(cascade, bs)
		if share > 0 {
			require.Len(b, cascade.Groups, 1)
		}
		var out step.Output
		run := func(batch *step.Batch) time.Duration {
			t0 := time.Now()
			if err := r.Execute(batch, &out); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		}
		// Attention alone, every layer, on this step's queries.
		c := &r.m.cfg
		qd := c.Heads * c.HeadDim
		q := make([]float32, seqs*qd)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		att := make([]float32, len(q))
		aseqs := make([]kernels.AttnSeq, seqs)
		for i, sb := range plain.Seqs {
			aseqs[i] = kernels.AttnSeq{QStart: int32(i), NumQ: 1, ContextLen: sb.ContextLen, BlockTable: sb.BlockTable}
		}
		var groups []kernels.AttnGroup
		for _, g := range cascade.Groups {
			groups = append(groups, kernels.AttnGroup{SharedBlocks: g.SharedBlocks, Members: cascade.Members(g)})
		}
		scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
		attend := func(gs []kernels.AttnGroup) time.Duration {
			t0 := time.Now()
			for li := range r.kv {
				if err := r.pool.PagedAttentionGroups(att, q, &r.kv[li], aseqs, gs, c.Heads, scale); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(t0)
		}
		run(plain) // grow the kernels' scratch for both shapes
		run(cascade)
		var tp, tc, ap, ac []float64
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			tp = append(tp, run(plain).Seconds())
			tc = append(tc, run(cascade).Seconds())
			ap = append(ap, attend(nil).Seconds())
			ac = append(ac, attend(groups).Seconds())
		}
		b.StopTimer()
		med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
		mp, mc, map_, mac := med(tp), med(tc), med(ap), med(ac)
		b.ReportMetric(mp*1e3, "plain-step-ms")
		b.ReportMetric(mc*1e3, "cascade-step-ms")
		b.ReportMetric(mp/mc, "step-x")
		b.ReportMetric(map_*1e3, "plain-attn-ms")
		b.ReportMetric(mac*1e3, "cascade-attn-ms")
		b.ReportMetric(map_/mac, "attn-x")
	})
}

// decodeSharedBatch is one decode step of seqs sequences at context ctx
// whose tables begin with the same shared blocks (ids 0..shared-1), each
// with its own blocks after them.
func decodeSharedBatch(seqs, ctx, bs, shared int) *step.Batch {
	per := ctx / bs
	b := &step.Batch{}
	for i := range seqs {
		table := iota32(0, shared)
		table = append(table, iota32(shared+i*(per-shared), per-shared)...)
		p := sampling.DefaultParams()
		b.Tokens = append(b.Tokens, int32(i+3))
		b.Positions = append(b.Positions, int32(ctx-1))
		b.Seqs = append(b.Seqs, step.SeqBatch{Seat: int32(i), TokenStart: int32(i), NumTokens: 1, ContextLen: int32(ctx),
			BlockTable: table, Sample: true, Start: true, Params: &p})
	}
	return b
}

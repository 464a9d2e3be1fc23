package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/step"
)

// TestRunnerMatchesReference runs a synthetic model through the runner
// (prefill, then teacher-forced decode) and compares every step's logits
// with the plain-Go reference forward pass (float64 accumulation, dense
// attention). The runner accumulates in float32, so the tolerance is
// relative to the row's largest logit. With float32 activations (exact)
// only summation order differs; with the kernels' default low-precision
// activations (bf16 for BF16, int8 blocks for Q8_0, Q4_0, Q5_0 and the
// K-quants at ≤ 32 rows) the rounding of x adds its own error, bounded by
// lowpTol.
func TestRunnerMatchesReference(t *testing.T) {
	const tol = 1e-5 // observed ≤ 1e-6 on every type (the block types decode to the reference's exact weights)
	// Observed with low-precision activations: 0.0063 (BF16), 0.02 (Q8_0),
	// 0.016 (legacy blocks), 0.012 (K-quants) of the row's largest logit.
	const lowpTol = 0.05
	all := []gguf.GGMLType{gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0}
	tied := smallSpec(all...)
	tied.Tied = true
	scaled := smallSpec(gguf.TypeF16)
	scaled.LinearScale, scaled.Theta = 4, 500000
	legacy := smallSpec(gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0)
	// K-quants need rows of whole 256-element super-blocks: dim and ffn 256.
	kq := kquantSpec(gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ8_0, gguf.TypeF16)
	kqTied := kquantSpec(gguf.TypeQ6_K, gguf.TypeQ4_K)
	kqTied.Tied = true
	for _, tc := range []struct {
		name string
		spec synthSpec
	}{
		{"F32", smallSpec(gguf.TypeF32)},
		{"F16", smallSpec(gguf.TypeF16)},
		{"BF16", smallSpec(gguf.TypeBF16)},
		{"Q8_0", smallSpec(gguf.TypeQ8_0)},
		{"mixed", smallSpec(all...)},
		{"tied-output", tied},
		{"linear-rope-scaling", scaled},
		{"legacy-blocks", legacy},
		{"k-quants", kq},
		{"k-quants-tied", kqTied},
	} {
		m := loadSynth(t, tc.spec)
		rng := rand.New(rand.NewPCG(1, 2))
		toks := make([]int32, 40)
		for i := range toks {
			toks[i] = int32(rng.IntN(m.cfg.Vocab))
		}
		want := refForward(t, m, toks)
		for _, exact := range []bool{true, false} {
			name, bound := tc.name+"/exact", tol
			if !exact {
				name, bound = tc.name+"/lowp", lowpTol
			}
			t.Run(name, func(t *testing.T) {
				cfg := CPURunnerConfig{Seats: 2, KVBlocks: 8, BlockSize: 8, MaxBatchTokens: 64, KeepLogits: true}
				r := newTestRunner(t, m, cfg)
				if exact {
					r = newExactRunner(t, m, cfg)
				}
				h := newHarness(t, r)
				s := newSeq(1, 3, 0, 7, 5, 1)
				const prefill = 25
				_, got := h.step(part{s, toks[:prefill], true})
				worst := relErr(got[0], want[prefill-1])
				for p := prefill; p < len(toks); p++ {
					_, got = h.step(part{s, toks[p : p+1], true})
					worst = max(worst, relErr(got[0], want[p]))
				}
				t.Logf("worst relative error %.3g", worst)
				require.Less(t, worst, bound)
			})
		}
	}
}

// TestSlidingWindowMatchesReference runs a model with a 16-position
// sliding window over 80 tokens (a prefill in two chunks that cross the
// window's edge, then teacher-forced decode) and compares every sampled
// step's logits with the reference forward pass masked to the window. The
// same weights without the window must give other logits past it, so a
// runner that ignored the window would fail.
func TestSlidingWindowMatchesReference(t *testing.T) {
	const tol = 1e-5
	for _, typ := range []gguf.GGMLType{gguf.TypeF32, gguf.TypeF16} {
		spec := smallSpec(typ)
		plain := loadSynth(t, spec)
		spec.Window = 16
		m := loadSynth(t, spec)
		require.Equal(t, 256, m.MaxContext(), "a window model loads at its whole context")
		rng := rand.New(rand.NewPCG(3, 4))
		toks := make([]int32, 80)
		for i := range toks {
			toks[i] = int32(rng.IntN(m.cfg.Vocab))
		}
		want, unmasked := refForward(t, m, toks), refForward(t, plain, toks)
		require.Less(t, 1e-3, relErr(unmasked[40], want[40]), "the window must change the logits past it")
		require.Less(t, relErr(unmasked[15], want[15]), 1e-9, "within the window the models agree")
		for _, kt := range kernels.KVTypes {
			t.Run(fmt.Sprintf("%v/kv=%v", typ, kt), func(t *testing.T) {
				cfg := CPURunnerConfig{Seats: 2, KVBlocks: 12, BlockSize: 8, MaxBatchTokens: 64, KeepLogits: true, KVType: kt}
				r := newExactRunner(t, m, cfg)
				h := newHarness(t, r)
				s := newSeq(1, 11, 0, 7, 5, 1, 9, 3, 2, 10, 4)
				_, got := h.step(part{s, toks[:21], true})
				worst := relErr(got[0], want[20])
				_, got = h.step(part{s, toks[21:50], true})
				worst = max(worst, relErr(got[0], want[49]))
				for p := 50; p < len(toks); p++ {
					_, got = h.step(part{s, toks[p : p+1], true})
					worst = max(worst, relErr(got[0], want[p]))
				}
				t.Logf("worst relative error %.3g", worst)
				bound := tol
				if kt != kernels.F32 {
					bound = 0.02 // the 16-bit cache rounds K and V; the reference does not
				}
				require.Less(t, worst, bound)
			})
		}
	}
}

// TestSlidingWindowCascade runs three sequences that share a two-block
// prefix, grouped every step (step.Grouper), on a model with a 24-position
// window, teacher-forced from a 4-token prefill chunk to context 50: the
// members share the prefix while their window covers it and take the
// plain, masked path once it does not. Every step's logits must equal the
// masked reference forward of each sequence's own tokens.
func TestSlidingWindowCascade(t *testing.T) {
	const tol = 1e-5
	const bs, members, prefixLen, chunk, steps = 8, 3, 16, 4, 30
	spec := smallSpec(gguf.TypeF32)
	spec.Window = 24
	m := loadSynth(t, spec)
	rng := rand.New(rand.NewPCG(5, 6))
	draw := func(n int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(rng.IntN(m.cfg.Vocab))
		}
		return s
	}
	prefix := draw(prefixLen)
	toks, want := make([][]int32, members), make([][][]float32, members)
	for i := range toks {
		toks[i] = append(append([]int32(nil), prefix...), draw(chunk+steps)...)
		want[i] = refForward(t, m, toks[i])
	}
	cfg := CPURunnerConfig{Seats: members + 1, KVBlocks: 64, BlockSize: bs, MaxBatchTokens: 64, KeepLogits: true}
	r := newExactRunner(t, m, cfg)
	h := newHarness(t, r)
	h.step(part{newSeq(members, 0, 1, 2), prefix, false}) // the prefix into blocks 0 and 1
	parts := make([]part, members)
	for i := range parts {
		s := newSeq(int32(i), append(iota32(0, prefixLen/bs), iota32(10+i*8, 8)...)...)
		s.ctx = prefixLen
		s.history = append([]int32(nil), prefix...)
		parts[i] = part{s, toks[i][prefixLen : prefixLen+chunk], true}
	}
	g := step.Grouper{MinBlocks: 2}
	var worst float64
	shared := 0
	for n := 0; n <= steps; n++ {
		h.build(parts...)
		g.Group(&h.b, bs)
		require.Len(t, h.b.Groups, 1, "step %d: the prefix is shared", n)
		require.NoError(t, r.Execute(&h.b, &h.out))
		require.NoError(t, r.Check())
		for i := range parts {
			p := &parts[i]
			p.s.ctx += int32(len(p.toks))
			p.s.started = true
			if p.s.ctx <= int32(spec.Window) {
				shared++
			}
			worst = max(worst, relErr(r.Logits(i), want[i][p.s.ctx-1]))
			if n < steps {
				p.toks = toks[i][p.s.ctx : p.s.ctx+1]
			}
		}
	}
	t.Logf("worst relative error %.3g; %d member steps within the window", worst, shared)
	require.Positive(t, shared, "some steps must take the shared pass")
	require.Less(t, worst, tol)
}

package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
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
